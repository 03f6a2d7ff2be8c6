"""Errors a user can cause, and the exit codes that tell them apart.

The CLI prints every error as one line, `fragbench: <what, and what to do>`, and exits with:

- 0: done.
- 1: internal error, a bug in fragbench or a plugin (the traceback is for us).
- 2: usage, the command line is wrong (an unknown option, a value out of range, a missing
  argument, a --series that names no backend without --backend).
- 3: series stopped, collection began and stopped (technical failure, changed model, unknown
  cost, budget, or a write that failed); what was recorded is kept.
- 4: refused, an input, file or environment is unusable (corpus, config, frozen plan, budget,
  ledger, series folder, key); nothing was sent.
- 128 + the signal's number: interrupted by a signal, as shells report it: 130 for SIGINT
  (Ctrl-C), 143 for SIGTERM, 129 for SIGHUP (the terminal closed). `run` then starts no new
  call, waits for the call in flight (within its deadline) and records its outcome, and ends
  the series as `interrupted` (a `stop` record with reason `interrupted`, its tables and
  report); a second signal abandons the wait, and that call stays counted at its reservation.
  A signal before the series folder exists writes nothing. These codes, not 3, so that a
  script or a shell loop sees that the user stopped the run, as for any other command.

Anything else that escapes is our bug and keeps its traceback.
"""

from __future__ import annotations

EXIT_INTERNAL = 1
"""A bug in fragbench or a plugin: the traceback is for us."""
EXIT_USAGE = 2
"""The command line is wrong (`UsageError`)."""
EXIT_STOPPED = 3
"""Collection began and stopped; what was recorded is kept."""
EXIT_REFUSED = 4
"""An input, file or environment is unusable; nothing was sent (`FragbenchError`)."""
EXIT_SIGNAL_BASE = 128
"""Interrupted by signal N: exit 128 + N (130 SIGINT, 143 SIGTERM, 129 SIGHUP)."""


def interrupted_exit(signum: int) -> int:
    """The exit code of a run interrupted by signal `signum`."""
    return EXIT_SIGNAL_BASE + signum


class FragbenchError(Exception):
    """A problem with the user's input, files or environment: one sentence, what to do."""

    exit_code = EXIT_REFUSED
    """The exit code the CLI ends with when this error stops a command (the module's list)."""


class UsageError(FragbenchError):
    """The command line asks for something that cannot be: wrong or missing options."""

    exit_code = EXIT_USAGE
    """2: the command line is wrong."""


class CorpusError(FragbenchError):
    """A corpus file is malformed."""


class ConfigError(FragbenchError):
    """An experiment config is malformed or names something that does not exist."""


class PlanMismatch(FragbenchError):
    """The frozen plan no longer matches what the code and files produce."""


class BudgetError(FragbenchError):
    """The planned calls do not fit in the budget's balance."""


class SeriesError(FragbenchError):
    """A series cannot be (re)written: it exists, it stopped, or it is unreadable."""


class Interrupted(FragbenchError):
    """A signal (or a caller's `Interruption`) stopped a command before it wrote anything."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        """128 + the signal's number (130 SIGINT, 143 SIGTERM, 129 SIGHUP)."""


class PluginError(FragbenchError):
    """A plugin is unknown, registered twice, misbehaves at registration, or returns output
    that breaks its contract."""


def first_line(exc: BaseException, default: str = "") -> str:
    """An exception's message cut to its first line, for the one-line errors above (a library's
    message can run to many lines); `default` when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else default
