"""What the commands print, redacted: `say` (stdout) and `err` (one `fragbench: ...` line on
stderr), both best effort (`fragbench.cli.progress.emit`).

A leaf of the command line, apart from the app (`fragbench.cli.commands`) so that every command
group (`fragbench.cli.ledger`) prints the same way without importing the app that registers it.
Imports nothing at module level: `fragbench --help` loads it.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fragbench.redact import Redactor


def redactor() -> Redactor:
    """Built from the environment as it is now (tests change it between in-process runs)."""
    from fragbench.redact import secrets_in_env

    return _redactor_for(tuple(secrets_in_env()))


@functools.cache
def _redactor_for(secrets: tuple[str, ...]) -> Redactor:
    from fragbench.redact import Redactor

    return Redactor(secrets)


def say(text: str) -> None:
    from fragbench.cli.progress import emit

    emit(redactor().text(text))


def err(message: str) -> None:
    from fragbench.cli.progress import emit

    emit(redactor().text(f"fragbench: {message}"), err=True)
