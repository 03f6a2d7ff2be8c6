"""report.html at 10,000 calls and more: its size and its data files', and in Chromium the
time to first paint, to the first page of calls, and of a filter, a search and a link (issues
16 and 26); then the same for the compare pages (a grid of three series; a pair of two, whose
cells are data files beside the page, as report.html's calls).

The series is the offline demo copied as tables (tests/support/scaled_pages.py: 140 copies =
10,080 calls, 1,389 = 100,008; distinct texts, case groups in cases.parquet, a question per
case), its page written by `fragbench.report.html.write_html_report`. Each run opens the page
from disk in a fresh context of the system Chromium (tests/support/browser.py) and reads:

- `write_s`: writing report.html and its data folder (Python: tables to files);
- `paint_ms`: the browser's first contentful paint (the summary, before the script ran);
- `drawn_ms`: from navigation start until the first page of calls is drawn (the index
  parsed, the first data file loaded);
- `filter_ms`: one select changed (a group's value) until that page of calls is drawn (every
  call filtered, the data files of the 50 shown loaded); `count_ms` until the count is shown;
- `search_ms`: the first search (words on the last page) until drawn, the search files
  loaded on the way; `again_ms`: a second search, its files loaded already;
- `link_ms`: `#call-ID` of the last call set until its card is on the page.

Usage: .venv/bin/python benchmarks/bench_pages.py [--copies 140 1389] [--repeat 3] [--compare]
Needs the offline demo series: it runs `fragbench run experiments/protocol-1.0` into a
temporary folder first (a second or two).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

MEASURE_JS = """async (last) => {
  const list = document.getElementById('call-list');
  const nav = performance.getEntriesByType('navigation')[0];
  const paint = performance.getEntriesByName('first-contentful-paint')[0];
  /* Until the list is drawn again (its data-drawn counter past `n`) and waits for nothing. */
  function drawn(n) {
    return new Promise(resolve => {
      const done = () => Number(list.dataset.drawn) > n && !list.hasAttribute('aria-busy');
      if (done()) { resolve(performance.now()); return; }
      const watch = new MutationObserver(() => {
        if (done()) { watch.disconnect(); resolve(performance.now()); }
      });
      watch.observe(list, {attributes: true});
    });
  }
  const shown = () => document.querySelector('output.shown').value;
  /* a group's value (the scaled series' `level`: hard), else the first mode */
  const select = document.getElementById('filter-group-level') ||
    document.getElementById('filter-mode');
  let n = Number(list.dataset.drawn);
  let t = performance.now();
  select.value = select.id === 'filter-group-level' ? 'hard' : select.options[1].value;
  select.dispatchEvent(new Event('change', {bubbles: true}));
  const count = performance.now() - t;
  const filter = (await drawn(n)) - t;
  const found = shown();
  select.value = '';
  const search = document.getElementById('filter-search');
  n = Number(list.dataset.drawn);
  t = performance.now();
  search.value = 'zebra-needle-4471';
  search.form.dispatchEvent(new Event('submit', {cancelable: true}));
  const searched = (await drawn(n)) - t;
  const hits = shown();
  n = Number(list.dataset.drawn);
  t = performance.now();
  search.value = 'okapi words';
  search.form.dispatchEvent(new Event('submit', {cancelable: true}));
  const again = (await drawn(n)) - t;
  n = Number(list.dataset.drawn);
  t = performance.now();
  location.hash = '#call-' + last;
  await drawn(n);
  const link = document.getElementById('call-' + last) ? performance.now() - t : null;
  return {paint: paint ? paint.startTime : null, drawn: Number(list.dataset.drawnAt),
          dom: nav.domContentLoadedEventEnd, count, filter, searched, again, link,
          found, hits};
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


def data_bytes(page: Path) -> tuple[int, int]:
    """The bytes and the number of the data files beside a page."""
    files = [p for p in (page.parent / f"{page.stem}-data").glob("*/*.js")]
    return sum(p.stat().st_size for p in files), len(files)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--copies", type=int, nargs="+", default=[140])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--compare", action="store_true", help="the compare pages too")
    parser.add_argument("--series", type=Path, nargs="*", default=[],
                        help="recorded series (bench_scale.py --keep) whose page is measured "
                             "as it is, written again first; then no scaled copy is made")
    args = parser.parse_args()
    if args.series:
        print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs; load average before: "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        for series in args.series:
            measure(series, args.repeat)
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}, "
          f"Python {platform.python_version()}; load average before: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None
                                     ) as tmp:
        root = Path(tmp)
        demo = demo_series(root)
        for copies in args.copies:
            one_size(root, demo, copies, args.repeat)
            if args.compare:
                compare_pages(root, demo, copies, args.repeat)
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def one_size(root: Path, demo: Path, copies: int, repeat: int) -> None:
    from support.scaled_pages import scale_series

    measure(scale_series(demo, root / f"big-{copies}", copies), repeat)


def measure(series: Path, repeat: int) -> None:
    """Write the series' page, then open it `repeat` times (MEASURE_JS)."""
    import polars as pl
    from support.browser import chromium_browser, open_page

    from fragbench.report.html import write_html_report

    last = pl.read_parquet(series / "calls.parquet", columns=["seq", "call_id"]).sort(
        "seq")["call_id"][-1]
    calls = pl.read_parquet(series / "calls.parquet", columns=["seq"]).height
    start = time.perf_counter()
    page = write_html_report(series)
    write_s = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    data, files = data_bytes(page)
    print(f"{series}: calls: {calls:,}; report.html {page.stat().st_size / 1e6:.2f} MB, its data "
          f"{data / 1e6:.0f} MB in {files} files; written in {write_s:.1f} s (process peak "
          f"RSS so far {rss:.0f} MiB)", flush=True)
    runs = []
    with chromium_browser() as browser:
        for _ in range(repeat):
            with open_page(browser, page) as opened:
                got = opened.page.evaluate(MEASURE_JS, last)
                assert opened.elsewhere() == [], opened.elsewhere()
            runs.append(got)
            print(f"  paint {got['paint']:.0f} ms, first calls drawn {got['drawn']:.0f} ms, "
                  f"filter {got['filter']:.0f} ms (count {got['count']:.0f} ms, "
                  f"{got['found']} found), first search {got['searched']:.0f} ms "
                  f"({got['hits']} found), again {got['again']:.0f} ms, link to the last "
                  f"call {got['link']:.0f} ms", flush=True)
    print("  median: " + ", ".join(
        f"{k} {statistics.median(r[k] for r in runs):.0f} ms"
        for k in ("paint", "drawn", "count", "filter", "searched", "again", "link")),
        flush=True)


COMPARE_JS = """async () => {
  const list = document.getElementById('cell-list');
  const select = document.getElementById('filter-differs');
  const n = Number(list.dataset.drawn);
  const t = performance.now();
  select.value = 'true';
  select.dispatchEvent(new Event('change', {bubbles: true}));
  await new Promise(resolve => {
    const done = () => Number(list.dataset.drawn) > n && !list.hasAttribute('aria-busy');
    if (done()) { resolve(); return; }
    const watch = new MutationObserver(() => { if (done()) { watch.disconnect(); resolve(); } });
    watch.observe(list, {attributes: true});
  });
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

    trio = scaled_trio(demo, root / f"trio-{copies}", copies)
    pages = []
    start = time.perf_counter()
    write_grid_page(compare_grid(trio), root / f"grid-{copies}.html", str)
    pages.append(("grid of 3", root / f"grid-{copies}.html", time.perf_counter() - start))
    start = time.perf_counter()
    write_compare_page(compare_series(trio[0], trio[2]), root / f"pair-{copies}.html", str)
    pages.append(("pair", root / f"pair-{copies}.html", time.perf_counter() - start))
    with chromium_browser() as browser:
        for label, path, written in pages:
            runs = []
            for _ in range(repeat):
                with open_page(browser, path) as opened:
                    runs.append(opened.page.evaluate(COMPARE_JS))
            data, files = data_bytes(path)
            print(f"compare {label}: {copies * 72} cells, {path.stat().st_size / 1e6:.1f} MB "
                  f"(data files {data / 1e6:.0f} MB in {files}), "
                  f"written in {written:.2f} s; median first page drawn "
                  f"{statistics.median(r['drawn'] for r in runs):.0f} ms, differs filter "
                  f"{statistics.median(r['filter'] for r in runs):.0f} ms "
                  f"(found {runs[0]['shown']})")


if __name__ == "__main__":
    main()
