"""Series collected against the loopback server through the real openai SDK, and their
tables read back (a calls-table row built by hand, a series stopped at a chosen call)."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path
from typing import Any

import polars as pl

from fragbench.series.folder import CALLS_SCHEMA
from fragbench.testing.loopback import (
    Server,
)
from support.cli import run_cli
from support.suite import CANARY_KEY


def assert_no_secret(result: Any, root: Path) -> None:
    for secret in SECRETS:
        assert secret not in result.stdout and secret not in result.stderr
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for secret in SECRETS:
                assert secret.encode() not in data, (secret, path)


def calls_of(series_dir: Path) -> pl.DataFrame:
    return pl.read_parquet(series_dir / "calls.parquet").sort("seq")


def collect(experiment: Path, server: Server, series: str = "openai",
            extra: tuple[str, ...] = ()) -> tuple[Any, Path]:
    out = experiment.parent.parent / "outputs"
    result = run_cli("run", str(experiment), "--series", series, "--backend", "openai",
                     "--out", str(out), *extra,
                     env={"OPENAI_API_KEY": CANARY_KEY, "OPENAI_BASE_URL": server.base_url})
    assert "Traceback" not in result.stderr, result.stderr
    series_dir = out / "protocol-1.0" / series
    assert_no_secret(result, experiment.parent.parent)
    return result, series_dir


ORG = "org-AbCdEfGhIjKlMnOpQrStUvWx"


PROJECT = "proj_AbCdEfGhIjKlMnOpQrStUvWx"


SECRETS = (CANARY_KEY, "org-SECRETACCOUNT123", ORG, PROJECT, "Bearer ")


def assert_stopped_at(result: Any, series_dir: Path, seq: int, failure: str) -> dict[str, Any]:
    """Stopped as a technical failure at call `seq`: every call before it answered, none after
    it sent. Returns that call's row."""
    assert result.returncode == 3, result.stderr
    assert f"stopped at call {seq}" in result.stderr and "technical_failure" in result.stderr
    calls = calls_of(series_dir)
    assert calls["status"][:seq - 1].to_list() == ["completed"] * (seq - 1)
    assert calls["status"][seq:].to_list() == ["not_sent"] * (calls.height - seq)
    row = calls.row(seq - 1, named=True)
    assert row["stop_reason"] == "technical_failure" and row["failure"] == failure
    assert calls["stop_reason"].null_count() == calls.height - 1
    status = json.loads((series_dir / "status.json").read_text(encoding="utf-8"))
    assert status["state"] == "stopped" and status["stop"]["seq"] == seq
    return row


def collect_at(experiment: Path, base_url: str) -> tuple[Any, Path]:
    """`collect` with OPENAI_BASE_URL pointing wherever the test needs, no server implied."""
    out = experiment.parent.parent / "outputs"
    result = run_cli("run", str(experiment), "--series", "openai", "--backend", "openai",
                     "--out", str(out),
                     env={"OPENAI_API_KEY": CANARY_KEY, "OPENAI_BASE_URL": base_url})
    assert "Traceback" not in result.stderr, result.stderr
    assert_no_secret(result, experiment.parent.parent)
    return result, out / "protocol-1.0" / "openai"


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on: bound to learn it, then released."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def outcome_of(path: Path, seq: int) -> dict[str, Any]:
    return next(r for r in records(path) if r["type"] == "outcome" and r["seq"] == seq)


def body_of(path: Path, seq: int) -> str | None:
    """Call `seq`'s recorded body as the tables read it: its outcome's own `raw`, else its
    last `received` one (each body is journaled once)."""
    outcome = outcome_of(path, seq)
    if "raw" in outcome:
        return outcome["raw"]
    bodies = [r["raw"] for r in records(path) if r["type"] == "received" and r["seq"] == seq]
    return bodies[-1] if bodies else None


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def loopback_series(experiment: Path, server: Server, name: str) -> Path:
    result = run_cli("run", str(experiment), "--series", name, "--backend", "openai",
                     "--out", str(experiment.parent.parent / "outputs"),
                     env={"OPENAI_API_KEY": CANARY_KEY, "OPENAI_BASE_URL": server.base_url})
    assert "Traceback" not in result.stderr
    return experiment.parent.parent / "outputs" / "protocol-1.0" / name


def three_series(extractive: Path) -> list[Path]:
    """The demo series and two copies; the third's one cell counts a valid citation less."""
    made = [extractive]
    for name in ("copy-b", "copy-c"):
        shutil.copytree(extractive, extractive.parent / name)
        made.append(extractive.parent / name)
    per_call = made[2] / "citations_per_call.parquet"
    table = pl.read_parquet(per_call)
    table.with_columns(pl.when(pl.col("call_id") == "price-en-A-full-r2")
                       .then(pl.col("n_valid") - 1).otherwise(pl.col("n_valid"))
                       .alias("n_valid")).write_parquet(per_call)
    return made


def call(call_id: str, lang: str, supplied: list[str], citations: list[tuple[str, str]] | None,
         ) -> dict:
    row = {name: None for name in CALLS_SCHEMA}
    row.update({"call_id": call_id, "seq": 1, "case": "c", "lang": lang, "variant": "A",
                "mode": "retrieval", "rep": 1, "status": "completed", "supplied_ids": supplied,
                "parsed": citations is not None, "answer": "…",
                "citations": None if citations is None else
                [{"id": i, "extract": e} for i, e in citations]})
    return row
