# Two commands on a fresh machine with only Python 3.11+ and make: `make demo`, `make test`.
# uv is bootstrapped into .bootstrap/ with pip, then installs the locked environment (uv.lock)
# into .venv/.
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

$(STAMP): $(UV) pyproject.toml uv.lock plugins/fragbench-sliding-window/pyproject.toml
	$(UV) sync --frozen --python $(PYTHON) --quiet
	touch $(STAMP)

# The demo's series are scratch: outputs/demo is replaced on every run. Recorded series live
# elsewhere and are never overwritten. Two runs of the offline baseline, so that the README's
# `compare` example has two series to set side by side (they agree: the baseline is
# deterministic).
demo: $(STAMP)
	rm -rf outputs/demo
	$(VENV)/bin/fragbench run experiments/protocol-1.0 --series extractive --out outputs/demo
	$(VENV)/bin/fragbench run experiments/protocol-1.0 --series extractive-again --backend extractive --out outputs/demo

test: $(STAMP)
	$(VENV)/bin/ruff check src tests plugins benchmarks
	$(VENV)/bin/pytest -q -n 2 --dist loadfile

bench: $(STAMP)
	$(VENV)/bin/python benchmarks/bench_retrieval.py

clean:
	rm -rf .bootstrap $(VENV) outputs/demo
