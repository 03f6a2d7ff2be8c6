"""Errors a user can cause. The CLI prints them as one line and exits non-zero.

Anything else that escapes is our bug and keeps its traceback.
"""

from __future__ import annotations


class FragbenchError(Exception):
    """A problem with the user's input, files or environment: one sentence, what to do."""

    exit_code = 2


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


class PluginError(FragbenchError):
    """A plugin is unknown, registered twice or misbehaves at registration."""
