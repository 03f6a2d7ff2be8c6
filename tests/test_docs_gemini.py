"""The second worked example of docs/adding-a-backend.md, followed as a reader would (see
walkthrough): a backend for a Gemini-style API that fragbench ships no SDK for, on
`fragbench.transport.JSONSession`, whose tests describe the API to the kit through the public
`fragbench.testing.loopback.Shape` and pass the whole fault suite; then a series of its own
against a loopback server of that same shape (the doc's, loaded from its text).

Real subprocesses, as for the first example: what is under test is the install into an
environment and plugin discovery from it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import polars as pl
import pytest
from support.suite import ROOT
from support.walkthrough import blocks, follow

from fragbench.testing.loopback import Server, Shape

pytestmark = pytest.mark.slow

DOC = ROOT / "docs" / "adding-a-backend.md"
PART = "## A second example"
KEY = "mg-your-key"


def doc_shape(tmp: Path) -> Shape:
    """The doc's `GenerateContent` shape, from the doc's own text."""
    [block] = [b for b in blocks(DOC, PART) if b.file and b.file.endswith(
        "generate_content.py")]
    path = tmp / "doc_generate_content.py"
    path.write_text(block.text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("doc_generate_content", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    shape: Shape = module.GenerateContent()
    return shape


def test_a_backend_for_an_api_with_no_sdk_from_scratch(tmp_path: Path) -> None:
    shape = doc_shape(tmp_path)
    with Server(shape) as provider:
        ran = follow(DOC, tmp_path, replace={"http://127.0.0.1:8001": provider.base_url},
                     start=PART)
        requests = list(provider.requests)
    # The package's tests ran the whole fault suite, through the doc's shape, and passed.
    assert any("1 passed" in r.stdout for r in ran)
    assert "72 of 72 calls sent" in ran[-1].stdout
    # One request per planned call, each to the model's path, the limit nested in the body,
    # the key in its header, never in the URL.
    assert len(requests) == 72
    assert {r["path"] for r in requests} == {"/v1beta/models/mini-g-1:generateContent"}
    assert {shape.model_of(r) for r in requests} == {"mini-g-1"}
    assert all(shape.limits_of(r) == {"generationConfig.maxOutputTokens": 1200}
               for r in requests)
    assert all(r["headers"]["x-goog-api-key"] == KEY for r in requests)
    series = tmp_path / "fragbench" / "outputs" / "mini-gemini" / "mini-gemini" / "mini-gemini"
    calls = pl.read_parquet(series / "calls.parquet")
    assert calls.height == 72
    assert calls["status"].unique().to_list() == ["completed"]
    assert calls["model"].unique().to_list() == ["mini-g-1"]
    # Costed from usageMetadata: the kit's default usage has cached and thinking tokens, so
    # a backend reading either wrong would price every call otherwise.
    assert calls["cost_usd"].is_not_null().all()
    assert (calls["cached_tokens"] == 100).all() and (calls["reasoning_tokens"] == 200).all()
    first = calls.row(0, named=True)
    # The first answer (the kit's usage for request 0) says promptTokenCount 400,
    # candidatesTokenCount 100 and thoughtsTokenCount 200: the thinking is billed as output,
    # so the core's output is the two counts summed.
    assert first["output_tokens"] == 100 + 200 and first["input_tokens"] == 400
    # (400 - 100) x 0.30 + 100 x 0.075 + 300 x 2.50, per million tokens.
    assert str(first["cost_usd"]).rstrip("0") == "0.0008475"
    # The fake key the doc exports is redacted from everything written: the series, the
    # experiment, the budget ledgers.
    checkout = tmp_path / "fragbench"
    written = [checkout / "outputs", checkout / "experiments" / "mini-gemini",
               Path(os.environ["FRAGBENCH_LEDGER_DIR"])]
    files = [p for folder in written for p in folder.rglob("*") if p.is_file()]
    assert any(p.name == "mini-gemini.jsonl" for p in files)  # the ledger is among them
    for path in files:
        assert KEY.encode() not in path.read_bytes(), path
