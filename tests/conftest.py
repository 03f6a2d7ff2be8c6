from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopback import Server

ROOT = Path(__file__).resolve().parent.parent
CANARY_KEY = "sk-proj-CANARYcanary0123456789abcdefXYZ"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A copy of the experiment and its corpus, laid out as in the repository."""
    name = Path("experiments") / "protocol-1.0"
    shutil.copytree(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "corpus", tmp_path / "corpus")
    return tmp_path


@pytest.fixture
def experiment(workspace: Path) -> Path:
    return workspace / "experiments" / "protocol-1.0"


@pytest.fixture
def extractive(experiment: Path, workspace: Path) -> Path:
    """The offline series, run exactly as `make demo` runs it, in the workspace copy."""
    result = run_cli("run", str(experiment), "--series", "extractive",
                     "--out", str(workspace / "outputs"))
    assert result.returncode == 0, result.stderr
    assert "non-model baseline" in result.stdout and "report.md" in result.stdout
    assert "72 of 72 calls sent; spent 0 USD" in result.stdout
    return workspace / "outputs" / "protocol-1.0" / "extractive"


def run_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The real command, in a subprocess, as a user would run it."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "fragbench", *args], cwd=cwd or ROOT,
                          env=full_env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def server() -> Iterator[Server]:
    with Server() as srv:
        yield srv


def refreeze(experiment: Path, old: str, new: str) -> None:
    """Change one setting of the experiment copy's config, then freeze its plan again."""
    config = experiment / "config.toml"
    text = config.read_text(encoding="utf-8")
    assert old in text, old
    config.write_text(text.replace(old, new), encoding="utf-8")
    frozen = run_cli("freeze", str(experiment))
    assert frozen.returncode == 0, frozen.stderr
