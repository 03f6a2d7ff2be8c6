"""The command line: `fragbench` and its commands, over every stage.

In: argv and the environment. Out: what the terminal shows and the exit code
(docs/exit-codes.md). The top of the flow: imports every stage, and none imports it.

- `commands`: the Typer app and `main` (the `fragbench` script is `fragbench.cli:main`);
- `ledger`: `fragbench ledger ...`; `output`: one-line messages; `progress`: the progress line.
"""

from __future__ import annotations

from fragbench.lazy import reexport


def main() -> None:
    """The `fragbench` script's entry point (`fragbench.cli:main`)."""
    from fragbench.cli.commands import main as run

    run()


__getattr__, __dir__ = reexport(__name__, {
    "app": "commands",
})
