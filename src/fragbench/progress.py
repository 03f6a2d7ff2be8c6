"""Progress of a collection on stderr: a bar on a terminal, one line per call otherwise (an
unattended run's log keeps every call)."""

from __future__ import annotations

import sys
from types import TracebackType

from fragbench.budget import usd
from fragbench.collect import Progress


class Reporter:
    def __init__(self) -> None:
        self._bar = None
        self._task = None

    def __enter__(self) -> Reporter:
        return self

    def _line(self, p: Progress) -> str:
        line = f"call {p.seq}/{p.total} {p.call_id}: {p.status}; series spent {usd(p.spent)} USD"
        if p.budget_used is not None and p.ceiling is not None:
            line += f"; budget used {usd(p.budget_used)} of {usd(p.ceiling)} USD"
        return line

    def update(self, p: Progress) -> None:
        if not sys.stderr.isatty():
            print(self._line(p), file=sys.stderr, flush=True)
            return
        if self._bar is None:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn
            from rich.progress import Progress as Bar

            self._bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            transient=False)
            self._bar.start()
            self._task = self._bar.add_task("", total=p.total)
        self._bar.update(self._task, completed=p.seq, description=self._line(p))

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.stop()
