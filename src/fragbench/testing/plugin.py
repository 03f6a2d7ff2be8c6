"""The pytest plugin of fragbench's test kit, registered through the `pytest11` entry point
(`fragbench = "fragbench.testing.plugin"`), the way pytest plugins ship: wherever fragbench is
installed, a plugin's own tests get these fixtures with no conftest.

- `responses_server`, `chat_server`, `messages_server`: a started loopback server
  (`fragbench.testing.loopback.Server`) of that API shape, stopped after the test. Script its
  faults (`server.script[n] = http_error(500)`), read what it received (`server.requests`),
  and point a backend at `server.base_url`.
- `fragbench_ledger_dir`: FRAGBENCH_LEDGER_DIR pointed at a fresh folder, so that a test that
  runs a priced series never touches the user's real budget ledgers.

Loaded in every pytest run of an environment holding fragbench, so it imports nothing heavy
here: the loopback server is imported when a fixture is first used, and never Polars or an SDK.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from fragbench.testing.loopback import Server


def _serve(api: str) -> Iterator[Server]:
    from fragbench.testing.loopback import Server

    with Server(api) as server:
        yield server


@pytest.fixture
def responses_server() -> Iterator[Server]:
    """A loopback OpenAI Responses API server (`POST /v1/responses`; `base_url` ends in /v1)."""
    yield from _serve("responses")


@pytest.fixture
def chat_server() -> Iterator[Server]:
    """A loopback Chat Completions server (`POST /v1/chat/completions`; `base_url` ends in
    /v1)."""
    yield from _serve("chat")


@pytest.fixture
def messages_server() -> Iterator[Server]:
    """A loopback Anthropic Messages API server (`POST /v1/messages`; `base_url` is the bare
    host, as the anthropic SDK wants it)."""
    yield from _serve("messages")


@pytest.fixture
def fragbench_ledger_dir(tmp_path_factory: pytest.TempPathFactory,
                         monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh budget-ledger store for this test (FRAGBENCH_LEDGER_DIR), restored after."""
    store = tmp_path_factory.mktemp("fragbench-ledgers")
    monkeypatch.setenv("FRAGBENCH_LEDGER_DIR", str(store))
    return store
