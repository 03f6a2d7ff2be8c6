"""Pacing the starts of calls under a provider's declared rate limits.

A backend's config may declare `requests_per_minute` and `tokens_per_minute`. The collector
asks `Pacer.delay` before each start and tells `Pacer.started` when a call starts: in no
sliding window of `window` seconds (60) do more than `requests_per_minute` calls start, nor
do the calls started bound more than `tokens_per_minute` tokens, each counted at its whole
bound (what its reservation prices: input bytes plus framing tokens, plus the output
ceiling), whatever it then used. A start is never early; it may be late (a loaded machine),
which only spreads the calls more. A 429 that comes anyway stays a technical failure: nothing
is retried.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

WINDOW_SECONDS = 60.0


class Pacer:
    """The starts of one series under `requests_per_minute` and `tokens_per_minute` (None: no
    such limit), on `clock` (monotonic seconds) over a sliding `window`."""

    def __init__(self, requests_per_minute: int | None, tokens_per_minute: int | None,
                 clock: Callable[[], float] = time.monotonic,
                 window: float = WINDOW_SECONDS) -> None:
        self.requests = requests_per_minute
        self.tokens = tokens_per_minute
        self.clock, self.window = clock, window
        self.starts: deque[tuple[float, int]] = deque()
        """(when, tokens) of the starts still inside the window, oldest first."""
        self._in_window_tokens = 0
        self.history: list[tuple[float, int]] = []
        """Every start, as the pacer's clock saw it (what a test checks the limits on)."""

    def _expire(self, now: float) -> None:
        # Compared as `delay` computes it (when + window), so that a wait of exactly the
        # delay always finds the start out of the window.
        while self.starts and now >= self.starts[0][0] + self.window:
            self._in_window_tokens -= self.starts.popleft()[1]

    def delay(self, tokens: int) -> float:
        """Seconds to wait before a call bounding `tokens` may start (0: now). ValueError
        when one call alone bounds more than `tokens_per_minute` (refused before any call)."""
        if self.tokens is not None and tokens > self.tokens:
            raise ValueError(f"one call bounds {tokens} tokens, more than tokens_per_minute "
                             f"({self.tokens})")
        now = self.clock()
        self._expire(now)
        wait = 0.0
        if self.requests is not None and len(self.starts) >= self.requests:
            # The oldest starts that must leave the window for one more to fit in it.
            wait = self.starts[len(self.starts) - self.requests][0] + self.window - now
        if self.tokens is not None:
            total = self._in_window_tokens + tokens
            for when, spent in self.starts:
                if total <= self.tokens:
                    break
                total -= spent
                wait = max(wait, when + self.window - now)
        return max(wait, 0.0)

    def started(self, tokens: int) -> None:
        now = self.clock()
        self._expire(now)
        self.starts.append((now, tokens))
        self._in_window_tokens += tokens
        self.history.append((now, tokens))
