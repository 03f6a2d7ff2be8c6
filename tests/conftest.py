from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from loopback import Handler, Server, answer_for
from typer.testing import CliRunner

from fragbench.cli import app

PATIENCE = 300.0
"""How long a step may take on a loaded machine before a test gives up: a bound on a failure,
never a timing a passing run must meet."""
ROOT = Path(__file__).resolve().parent.parent
PROVIDER = ("OPENAI_", "ANTHROPIC_")
"""A test never inherits a provider's key or endpoint from the machine it runs on."""
CANARY_KEY = "sk-proj-CANARYcanary0123456789abcdefXYZ"
COMMITTED_EXPERIMENTS = ("protocol-1.0", "protocol-1.0-anthropic", "protocol-1.0-openai-chat",
                         "protocol-1.0-token-window")
"""The experiments the repository ships, by name: a test copies and counts only these, never
what a user added under experiments/ (as the worked examples in docs/ have them do)."""


TERMINAL_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


def _deaf(signum: int, frame: Any) -> None:
    """Does nothing: this process stays as deaf to the signal as when it ignored it."""


@contextlib.contextmanager
def signals_at_default() -> Iterator[None]:
    """Wrap the start of a process a test will send SIGINT, SIGTERM or SIGHUP: it begins with
    them at their default, as a terminal's foreground job does, even when pytest inherited
    them ignored (`nohup make test` ignores SIGHUP; a non-interactive shell's background job,
    `make test &`, ignores SIGINT). fragbench keeps an inherited ignore as the user's choice,
    so a test signalling that run would otherwise wait for nothing.

    An ignored signal stays ignored across exec, a caught one starts at its default: while
    the process starts, this one catches each ignored signal with a handler that does
    nothing, then ignores it again. Only here, never for the whole session: the suite's own
    processes (xdist workers, Ray clusters) keep the protection `nohup` gave them."""
    import signal

    ignored = [getattr(signal, name) for name in TERMINAL_SIGNALS
               if signal.getsignal(getattr(signal, name)) is signal.SIG_IGN]
    for signum in ignored:
        signal.signal(signum, _deaf)
    try:
        yield
    finally:
        for signum in ignored:
            signal.signal(signum, signal.SIG_IGN)


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


@attrs.frozen
class Ran:
    """What a command did, shaped like subprocess.CompletedProcess."""

    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, env: dict[str, str] | None = None) -> Ran:
    """The real command, in process (Typer's runner): the same parsing, output and exit codes
    as from a shell, without paying interpreter start-up and imports for every call. An
    internal error (a bug) is not turned into an exit code: it raises, and the test fails with
    its traceback."""
    overrides: dict[str, str | None] = {k: None for k in os.environ if k.startswith(PROVIDER)}
    overrides.update(env or {})
    result = CliRunner().invoke(app, list(args), env=overrides, catch_exceptions=False)
    return Ran(result.exit_code, result.stdout, result.stderr)


def error_lines(stderr: str) -> list[str]:
    """The error lines of a command's stderr (phase and progress lines are not errors)."""
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.startswith("fragbench:")]


def process_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a subprocess under test: this one's, less any provider setting."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(PROVIDER)}
    env.update(extra or {})
    return env


def run_process(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
                ) -> subprocess.CompletedProcess[str]:
    """The real command in a subprocess: only where the process itself is under test
    (plugin discovery from the environment, start-up)."""
    return subprocess.run([sys.executable, "-m", "fragbench", *args], cwd=cwd or ROOT,
                          env=process_env(env), capture_output=True, text=True, check=False)


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


def refreeze(experiment: Path, old: str, new: str) -> None:
    """Change one setting of the experiment copy's config, then freeze its plan again."""
    config = experiment / "config.toml"
    text = config.read_text(encoding="utf-8")
    assert old in text, old
    config.write_text(text.replace(old, new), encoding="utf-8")
    frozen = run_cli("freeze", str(experiment))
    assert frozen.returncode == 0, frozen.stderr


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    """One browser per test process, shared by every browser test file (Playwright's sync API
    runs one event loop per thread: a second browser opened beside it would fail). Skipped,
    with the reason, where there is none; each test opens its own context, so no state passes
    between tests."""
    from browser import chromium_browser

    with chromium_browser() as browser:
        yield browser


def started_postgresql() -> Iterator[Any]:
    """A throwaway PostgreSQL server from the system's binaries (tests/pg_server.py), stopped
    and removed when the generator ends; the test skipped with one line naming what is missing
    where it cannot start. For a fixture: `yield from started_postgresql()`."""
    import pg_server

    why = pg_server.missing()
    if why is not None:
        pytest.skip(why)
    srv = pg_server.Server().start()
    try:
        yield srv
    finally:
        srv.stop()


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
