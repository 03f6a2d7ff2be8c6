# Two commands on a fresh machine with only Python 3.11+ and make: `make demo`, `make test`.
# uv is bootstrapped into .bootstrap/ with pip, then installs the locked environment (uv.lock)
# into .venv/, compiled to bytecode once (this environment writes none at run time, so every
# process would otherwise recompile every module it imports). `--inexact` keeps a plugin that
# a user installed by hand (docs/plugins.md, "Installing a plugin").
#
# In two steps, each once, each with its stamp: `make demo` installs fragbench, its runtime
# dependencies and the `demo` group (the token-window chunker its second experiment uses), no
# development tool and no extra; `make test` (and `lint`, `check`, `docs`, `screenshots`) adds
# the `dev` group and the extras (collection mode's numba and scipy, Ray, psycopg) on top.
PYTHON ?= python3
UV_VERSION := 0.13.9
UV := .bootstrap/bin/uv
VENV := .venv
RUNTIME := $(VENV)/.synced-runtime
STAMP := $(VENV)/.synced
SYNC := $(UV) sync --frozen --inexact --compile-bytecode --python $(PYTHON)
RUFF := $(VENV)/bin/ruff check src tests plugins benchmarks mutation tools docs
export UV_PYTHON_DOWNLOADS := never

.PHONY: demo test check lint docs chromium postgresql screenshots bench clean

# Each step says what it does first: the first install takes a minute or so, and a silent
# minute looks like a hang. uv shows its own progress (a bar on a terminal; otherwise what it
# resolved and installed).
$(UV):
	@echo "make: bootstrapping uv $(UV_VERSION) into .bootstrap/ (first run only)"
	$(PYTHON) -m venv .bootstrap
	.bootstrap/bin/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

$(RUNTIME): $(UV) pyproject.toml uv.lock $(wildcard plugins/*/pyproject.toml)
	@echo "make: installing fragbench and its runtime dependencies (uv.lock) into .venv/ (first run, or after uv.lock changed)"
	$(SYNC) --no-default-groups --group demo
	@echo "make: compiling fragbench and its plugins to bytecode"
	$(VENV)/bin/python -m compileall -q src plugins
	touch $(RUNTIME)

$(STAMP): $(RUNTIME)
	@echo "make: adding the development environment (the dev group; the extras: collection mode's numba and scipy, Ray, psycopg) to .venv/ (first run, or after uv.lock changed)"
	$(SYNC) --all-extras
	@echo "make: compiling collection mode's loops (numba, once: about 15 s)"
	$(VENV)/bin/python -m fragbench.retrieval.collection.warm
	touch $(STAMP)

# The demo's series are scratch: outputs/demo is replaced on every run. Recorded series live
# elsewhere and are never overwritten. Two runs of the offline baseline, so that the README's
# `compare` example has two series to set side by side (they agree: the baseline is
# deterministic). Then the token-window chunker's experiment, whose sensitivity matrix (token
# windows that cut sentences, whole and cut facts) is published the same way.
demo: $(RUNTIME)
	rm -rf outputs/demo
	$(VENV)/bin/fragbench run experiments/protocol-1.0 --series extractive --out outputs/demo
	$(VENV)/bin/fragbench run experiments/protocol-1.0 --series extractive-again --backend extractive --out outputs/demo
	$(VENV)/bin/fragbench run experiments/protocol-1.0-token-window --series extractive --out outputs/demo

# pytest as `make test` and `make check` run it. Two settings that only save time:
# - the tests' temporary folders in /dev/shm where it can be written: every series they run
#   fsyncs its journal and ledger at every call, which a disk pays for and memory does not
#   (nothing in fragbench renames across file systems: atomic writes stay in their folder);
# - bytecode written (PYTHONDONTWRITEBYTECODE unset, where the environment sets it): pytest
#   then keeps each test module's assertion-rewritten code in __pycache__, instead of
#   rewriting all 300 of them in every worker at every run (about 6 s of each start).
PYTEST := env -u PYTHONDONTWRITEBYTECODE \
	TMPDIR=$$(test -d /dev/shm -a -w /dev/shm && echo /dev/shm || echo "$${TMPDIR:-/tmp}") \
	$(VENV)/bin/pytest

# Everything: ruff, then every test (the import contract, the type check and the docs site
# among them). `--dist loadfile` keeps a module on one worker: the Ray module's cluster and
# the scaffold's installs run once.
test: $(STAMP) chromium postgresql
	$(RUFF)
	$(PYTEST) -q -n 2 --dist loadfile

# ruff, the import contract (no import circle between modules or packages) and the type check:
# mypy over src/ (pyproject.toml's [tool.mypy]) against tools/mypy-baseline.txt, the errors
# allowed today; a new error fails, and so does a fixed one still listed, so the list only
# shrinks. mypy's cache (.mypy_cache/) makes a second run a few seconds; the first takes a minute.
lint: $(STAMP)
	$(RUFF)
	$(PYTEST) -q tests/test_import_graph.py
	$(VENV)/bin/python tools/typecheck.py

# The inner loop, under a minute: ruff, the type check (a few seconds once mypy's cache is warm)
# and the tests that run in this process. Those marked `slow` (a module whose tests start the
# CLI or a server in a subprocess, a Ray cluster, Chromium or PostgreSQL: pyproject.toml's
# markers) are left to `make test`.
check: $(STAMP)
	$(RUFF)
	$(VENV)/bin/python tools/typecheck.py
	$(PYTEST) -q -n 2 -m "not slow"

# The documentation site (mkdocs.yml): the guides under docs/, the plugin API reference rendered
# by mkdocstrings from the code's docstrings, and the CLI reference generated from the Typer app
# at build time (docs/hooks.py). Built offline into site/ (not committed); --strict fails on a
# broken link or anchor and on a public name without a docstring. `make test` builds it too,
# into a temporary folder (tests/test_docs_site.py). NO_MKDOCS_2_WARNING quiets a banner
# mkdocs-material prints about a future MkDocs, which does not concern this build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --clean --site-dir site
	@echo "make docs: open site/index.html (offline; for the search box, serve it: .venv/bin/python -m http.server -d site)"

# The browser tests (tests/report/test_browser.py) open report.html and the compare page in the system
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

# The PostgreSQL ledger tests (tests/budget/test_ledger_pg.py, and test_ledger.py's tests on both
# stores) start a throwaway server from the system's binaries (tests/support/pg_server.py: initdb and
# pg_ctl in a temporary folder, as the postgres user when root). Where there are none and we are
# root with apt-get (CI), Debian's postgresql is installed (its own cluster is not used);
# otherwise one line says the PostgreSQL tests will be skipped.
postgresql:
	@if command -v pg_config >/dev/null 2>&1 && [ -x "$$(pg_config --bindir)/initdb" ] || \
		ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then \
		:; \
	elif [ "$$(id -u)" != 0 ]; then \
		echo "make test: no PostgreSQL server binaries, and not root: the PostgreSQL tests will be skipped"; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
		echo "make test: no PostgreSQL server binaries, and no apt-get: the PostgreSQL tests will be skipped"; \
	else \
		echo "make test: installing Debian's postgresql for the ledger tests (apt-get)"; \
		export DEBIAN_FRONTEND=noninteractive; \
		{ timeout 300 apt-get update -qq >/dev/null && timeout 900 apt-get install -y -qq postgresql >/dev/null; } || \
			echo "make test: apt-get could not install postgresql: the PostgreSQL tests will be skipped"; \
	fi

# The PNGs under docs/screenshots/: the demo series' report.html and a stopped loopback
# series' report.html, rendered in the same Chromium as the browser tests.
screenshots: $(STAMP) chromium
	$(VENV)/bin/python docs/screenshots/make_screenshots.py

# The benchmarks need the `bench` dependency group (bm25s, rank-bm25, tantivy), which the other
# targets do not install. Corpora go to a temporary folder, removed at the end.
bench: $(STAMP)
	@echo "make: installing the bench group (bm25s, rank-bm25, tantivy) into .venv/"
	$(SYNC) --all-extras --group bench
	$(VENV)/bin/python benchmarks/bench_collection.py
	$(VENV)/bin/python benchmarks/bench_process.py
	$(VENV)/bin/python benchmarks/bench_figures.py

clean:
	rm -rf .bootstrap $(VENV) outputs/demo
