"""fragbench's test kit for plugin authors: loopback model servers and contract checks.

    from fragbench.testing import check_backend, check_chunker, check_scorer

- `fragbench.testing.retrieval_checks`: `check_chunker`, `check_scorer`, on the kit's sample
  corpus, each failing with an AssertionError that names the promise that broke;
- `fragbench.testing.contracts`: `check_backend`, the fault suite a backend runs against the
  loopback servers (retries, swallowed errors, usage misread, redirects, hostile bytes, ...);
- `fragbench.testing.loopback`: `Server(api)` for the `responses`, `chat` and `messages` API
  shapes, with scriptable faults (`ok`, `http_error`, `redirect`, `sleep`, `trickle`, `drop`,
  ...) and hostile bytes (`followed_by` + `second_response`, `lying_length`, `edited`,
  `gzipped`, `gzip_bomb`, `raw_bytes`); each request records the connection it came on;
- `fragbench.testing.plugin`: the pytest plugin (entry point `pytest11`), loaded wherever
  fragbench is installed: fixtures `responses_server`, `chat_server`, `messages_server`,
  `fragbench_ledger_dir`;
- `fragbench.testing.samples`: the small bilingual corpus the checks feed a plugin;
- `fragbench.testing.promises`: how every check fails (`fail`), for a check of your own.

The names below are resolved on first use: the pytest plugin imports this package in every
pytest run, and must not pull in Polars or an SDK there (docs/testing-kit.md).
"""

from __future__ import annotations

from fragbench.lazy import reexport

_EXPORTS = {
    "check_chunker": "retrieval_checks",
    "check_scorer": "retrieval_checks",
    "check_measure": "measure_checks",
    "check_backend": "contracts",
    "default_pricing": "contracts",
    "FAKE_KEY": "contracts",
    "Server": "loopback",
    "API_SHAPES": "loopback",
}
"""Each kit name, and the submodule of `fragbench.testing` that defines it."""

_SUBMODULES = ("contracts", "loopback", "measure_checks", "measure_samples", "plugin", "promises",
               "retrieval_checks", "samples")
"""The kit's public submodules, listed in `__all__` so that the API reference
(docs/hooks.py, docs/reference/testing/) documents each; a new public submodule goes here too."""

__all__ = [*sorted(_EXPORTS), *_SUBMODULES]

# A kit name's module is imported on first use, as every package's border does; the name then
# stays in this namespace (the API reference reads it there, and a second use costs nothing).
__getattr__, __dir__ = reexport(__name__, _EXPORTS)
