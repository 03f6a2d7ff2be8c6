"""Render the report pages shown in the docs: `make screenshots`.

Builds, in a temporary folder with a ledger store of its own, the two series the browser tests
read (`tests/support/browser.py`): the offline demo series (the non-model baseline) and a loopback
OpenAI series stopped at call 10, whose first answers carry every citation reason. Each
report.html is opened in the system Chromium with every request but its own data files blocked,
and saved as one PNG: the first screen (header, run summary, figures), then a call with its
highlighted citations scrolled into view, then (stopped series) the call whose failure stopped
it, followed by calls that were never sent.

    docs/screenshots/report-demo.png
    docs/screenshots/report-stopped.png

The pictures change from run to run only where the series do (start time, loopback port).
"""

from __future__ import annotations

import io
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # tests/support: the browser tests' helpers

WIDTH, HEIGHT = 1280, 900

TOP_OF = """sel => {
  const el = document.querySelector(sel);
  el.scrollIntoView({block: 'start'});
  const sticky = [...document.querySelectorAll('body *')].find(
    e => getComputedStyle(e).position === 'sticky');
  const cover = sticky ? sticky.getBoundingClientRect().bottom : 0;
  window.scrollBy(0, el.getBoundingClientRect().top - cover - 8);
}"""
"""Scroll a call to just below the sticky header (whatever scroll padding the page sets)."""


def screens(browser: Any, page_file: Path, calls: list[str]) -> list[bytes]:
    """The first screen, then one screen per call ID, scrolled to just below the sticky
    header."""
    from support.browser import open_page

    shots = []
    with open_page(browser, page_file, viewport=(WIDTH, HEIGHT)) as opened:
        shots.append(opened.page.screenshot())
        for call_id in calls:
            opened.page.evaluate(TOP_OF, f"#call-{call_id}")
            shots.append(opened.page.screenshot())
        if opened.network():
            raise SystemExit(f"{page_file} made requests: {opened.network()}")
    return shots


def stack(shots: list[bytes], out: Path) -> None:
    """One PNG, the screens one below the other with a grey rule between them."""
    from PIL import Image

    images = [Image.open(io.BytesIO(s)).convert("RGB") for s in shots]
    gap = 12
    sheet = Image.new("RGB", (WIDTH, sum(i.height for i in images) + gap * (len(images) - 1)),
                      (150, 150, 150))
    y = 0
    for image in images:
        sheet.paste(image, (0, y))
        y += image.height + gap
    sheet.save(out, optimize=True)
    print(f"written {out.relative_to(ROOT)} ({out.stat().st_size // 1024} KiB)")


def main() -> None:
    import polars as pl
    from support.browser import chromium_browser, stopped_series, workspace
    from support.cli import run_cli

    with tempfile.TemporaryDirectory(prefix="fragbench-screenshots-") as tmp:
        root = Path(tmp)
        os.environ["FRAGBENCH_LEDGER_DIR"] = str(root / "ledgers")  # never the real ledgers
        experiment = workspace(root)
        ran = run_cli("run", str(experiment), "--series", "extractive", "--out",
                      str(root / "outputs"))
        if ran.returncode:
            raise SystemExit(ran.stderr)
        demo = root / "outputs" / "protocol-1.0" / "extractive"
        stopped = stopped_series(experiment)
        calls = pl.read_parquet(stopped / "calls.parquet").sort("seq")
        failed = calls.filter(pl.col("status") == "failed")["call_id"][0]
        with chromium_browser() as browser:
            first = calls["call_id"][0]
            stack(screens(browser, demo / "report.html", [first]), HERE / "report-demo.png")
            stack(screens(browser, stopped / "report.html", [first, calls["call_id"][1], failed]),
                  HERE / "report-stopped.png")


if __name__ == "__main__":
    import pytest

    try:
        main()
    except pytest.skip.Exception as exc:  # no Chromium, or it cannot start: say which
        raise SystemExit(f"make screenshots: {exc.msg}") from None
