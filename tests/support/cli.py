"""The command under test: in process (Typer's runner) or as a process, its error lines, and
the environment a test gives it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import attrs
from typer.testing import CliRunner

from fragbench.cli.commands import app
from support.suite import ROOT

PROVIDER = ("OPENAI_", "ANTHROPIC_")
"""A test never inherits a provider's key or endpoint from the machine it runs on."""


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
    """The environment of a subprocess under test: this one's, less any provider setting,
    and writing no bytecode: a subprocess run under a file-size limit (a full disk) would
    leave a truncated .pyc in the checkout (CPython does not check its short write), and
    every later import of that module would fail."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(PROVIDER)}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra or {})
    return env


def run_process(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
                ) -> subprocess.CompletedProcess[str]:
    """The real command in a subprocess: only where the process itself is under test
    (plugin discovery from the environment, start-up)."""
    return subprocess.run([sys.executable, "-m", "fragbench", *args], cwd=cwd or ROOT,
                          env=process_env(env), capture_output=True, text=True, check=False)


def refreeze(experiment: Path, old: str, new: str) -> None:
    """Change one setting of the experiment copy's config, then freeze its plan again."""
    config = experiment / "config.toml"
    text = config.read_text(encoding="utf-8")
    assert old in text, old
    config.write_text(text.replace(old, new), encoding="utf-8")
    frozen = run_cli("freeze", str(experiment))
    assert frozen.returncode == 0, frozen.stderr
