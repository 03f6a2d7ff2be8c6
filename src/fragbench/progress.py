"""Progress on stderr: a line per phase, then a bar per call on a terminal, or one line per call
otherwise (an unattended run's log keeps every call). Every line goes through the redaction of
everything written: a server echoing a key in a status does not reach the terminal."""

from __future__ import annotations

import sys
from types import TracebackType

from fragbench.budget import usd
from fragbench.collect import Progress
from fragbench.redact import Redactor


class Reporter:
    def __init__(self, redactor: Redactor | None = None) -> None:
        self._bar = None
        self._task = None
        self._redactor = redactor or Redactor.from_env()

    def __enter__(self) -> Reporter:
        return self

    def _line(self, p: Progress) -> str:
        line = f"call {p.seq}/{p.total} {p.call_id}: {p.status}; series spent {usd(p.spent)} USD"
        if p.budget_used is not None and p.ceiling is not None:
            line += f"; budget used {usd(p.budget_used)} of {usd(p.ceiling)} USD"
        return self._redactor.text(line)

    def phase(self, text: str) -> None:
        """A phase begins (verifying the plan, retrieval, collection, tables, report)."""
        line = self._redactor.text(f"phase: {text}")
        if self._bar is not None:
            self._bar.console.print(line, markup=False, highlight=False)
        else:
            print(line, file=sys.stderr, flush=True)

    def update(self, p: Progress) -> None:
        if not sys.stderr.isatty():
            print(self._line(p), file=sys.stderr, flush=True)
            return
        if self._bar is None:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn
            from rich.progress import Progress as Bar

            self._bar = Bar(TextColumn("{task.description}", markup=False), BarColumn(),
                            MofNCompleteColumn(), transient=False)
            self._bar.start()
            self._task = self._bar.add_task("", total=p.total)
        self._bar.update(self._task, completed=p.seq, description=self._line(p))

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.stop()
