"""Issue 26: the kit's loopback server serves a series of any size within the plan's bounds.

A 2,000-call series of 500 generated HotpotQA-format questions, `fragbench new experiment`'s
defaults with the ceiling raised for its size, sent by the real openai SDK (4 in flight, the
config's own `max_in_flight`) to `fragbench.testing.loopback.Server("responses")` at its
documented `base_url`: every call completes, none is stopped by a usage outside the plan's
bounds (request 901 of the old default usage reported 1,201 output tokens against a limit of
1,200), and every reported usage stays within the request's own output limit.
"""

from __future__ import annotations

import re
from itertools import pairwise
from pathlib import Path

import polars as pl
import pytest
from support.cli import run_cli
from support.hotpotqa_data import generate, write

from fragbench.testing.loopback import Server

pytestmark = pytest.mark.slow  # 2,000 calls through the SDK

QUESTIONS = 500  # 4 calls each (variants A and B, retrieval and full)


def _experiment(root: Path) -> Path:
    write(root / "hotpot.json", generate(QUESTIONS))
    for args in (("import", "hotpotqa", str(root / "hotpot.json"), "--out", str(root / "corpus")),
                 ("new", "experiment", "big", "--dir", str(root), "--corpus",
                  str(root / "corpus"))):
        ran = run_cli(*args)
        assert ran.returncode == 0, ran.stderr
    config = root / "big" / "config.toml"
    text = config.read_text(encoding="utf-8")
    # 2,000 calls reserve far more than the default 2 USD: a new budget, its ceiling set for
    # the series' size before the first freeze.
    config.write_text(re.sub(r'(?m)^ceiling_usd = "2"$', 'ceiling_usd = "1000"', text),
                      encoding="utf-8")
    ran = run_cli("freeze", str(root / "big"))
    assert ran.returncode == 0, ran.stderr
    return root / "big"


def test_the_kits_server_answers_a_2000_call_series(tmp_path: Path) -> None:
    experiment = _experiment(tmp_path)
    with Server("responses") as server:
        ran = run_cli("run", str(experiment), "--series", "openai", "--backend", "openai",
                      "--out", str(tmp_path / "out"),
                      env={"OPENAI_API_KEY": "sk-loopback", "OPENAI_BASE_URL": server.base_url})
        assert ran.returncode == 0, ran.stderr[-2000:]
        assert len(server.requests) == 2000
        limits = {r["body"]["max_output_tokens"] for r in server.requests}
    calls = pl.read_parquet(tmp_path / "out" / "big" / "openai" / "calls.parquet")
    assert calls.height == 2000
    assert calls["status"].unique().to_list() == ["completed"]
    assert calls["stop_reason"].null_count() == 2000
    assert calls["output_tokens"].max() <= min(limits)  # type: ignore[operator]
    # neighbouring calls keep usages of their own (a cost on the wrong call shows)
    ordered = calls.sort("seq")["output_tokens"].to_list()
    assert all(a != b for a, b in pairwise(ordered))
