"""Stopping a run on request, without losing the answer in flight.

`Interruption` is what `fragbench.run.run` and the collector read. A first `request()` asks that
no new call start: the call in flight is awaited (within its backend's deadline), its outcome
recorded, and the series ends as `interrupted`. A second `request()` abandons that wait: the
call stays counted at its reservation (on disk before it was sent), with no outcome. Requesting
only sets attributes, so it is safe from a signal handler and from any thread (a notebook can
hand a run an `Interruption` and request it from a timer or a button).

`on_signals(interruption)` is what the CLI wraps a run in: while inside, SIGINT (Ctrl-C),
SIGTERM and SIGHUP (the terminal closed) request the interruption instead of ending the
process, and the previous handlers come back on the way out. Python runs signal handlers in the
main thread only, so elsewhere it installs nothing. A signal ignored when the run began stays
ignored: `nohup` ignores SIGHUP, and a shell ignores SIGINT for a job it put in the background.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from fragbench.errors import interrupted_exit

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interruption:
    """A request to stop, made once (stop starting calls) or twice (abandon the call in
    flight)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        """The signal of the first request (SIGINT when requested without one)."""
        self.count = 0

    def request(self, signum: int = signal.SIGINT) -> None:
        if self.signum is None:
            self.signum = signum
        self.count += 1

    @property
    def requested(self) -> bool:
        """No new call may start."""
        return self.count >= 1

    @property
    def abandon(self) -> bool:
        """The call in flight is no longer awaited."""
        return self.count >= 2

    @property
    def name(self) -> str:
        """The first request's signal, by name (SIGINT, SIGTERM, SIGHUP)."""
        return signal.Signals(self.signum or signal.SIGINT).name

    @property
    def exit_code(self) -> int:
        """128 + the first request's signal, as shells report a process a signal ended."""
        return interrupted_exit(self.signum or signal.SIGINT)

    @property
    def again(self) -> str:
        """How to make the second request, for the line that offers it."""
        return "press Ctrl-C again" if self.name == "SIGINT" else f"send {self.name} again"


@contextmanager
def on_signals(interruption: Interruption) -> Iterator[Interruption]:
    """SIGINT, SIGTERM and SIGHUP request `interruption` while inside (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield interruption
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        # Only attributes change here: the main thread's wait goes on (PEP 475) and decides,
        # and nothing is printed from inside a handler (a print it interrupted would fail).
        interruption.request(signum)

    previous: dict[int, object] = {}
    try:
        for sig in SIGNALS:
            if signal.getsignal(sig) is signal.SIG_IGN:
                continue
            previous[sig] = signal.signal(sig, handle)
        yield interruption
    finally:
        for sig, old in previous.items():
            # None: a handler installed outside Python, which Python cannot put back.
            signal.signal(sig, signal.SIG_DFL if old is None else old)  # type: ignore[arg-type]
