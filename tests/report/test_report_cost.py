"""What a command costs follows the calls sent, not the plan (issue 26), shown by counting work,
never by timing:

- the same 8 calls sent of 480 planned and of 960 planned (the same questions first, so the
  same 8 calls) make the tables and both reports run the same Python functions the same number
  of times, within 1 %: a planned call never sent costs only whole-column work (one row of the
  plan's columns), and the tables shown per call or per passage are capped (report.md's
  TABLE_ROWS, the figures aggregated beyond a readable size);
- `run`, `measure` and `report` each read the journal once (an audit hook counts every open of
  journal.jsonl for reading).
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cli import run_cli
from support.hotpotqa_data import frozen_experiment, generate

import fragbench
from fragbench.calls.collector import Progress
from fragbench.calls.interruption import Interruption
from fragbench.report.markdown import write_report
from fragbench.run import run
from fragbench.series.folder import derive_tables, journal_records

pytestmark = pytest.mark.slow  # three experiments imported, frozen and collected in process

SENT = 8


def _experiment(root: Path, questions: int) -> Path:
    """An experiment of `questions` generated HotpotQA questions (4 calls each), frozen."""
    root.mkdir()
    return frozen_experiment(root, generate(questions))


def _stopped_run(experiment: Path, series: str, out: Path) -> Path:
    """The experiment's offline series, interrupted after SENT calls (its tables and reports
    written, as `fragbench run` writes them); the series folder."""
    stop = Interruption()

    def after(p: Progress) -> None:
        if (p.done or 0) >= SENT:
            stop.request()

    result = run(experiment, series=series, backend="extractive", out=out, on_progress=after,
                 interruption=stop)
    assert result.sent == SENT and result.tables_error is None, result
    return result.series_dir


def _series(root: Path, questions: int) -> Path:
    return _stopped_run(_experiment(root, questions), "extractive", root / "out")


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("cost")
    return {n: _series(root / str(n), n) for n in (120, 240)}


FRAGBENCH = str(Path(fragbench.__file__).parent)


def _python_calls(work: Callable[[], Any]) -> Counter[str]:
    """Every call of one of fragbench's own Python functions (its modules and its compiled
    templates) while `work` runs, counted by the code's file, name and line. A library's own
    functions are left out: Polars converting the plan's columns (whole-column work, one
    row of them per planned call, as the test allows) calls a Python helper per list value."""
    seen: Counter[str] = Counter()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(FRAGBENCH):
            code = frame.f_code
            seen[f"{code.co_filename}:{code.co_name}:{code.co_firstlineno}"] += 1

    sys.setprofile(profile)
    try:
        work()
    finally:
        sys.setprofile(None)
    return seen


def _derive_and_report(series_dir: Path) -> None:
    records = journal_records(series_dir)
    write_report(series_dir, derive_tables(series_dir, records=records), records)


def test_report_cost_does_not_follow_unsent_calls(stopped: dict[int, Path]) -> None:
    _derive_and_report(stopped[120])  # imports and compiled templates, once, not counted
    small, large = (_python_calls(lambda d=d: _derive_and_report(d))  # type: ignore[misc]
                    for d in (stopped[120], stopped[240]))
    # 480 more planned calls never sent: the same work, call for call, within 1 %.
    assert sum(large.values()) <= sum(small.values()) * 1.01 + 1000, (
        [(k, large[k], small[k]) for k, _ in (large - small).most_common(10)])
    grown = {k: (small[k], v) for k, v in large.items() if v > small[k] * 1.5 + 50}
    assert not grown, grown


READ_FILES = ("journal.jsonl", "plan.json", "experiment.json")
"""The files a command must read once (the plan, hundreds of MB at 100,000 calls, is parsed
once and handed down with its hash)."""


@pytest.fixture
def reads() -> Iterator[Counter[str]]:
    """Opens for reading of READ_FILES, by file name, while the test runs (an audit hook
    cannot be removed: it counts only while `active`)."""
    counts: Counter[str] = Counter()
    active = [True]

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "open" and active[0] and str(args[0]).endswith(READ_FILES):
            mode, flags = args[1], args[2]
            reading = ("r" in mode and "+" not in mode) if isinstance(mode, str) else (
                isinstance(flags, int) and flags & os.O_ACCMODE == os.O_RDONLY)
            if reading:
                counts[Path(str(args[0])).name] += 1

    sys.addaudithook(hook)
    try:
        yield counts
    finally:
        active[0] = False


def test_each_command_reads_the_journal_and_the_plan_once(
        stopped: dict[int, Path], tmp_path: Path, reads: Counter[str]) -> None:
    series_dir = stopped[120]
    for command in (("measure", str(series_dir)), ("report", str(series_dir))):
        reads.clear()
        ran = run_cli(*command)
        assert ran.returncode == 0, ran.stderr
        assert reads == {"journal.jsonl": 1, "plan.json": 1}, (command, reads)
    experiment = series_dir.parent.parent.parent / "exp"
    reads.clear()
    _stopped_run(experiment, "again", tmp_path / "out")  # what `fragbench run` calls
    # The frozen plan read once to be verified, once more copied (bytes to bytes) into the
    # series as plan.json, which the run then never reads: the verified plan is handed down.
    assert reads == {"journal.jsonl": 1, "experiment.json": 2}, reads
