"""report.html for 10,000 calls: its size, and in Chromium the time to first render and to
apply a filter (issue 16, item 5); then the same for the compare pages (a grid of three
10,080-call series; a pair of two, whose cells are a data element page.js draws).

The series is the offline demo copied as tables (tests/support/scaled_pages.py: 140 copies = 10,080
calls, distinct texts, case groups in cases.parquet), its page written by
`fragbench.report.html.write_html_report`. Each run opens the page from disk in a fresh
context of the system Chromium (tests/support/browser.py) and reads:

- `render_s`: writing report.html (Python: tables to page);
- `first_paint_ms`: the browser's first contentful paint (the summary, before the script ran);
- `drawn_ms`: from navigation start until the first page of calls is drawn (the data parsed);
- `filter_ms`: one select changed (a group's value) until the page is drawn again, measured
  in the page around the change event (filtering all calls and drawing 50);
- `search_ms`: one search (words on the last page) until drawn, the same way.

Usage: .venv/bin/python benchmarks/bench_pages.py [--copies 140] [--repeat 3]
Needs the offline demo series: it runs `fragbench run experiments/protocol-1.0` into a
temporary folder first (a second or two).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

MEASURE_JS = """async () => {
  const list = document.getElementById('call-list');
  const nav = performance.getEntriesByType('navigation')[0];
  const paint = performance.getEntriesByName('first-contentful-paint')[0];
  const select = document.getElementById('filter-group-level');
  let t = performance.now();
  select.value = 'hard';
  select.dispatchEvent(new Event('change', {bubbles: true}));
  const filter = performance.now() - t;
  const search = document.getElementById('filter-search');
  select.value = '';
  t = performance.now();
  search.value = 'zebra-needle-4471';
  search.form.dispatchEvent(new Event('submit', {cancelable: true}));
  const searched = performance.now() - t;
  return {paint: paint ? paint.startTime : null, drawn: Number(list.dataset.drawnAt),
          dom: nav.domContentLoadedEventEnd, filter, searched,
          shown: document.querySelector('output.shown').value};
}"""


def demo_series(root: Path) -> Path:
    experiment = root / "experiments" / "protocol-1.0"
    shutil.copytree(ROOT / "experiments" / "protocol-1.0", experiment,
                    ignore=shutil.ignore_patterns("outputs"))
    shutil.copytree(ROOT / "corpus", root / "corpus")
    env = {**os.environ, "FRAGBENCH_LEDGER_DIR": str(root / "ledgers")}
    subprocess.run([sys.executable, "-m", "fragbench", "run", str(experiment), "--series",
                    "extractive", "--out", str(root / "outputs")], check=True, env=env,
                   capture_output=True)
    return root / "outputs" / "protocol-1.0" / "extractive"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--copies", type=int, default=140)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from support.browser import chromium_browser, open_page
    from support.scaled_pages import scale_series

    from fragbench.report.html import write_html_report

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        demo = demo_series(root)
        series = scale_series(demo, root / "big", args.copies)
        start = time.perf_counter()
        page = write_html_report(series)
        render_s = time.perf_counter() - start
        size = page.stat().st_size
        print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}, "
              f"Python {platform.python_version()}; load average before: "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"calls: {args.copies * 72}; report.html {size / 1e6:.1f} MB; "
              f"written in {render_s:.2f} s")
        runs = []
        with chromium_browser() as browser:
            print(f"Chromium {browser.version}")
            for _ in range(args.repeat):
                with open_page(browser, page) as opened:
                    opened.page.wait_for_selector("#call-list[data-drawn]", state="attached")
                    got = opened.page.evaluate(MEASURE_JS)
                runs.append(got)
                print(f"  first paint {got['paint']:.0f} ms, calls drawn {got['drawn']:.0f} ms, "
                      f"filter {got['filter']:.0f} ms, search {got['searched']:.0f} ms "
                      f"(found {got['shown']})")
        print("median: " + ", ".join(
            f"{k} {statistics.median(r[k] for r in runs):.0f} ms"
            for k in ("paint", "drawn", "filter", "searched")))
        compare_pages(root, demo, args.copies, args.repeat)
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


COMPARE_JS = """async () => {
  const list = document.getElementById('cell-list');
  const select = document.getElementById('filter-differs');
  const t = performance.now();
  select.value = 'true';
  select.dispatchEvent(new Event('change', {bubbles: true}));
  return {drawn: Number(list.dataset.drawnAt), filter: performance.now() - t,
          shown: document.querySelector('output.shown').value};
}"""


def compare_pages(root: Path, demo: Path, copies: int, repeat: int) -> None:
    """The grid page of three scaled series and the pair page of two (tests/support/scaled_pages.py
    `scaled_trio`): size, writing time, first page drawn, and the "differs" filter."""
    from support.browser import chromium_browser, open_page
    from support.scaled_pages import scaled_trio

    from fragbench.report.compare import compare_grid, compare_series
    from fragbench.report.compare_html import write_compare_page, write_grid_page

    trio = scaled_trio(demo, root / "trio", copies)
    pages = []
    start = time.perf_counter()
    write_grid_page(compare_grid(trio), root / "grid.html", str)
    pages.append(("grid of 3", root / "grid.html", time.perf_counter() - start))
    start = time.perf_counter()
    write_compare_page(compare_series(trio[0], trio[2]), root / "pair.html", str)
    pages.append(("pair", root / "pair.html", time.perf_counter() - start))
    with chromium_browser() as browser:
        for label, path, written in pages:
            runs = []
            for _ in range(repeat):
                with open_page(browser, path) as opened:
                    opened.page.wait_for_selector("#cell-list[data-drawn]", state="attached")
                    runs.append(opened.page.evaluate(COMPARE_JS))
            print(f"compare {label}: {copies * 72} cells, {path.stat().st_size / 1e6:.1f} MB, "
                  f"written in {written:.2f} s; median first page drawn "
                  f"{statistics.median(r['drawn'] for r in runs):.0f} ms, differs filter "
                  f"{statistics.median(r['filter'] for r in runs):.0f} ms "
                  f"(found {runs[0]['shown']})")


if __name__ == "__main__":
    main()
