# Two commands on a fresh machine with only Python 3.11+ and make: `make demo`, `make test`.
# uv is bootstrapped into .bootstrap/ with pip, then installs the locked environment (uv.lock)
# into .venv/, compiled to bytecode once (this environment writes none at run time, so every
# process would otherwise recompile every module it imports). `--inexact` keeps a plugin that
# a user installed by hand (docs/plugins.md, "Installing a plugin").
PYTHON ?= python3
UV_VERSION := 0.13.9
UV := .bootstrap/bin/uv
VENV := .venv
STAMP := $(VENV)/.synced
export UV_PYTHON_DOWNLOADS := never

.PHONY: demo test lint bench clean

$(UV):
	$(PYTHON) -m venv .bootstrap
	.bootstrap/bin/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

$(STAMP): $(UV) pyproject.toml uv.lock $(wildcard plugins/*/pyproject.toml)
	$(UV) sync --frozen --inexact --compile-bytecode --python $(PYTHON) --quiet
	$(VENV)/bin/python -m compileall -q src plugins
	touch $(STAMP)

# The demo's series are scratch: outputs/demo is replaced on every run. Recorded series live
# elsewhere and are never overwritten. Two runs of the offline baseline, so that the README's
# `compare` example has two series to set side by side (they agree: the baseline is
# deterministic). Then the token-window chunker's experiment, whose sensitivity matrix (token
# windows that cut sentences, whole and cut facts) is published the same way.
demo: $(STAMP)
	rm -rf outputs/demo
	$(VENV)/bin/fragbench run experiments/protocol-1.0 --series extractive --out outputs/demo
	$(VENV)/bin/fragbench run experiments/protocol-1.0 --series extractive-again --backend extractive --out outputs/demo
	$(VENV)/bin/fragbench run experiments/protocol-1.0-token-window --series extractive --out outputs/demo

test: $(STAMP)
	$(VENV)/bin/ruff check src tests plugins benchmarks mutation
	$(VENV)/bin/pytest -q -n 2 --dist loadfile

# The benchmarks need the `bench` dependency group (bm25s, rank-bm25), which the other targets
# do not install. Corpora go to a temporary folder, removed at the end.
bench: $(STAMP)
	$(UV) sync --frozen --inexact --compile-bytecode --group bench --quiet
	$(VENV)/bin/python benchmarks/bench_collection.py
	$(VENV)/bin/python benchmarks/bench_process.py

clean:
	rm -rf .bootstrap $(VENV) outputs/demo
