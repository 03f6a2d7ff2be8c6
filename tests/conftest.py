"""The fixtures shared by the test modules, and only those: what they share besides fixtures is
in tests/support/ (issue 25, item 4).
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cli import run_cli
from support.corpora import TOML_CORPUS
from support.pg_server import started_postgresql
from support.processes import answer_when_opened
from support.suite import COMMITTED_EXPERIMENTS, PATIENCE, ROOT

from fragbench.corpus.cases import Case, load_corpus
from fragbench.testing.loopback import Handler, Server, answer_for


@pytest.fixture(autouse=True)
def ledger_store(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
                 ) -> Path:
    """Every test draws on budgets of its own: the ledger store is a fresh folder (the real
    one, under the user's data folder, is never touched by the tests)."""
    store = tmp_path_factory.mktemp("ledgers")
    monkeypatch.setenv("FRAGBENCH_LEDGER_DIR", str(store))
    return store


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A copy of the committed experiments and their corpus, laid out as in the repository."""
    for name in COMMITTED_EXPERIMENTS:
        shutil.copytree(ROOT / "experiments" / name, tmp_path / "experiments" / name,
                        ignore=shutil.ignore_patterns("outputs"))
    shutil.copytree(ROOT / "corpus", tmp_path / "corpus")
    return tmp_path


@pytest.fixture
def experiment(workspace: Path) -> Path:
    return workspace / "experiments" / "protocol-1.0"


@pytest.fixture(scope="session")
def extractive_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The offline series, run once per test process exactly as `make demo` runs it."""
    root = tmp_path_factory.mktemp("extractive-once")
    name = Path("experiments") / "protocol-1.0"
    shutil.copytree(ROOT / name, root / name)
    shutil.copytree(ROOT / "corpus", root / "corpus")
    result = run_cli("run", str(root / name), "--series", "extractive",
                     "--out", str(root / "outputs"))
    assert result.returncode == 0, result.stderr
    assert "non-model baseline" in result.stdout and "report.md" in result.stdout
    assert "72 of 72 calls sent; spent 0 USD" in result.stdout
    return root / "outputs" / "protocol-1.0" / "extractive"


@pytest.fixture
def extractive(extractive_once: Path, workspace: Path) -> Path:
    """A copy of that series in this test's workspace: a test may change it freely."""
    series_dir = workspace / "outputs" / "protocol-1.0" / "extractive"
    shutil.copytree(extractive_once, series_dir)
    return series_dir


@pytest.fixture
def server() -> Iterator[Server]:
    with Server() as srv:
        yield srv


@pytest.fixture
def held(server: Server) -> Iterator[threading.Event]:
    """Every request is held by the loopback server until the test opens the gate (`set()`):
    calls stay in flight as long as the test needs them there (opened at the end whatever
    happened, so no handler outlives the test)."""
    gate = threading.Event()

    def answer(handler: Handler, number: int, body: dict[str, Any]) -> None:
        gate.wait(PATIENCE)
        try:
            handler.send_json(200, handler.server.shape.body(answer_for(body), number=number,
                                                             request=body))
        except OSError:  # the client abandoned the call and exited: expected here
            handler.close_connection = True

    server.default = answer
    yield gate
    gate.set()


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    """One browser per test process, shared by every browser test file (Playwright's sync API
    runs one event loop per thread: a second browser opened beside it would fail). Skipped,
    with the reason, where there is none; each test opens its own context, so no state passes
    between tests."""
    from support.browser import chromium_browser

    with chromium_browser() as browser:
        yield browser


@pytest.fixture(scope="session")
def postgresql_server() -> Iterator[Any]:
    """One throwaway PostgreSQL server per test process (`started_postgresql`)."""
    yield from started_postgresql()


@pytest.fixture
def ledger_url(postgresql_server: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """The PostgreSQL store selected for this test (FRAGBENCH_LEDGER_URL, with a password):
    a fresh database of its own, and no FRAGBENCH_LEDGER_DIR beside it."""
    url = str(postgresql_server.new_database())
    monkeypatch.delenv("FRAGBENCH_LEDGER_DIR", raising=False)
    monkeypatch.setenv("FRAGBENCH_LEDGER_URL", url)
    return url


@pytest.fixture
def gate(server: Server) -> Iterator[threading.Event]:
    """Call 2 is held by the server until the test opens the gate."""
    opened = threading.Event()
    server.script[1] = answer_when_opened(opened)
    yield opened
    opened.set()  # never leave a handler waiting


@pytest.fixture(scope="module")
def toml_cases() -> list[Case]:
    return load_corpus([TOML_CORPUS])
