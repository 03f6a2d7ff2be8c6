"""Issue 14, item 4: a closed pipe or terminal never stops collection.

`fragbench run … | head -n 2` once stopped a paid series at call 2 (cannot_record: Broken
pipe). The process is what is tested: a billed run in a subprocess against the loopback server,
its output going to a pipe whose reader is gone, or to a terminal (a pseudo-terminal, so that
the progress bar is drawn) that is closed mid-run. Every call goes out and is recorded, and the
run exits 0; where stderr survives, it holds no "Exception ignored … BrokenPipeError".
"""

from __future__ import annotations

import os
import pty
import select
import threading
from decimal import Decimal
from pathlib import Path

import pytest
from support.processes import journal, start_run, wait_for
from support.suite import PATIENCE

from fragbench.testing.loopback import Server

pytestmark = pytest.mark.slow



def assert_complete(series_dir: Path, server: Server) -> None:
    assert len(server.requests) == 72
    records = journal(series_dir)
    assert sum(r["type"] == "outcome" for r in records) == 72
    assert records[-1]["type"] == "end"
    assert (series_dir / "report.html").is_file()


@pytest.mark.parametrize("where", ["both closed before the run", "stdout closed, stderr kept",
                                   "the reader leaves after 2 lines (| head -n 2)"])
def test_a_closed_pipe_stops_nothing(experiment: Path, server: Server, gate: threading.Event,
                                     tmp_path: Path, where: str) -> None:
    read, write = os.pipe()
    errors = tmp_path / "stderr.txt"
    with open(errors, "w", encoding="utf-8") as stderr_file:
        if where == "the reader leaves after 2 lines (| head -n 2)":
            run = start_run(experiment, server, stdout=write, stderr=write)
            os.close(write)
            with os.fdopen(read, encoding="utf-8") as head:
                lines = [head.readline(), head.readline()]
                wait_for("call 2 at the server", lambda: len(server.requests) >= 2)
            assert all(lines), lines  # read, then the reader is gone, as `head` exits
        else:
            os.close(read)  # nobody will ever read: the first write already fails
            stderr = write if where == "both closed before the run" else stderr_file
            run = start_run(experiment, server, stdout=write, stderr=stderr)
            os.close(write)
        gate.set()
        assert run.proc.wait(PATIENCE) == 0
    assert_complete(run.series_dir, server)
    kept = errors.read_text(encoding="utf-8")
    if where == "stdout closed, stderr kept":
        assert "call 72/72" in kept
        for noise in ("Exception ignored", "BrokenPipeError", "Traceback", "fragbench:"):
            assert noise not in kept, kept


def test_a_terminal_closed_mid_run_stops_nothing(experiment: Path, server: Server,
                                                 gate: threading.Event) -> None:
    master, slave = pty.openpty()
    run = start_run(experiment, server, stdout=slave, stderr=slave)
    os.close(slave)
    drawn = bytearray()
    stop = threading.Event()

    def drain() -> None:  # the terminal shows what it is sent, until it is closed
        while not stop.is_set():
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                try:
                    drawn.extend(os.read(master, 65536))
                except OSError:
                    return

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    # Drawn as a bar: a line redrawn in place (erase line), holding the count of calls.
    wait_for("call 2 at the server, the bar drawn",
             lambda: len(server.requests) >= 2 and b"\x1b[2K" in drawn and b"1/72" in drawn)
    stop.set()
    reader.join()
    os.close(master)  # the terminal window is closed
    gate.set()
    assert run.proc.wait(PATIENCE) == 0
    assert_complete(run.series_dir, server)


@pytest.mark.parametrize("when", ["before the bar", "under the bar, then a line",
                                  "under the bar, then the end"])
def test_the_bar_on_a_terminal_that_closed_raises_nothing(monkeypatch: pytest.MonkeyPatch,
                                                          when: str) -> None:
    """The reporter itself, in process, drawing on a pseudo-terminal whose other side is
    closed: every later line is dropped, none raises (rich raises EIO there)."""
    from fragbench.calls.collector import Progress
    from fragbench.cli.progress import Reporter

    master, slave = pty.openpty()
    terminal = os.fdopen(slave, "w", encoding="utf-8")
    monkeypatch.setattr("sys.stderr", terminal)
    monkeypatch.setattr("sys.stdout", terminal)

    def progress(seq: int) -> Progress:
        return Progress(seq, 72, f"c{seq}", "completed", Decimal(0), None, None)

    def close() -> None:  # the terminal window is closed
        os.read(master, 65536)
        os.close(master)

    try:
        with Reporter() as reporter:
            reporter.phase("collecting")
            if when == "before the bar":
                close()
            reporter.update(progress(1))
            if when != "before the bar":
                close()
            reporter.update(progress(2))
            if when == "under the bar, then a line":
                reporter.note("phase: deriving the tables")
        reporter.phase("after the bar")
    finally:
        monkeypatch.undo()
        terminal.close()
