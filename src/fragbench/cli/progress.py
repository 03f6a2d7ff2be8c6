"""Progress on stderr, best effort: a closed terminal or pipe never stops a run.

A line per phase (`phase: …`), then per call: a bar on a terminal, lines otherwise. Each call
line gives the elapsed collection time and an estimate of the time left (the mean time per call
so far, times the calls left). A billed run prints every call, with what the series spent and
what the budget has used: an unattended run's log keeps every billed call. A run that is not
billed (an unpriced backend, an offline baseline) prints no money, and off a terminal one line
per tenth of its calls, for its last one and for any call not `completed` (the offline demo's
216 calls make 27 lines, not 216).

Every line goes through the redaction of everything written: a server echoing a key in a
status does not reach the terminal. Writing is best effort (`emit`): a stream that fails
(`| head` exited, the terminal closed) is pointed at /dev/null and the run goes on, silently,
with nothing it records changed, and without Python's "Exception ignored … BrokenPipeError"
at exit.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any, TextIO

from fragbench.redact import Redactor

if TYPE_CHECKING:  # the CLI imports `emit` for every line it prints: no Polars at start-up
    from fragbench.calls.collector import Progress


def _silence(stream: TextIO) -> None:
    """Point a stream that can no longer be written at /dev/null: what it still buffers, and
    Python's flush at exit, then go nowhere instead of raising."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        fd = stream.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, fd)
        finally:
            os.close(devnull)


def emit(text: str, err: bool = False) -> None:
    """Print one line to stdout (stderr when `err`), best effort."""
    stream = sys.stderr if err else sys.stdout
    try:
        stream.write(text + "\n")
        stream.flush()
    except OSError:  # BrokenPipeError, EIO from a terminal that closed
        _silence(stream)
    except ValueError:  # the stream was closed: nothing can reach it
        pass


def clock(seconds: float) -> str:
    """H:MM:SS."""
    whole = int(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


class Reporter:
    def __init__(self, redactor: Redactor | None = None) -> None:
        self._bar: Any = None
        self._task: Any = None
        self._redactor = redactor or Redactor.from_env()
        self._phase_at = time.monotonic()
        self._calls_from: float | None = None
        """When collection began: the last phase line before the first call."""

    def __enter__(self) -> Reporter:
        return self

    def _times(self, p: Progress) -> str:
        assert self._calls_from is not None
        elapsed = time.monotonic() - self._calls_from
        done = _done(p)
        left = elapsed / done * (p.total - done) if done else 0.0
        return f"{clock(elapsed)} elapsed, about {clock(left)} left"

    def _line(self, p: Progress, numbered: bool = True) -> str:
        """One call's line; on the bar (not `numbered`, the bar counts) the times come first,
        so that a narrow terminal cuts the money rather than them."""
        line = (f"call {p.seq}/{p.total} {p.call_id}: {p.status}; {self._times(p)}" if numbered
                else f"{self._times(p)}; {p.call_id}: {p.status}")
        if p.budget_used is not None and p.ceiling is not None:
            from fragbench.budget.money import usd

            line += (f"; series spent {usd(p.spent)} USD; budget used {usd(p.budget_used)} of "
                     f"{usd(p.ceiling)} USD")
        return self._redactor.text(line)

    def phase(self, text: str) -> None:
        """A phase begins (verifying the plan, retrieval, collection, tables, report)."""
        self._phase_at = time.monotonic()
        self.note(f"phase: {text}")

    def note(self, text: str) -> None:
        """A line of its own, above the bar if there is one."""
        line = self._redactor.text(text)
        if self._bar is not None:
            try:
                self._bar.console.print(line, markup=False, highlight=False)
            except OSError:
                self._close_bar()
            return
        emit(line, err=True)

    def update(self, p: Progress) -> None:
        if self._calls_from is None:
            self._calls_from = self._phase_at
        if not _isatty(sys.stderr):
            billed = p.budget_used is not None
            done = _done(p)
            if billed or p.status != "completed" or done == p.total \
                    or done % math.ceil(p.total / 10) == 0:
                emit(self._line(p), err=True)
            return
        # An OSError here (a terminal that closed) reaches the collector, which ignores it.
        if self._bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn
            from rich.progress import Progress as Bar
            from rich.table import Column

            # The bar and the count keep their width; the line is cut (…) on a narrow terminal.
            self._bar = Bar(BarColumn(bar_width=20, table_column=Column(width=20)),
                            MofNCompleteColumn(),
                            TextColumn("{task.description}", markup=False, table_column=Column(
                                ratio=1, no_wrap=True, overflow="ellipsis")),
                            transient=False, expand=True, console=Console(stderr=True))
            self._bar.start()
            self._task = self._bar.add_task("", total=p.total)
        self._bar.update(self._task, completed=_done(p),
                         description=self._line(p, numbered=False))

    def _close_bar(self) -> None:
        bar, self._bar = self._bar, None
        if bar is not None:
            with contextlib.suppress(Exception):  # a bar that cannot draw has nothing to say
                bar.stop()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._close_bar()


def _done(p: Progress) -> int:
    """How many calls are recorded: with calls in flight, outcomes come in any order, so the
    call's seq is not the count."""
    return p.done if p.done is not None else p.seq


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (OSError, ValueError):
        return False
