"""fragbench's test kit for plugin authors: loopback model servers and contract checks.

    from fragbench.testing import check_backend, check_chunker, check_scorer

- `fragbench.testing.loopback`: `Server(api)` for the `responses`, `chat` and `messages` API
  shapes, with scriptable faults (`ok`, `http_error`, `redirect`, `sleep`, `trickle`, `drop`,
  ...) and hostile bytes (`followed_by` + `second_response`, `lying_length`, `edited`,
  `gzipped`, `gzip_bomb`, `raw_bytes`); each request records the connection it came on;
- `fragbench.testing.contracts`: `check_chunker`, `check_scorer`, `check_backend` (the fault
  suite), each failing with an AssertionError that names the promise that broke;
- `fragbench.testing.plugin`: the pytest plugin (entry point `pytest11`), loaded wherever
  fragbench is installed: fixtures `responses_server`, `chat_server`, `messages_server`,
  `fragbench_ledger_dir`;
- `fragbench.testing.samples`: the small bilingual corpus the checks feed a plugin.

The names below are resolved on first use: the pytest plugin imports this package in every
pytest run, and must not pull in Polars or an SDK there (docs/testing-kit.md).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "check_chunker": "fragbench.testing.retrieval_checks",
    "check_scorer": "fragbench.testing.retrieval_checks",
    "check_backend": "fragbench.testing.contracts",
    "default_pricing": "fragbench.testing.contracts",
    "FAKE_KEY": "fragbench.testing.contracts",
    "Server": "fragbench.testing.loopback",
    "API_SHAPES": "fragbench.testing.loopback",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'fragbench.testing' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
