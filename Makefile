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

.PHONY: demo test chromium screenshots lint bench clean

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

test: $(STAMP) chromium
	$(VENV)/bin/ruff check src tests plugins benchmarks mutation
	$(VENV)/bin/pytest -q -n 2 --dist loadfile

# The browser tests (tests/test_browser.py) open report.html and the compare page in the system
# Chromium, driven by Playwright (no browser download). Where none is on PATH and we are root
# with apt-get (CI runs `make test` as root on a fresh machine), Debian's chromium is installed;
# otherwise one line says why the browser tests will be skipped (pytest's -ra summary repeats
# the reason) and the suite runs without them.
chromium:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then \
		:; \
	elif [ "$$(id -u)" != 0 ]; then \
		echo "make test: no Chromium, and not root: the browser tests will be skipped"; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
		echo "make test: no Chromium, and no apt-get: the browser tests will be skipped"; \
	else \
		echo "make test: installing Debian's chromium for the browser tests (apt-get)"; \
		export DEBIAN_FRONTEND=noninteractive; \
		{ timeout 300 apt-get update -qq >/dev/null && timeout 900 apt-get install -y -qq chromium >/dev/null; } || \
			echo "make test: apt-get could not install chromium: the browser tests will be skipped"; \
	fi

# The PNGs under docs/screenshots/: the demo series' report.html and a stopped loopback
# series' report.html, rendered in the same Chromium as the browser tests.
screenshots: $(STAMP) chromium
	$(VENV)/bin/python docs/screenshots/make_screenshots.py

# The benchmarks need the `bench` dependency group (bm25s, rank-bm25), which the other targets
# do not install. Corpora go to a temporary folder, removed at the end.
bench: $(STAMP)
	$(UV) sync --frozen --inexact --compile-bytecode --group bench --quiet
	$(VENV)/bin/python benchmarks/bench_collection.py
	$(VENV)/bin/python benchmarks/bench_process.py
	$(VENV)/bin/python benchmarks/bench_figures.py

clean:
	rm -rf .bootstrap $(VENV) outputs/demo
