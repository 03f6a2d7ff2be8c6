"""The report's figures render, honestly, for a complete, a stopped and an empty series.

Every image is opened (PNG decoded, SVG read): it must be a real picture, name its series, and
for a non-model baseline carry the caveat in the image itself and in the PNG's metadata, so that
a copied file keeps it. The same tables must give the same files byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
from conftest import run_cli, run_process
from loopback import Server, http_error, ok
from matplotlib import image
from PIL import Image
from test_collect_openai import collect

from fragbench.figures import REASON_COLORS

NAMES = ("availability", "citations")


def figure_texts(series_dir: Path) -> dict[str, str]:
    """Check that each figure decodes and is a real picture; return each SVG's text."""
    info = json.loads((series_dir / "series.json").read_text(encoding="utf-8"))
    report = (series_dir / "report.md").read_text(encoding="utf-8")
    texts = {}
    for name in NAMES:
        assert f"](figures/{name}.png)" in report
        png = series_dir / "figures" / f"{name}.png"
        pixels = image.imread(png)
        assert pixels.ndim == 3 and pixels.shape[0] > 300 and pixels.shape[1] > 500
        colours = np.unique(pixels.reshape(-1, pixels.shape[2]), axis=0).shape[0]
        assert colours > 20, (name, colours)  # not blank: text, marks, antialiasing
        with Image.open(png) as im:
            title = im.text["Title"]  # kept by any copy of the file, with the picture
        svg = (series_dir / "figures" / f"{name}.svg").read_text(encoding="utf-8")
        assert svg.lstrip().startswith("<?xml") and "<svg" in svg and svg.rstrip().endswith(
            "</svg>")
        # drawn, as SVG text (the end of the banner's first line, its second line) ...
        assert f"series {info['series']}</text>" in svg
        assert (">non-model baseline (" in svg) is (not info["is_model"])
        # ... and in the files' metadata
        for text in (title, svg.split("<dc:title>")[1].split("</dc:title>")[0]):
            assert f"series {info['series']}" in text
            assert ("non-model baseline" in text) is (not info["is_model"])
        texts[name] = svg
    return texts


def test_a_complete_baseline_series(extractive: Path) -> None:
    svg = figure_texts(extractive)
    assert "(main)" in svg["availability"]  # the setting the calls used
    assert "full passage" in svg["availability"]
    # only the reasons that occur are in the legend; no call is missing
    assert "valid" in svg["citations"]
    for reason in set(REASON_COLORS) - {"valid"}:
        assert reason not in svg["citations"]
    assert "not sent" not in svg["citations"] and "no parsed answer" not in svg["citations"]


def test_a_stopped_series(experiment: Path, server: Server) -> None:
    server.script[2] = ok(text="this is not JSON")  # sent, answered, not parsed
    server.script[3] = ok(text=json.dumps({"answer": "x", "citations": [
        {"id": "F99", "extract": "nothing like it"}]}))  # an ID never supplied
    server.script[6] = http_error(500)  # stops at call 7: 65 calls never sent
    result, series_dir = collect(experiment, server, series="stopped")
    assert result.returncode == 3, result.stderr
    calls = pl.read_parquet(series_dir / "calls.parquet")
    assert calls.filter(pl.col("status") == "not_sent").height == 65
    svg = figure_texts(series_dir)["citations"]
    for legend in ("valid", "unknown_id", "not sent", "sent, no parsed answer"):
        assert f">{legend}<" in svg, legend
    assert "nothing sent" in svg  # whole panels with nothing sent say so


def test_an_empty_series(experiment: Path, server: Server) -> None:
    server.script[0] = http_error(500)  # the first call fails: nothing answered, ever
    result, series_dir = collect(experiment, server, series="empty")
    assert result.returncode == 3, result.stderr
    assert pl.read_parquet(series_dir / "citations.parquet").height == 0
    svg = figure_texts(series_dir)["citations"]
    assert ">not sent<" in svg and ">sent, no parsed answer<" in svg
    for reason in REASON_COLORS:  # no citation, so no reason in the legend
        assert f">{reason}<" not in svg
    assert svg.count(">nothing sent<") == 5  # the sixth panel holds the failed call


def test_the_same_tables_give_the_same_files(extractive: Path) -> None:
    figures = extractive / "figures"
    before = {p.name: p.read_bytes() for p in figures.iterdir()}
    assert set(before) == {f"{n}.{ext}" for n in NAMES for ext in ("png", "svg")}
    for path in figures.iterdir():
        path.unlink()
    assert run_cli("report", str(extractive)).returncode == 0  # in this process
    assert {p.name: p.read_bytes() for p in figures.iterdir()} == before
    result = run_process("measure", str(extractive))  # in another process
    assert result.returncode == 0, result.stderr
    assert {p.name: p.read_bytes() for p in figures.iterdir()} == before
