"""`fragbench ledger show|verify|move`: a budget's ledger read, audited and moved, in either store.

The store is the one a run would use (`fragbench.ledger.ledger_for`: FRAGBENCH_LEDGER_URL's
server, else the file store). Reading never writes. A ledger is read as a run reads it (chain,
genesis, amounts, each call's reservation and outcome), except that one moved to a server is
read rather than refused. Imports of the ledger stores (and psycopg) happen inside the
commands, so `fragbench --help` stays fast.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from fragbench.ledger import LedgerBase

ledger_app = typer.Typer(help="Show, audit and move a budget's ledger (in either store).",
                         no_args_is_help=True)

BudgetArg = Annotated[str, typer.Argument(
    help="The budget id (`id` in the config's budget table).")]


def _say(text: str) -> None:
    from fragbench.cli import say

    say(text)


def _check_id(budget: str) -> None:
    import re

    from fragbench.errors import UsageError

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", budget):
        raise UsageError(f"budget {budget!r} is not a budget id (up to 64 letters, digits, '.', "
                         "'_' and '-', as in a config's [budget] id).")


def _read(budget: str, kept: bool) -> tuple[LedgerBase, Exception | None]:
    """The ledger as far as it reads, and the error that stopped the reading (or None)."""
    from fragbench.ledger import LedgerError, LedgerServerError, ledger_for

    _check_id(budget)

    ledger = ledger_for(budget)
    ledger.audit = True
    ledger.kept = [] if kept else None
    try:
        ledger.load()
    except LedgerServerError:  # nothing was read: no records to show, no chain to judge
        raise
    except LedgerError as exc:
        if ledger.kept is None:
            raise
        return ledger, exc
    if not ledger.exists() or ledger.records == 0:
        raise LedgerError(f"ledger {ledger.where}: holds no record of budget {budget!r} (in "
                          f"the store {ledger.store}; {ledger.store_help}).")
    return ledger, None


def _totals(ledger: LedgerBase) -> str:
    from fragbench.budget import usd

    ceiling, prior = ledger.ceiling or Decimal(0), ledger.prior or Decimal(0)
    open_ = ledger.open_reservations()
    held = sum(open_.values(), Decimal(0))
    left = ceiling - prior - ledger.spent()
    return (f"ceiling {usd(ceiling)} - prior {usd(prior)} - recorded series "
            f"{usd(ledger.spent())} = balance {usd(left)} USD; {len(ledger.series)} series, "
            f"{len(open_)} open reservations holding {usd(held)} USD")


def _row(record: dict[str, Any]) -> str:
    kind = str(record.get("type"))
    if kind == "budget":
        what = (f"budget {record.get('id')}: ceiling {record.get('ceiling_usd')} USD, prior "
                f"spend {record.get('prior_spend_usd')} USD")
    elif kind == "series":
        what = (f"series {record.get('series')} ({record.get('series_uid')}) of "
                f"{record.get('experiment')}, backend {record.get('backend')}")
    elif kind in ("reserve", "outcome"):
        amount = record.get("reserved_usd") if kind == "reserve" else record.get("counted_usd")
        status = f" {record.get('status')}" if kind == "outcome" else ""
        what = (f"{kind} {amount} USD{status}: call {record.get('call_id')} of series "
                f"{record.get('series', record.get('series_uid'))}")
    elif kind == "moved":
        what = f"moved to {record.get('to')}"
    else:
        what = str(record.get("note", ""))
    return f"{record.get('n', '?'):>6}  {record.get('at', '')!s:<32} {what}"


@ledger_app.command()
def show(budget: BudgetArg) -> None:
    """Print the budget's records, its totals and the state of its chain.

    Exit 4 (one line
    naming the first bad record) when the chain or a record is broken, after the records read
    before it."""
    ledger, error = _read(budget, kept=True)
    _say(f"ledger {ledger.where}, in the store {ledger.store}")
    for _raw, record in ledger.kept or []:
        _say(_row(record))
    if error is not None:
        # The records shown are those the chain vouches for: an edited record is not among
        # them, though it was read before the record that showed it edited.
        kept = ledger.kept or []
        _say(f"chain BROKEN after record {kept[-1][1].get('n')}" if kept else
             "chain BROKEN at its first record")
        raise error
    _say(_totals(ledger))
    moved = f"; moved to {ledger.moved_to}: runs draw on it there" if ledger.moved_to else ""
    _say(f"chain intact: {ledger.records} records, head sha256 {ledger.head}{moved}")


@ledger_app.command()
def verify(budget: BudgetArg) -> None:
    """Audit the budget's ledger; one line, exit 0, or exit 4 naming the first bad record.

    Checked: the chain, the genesis record, every amount, each call's
    reservation and outcome (and, on a server, the head it keeps). Exit 0 with one line, or
    exit 4 with one line naming the first bad record."""
    ledger, _ = _read(budget, kept=False)
    _say(f"ledger {ledger.where}: verified, {ledger.records} records, chain intact (head "
         f"sha256 {ledger.head}); {_totals(ledger)}")


ToOption = Annotated[str | None, typer.Option(
    help="The server, postgresql://user@host:port/database, without a password (put it in "
         "PGPASSWORD or ~/.pgpass: a command line is visible to every user of the machine); "
         "default: FRAGBENCH_LEDGER_URL, which may hold one.", show_default=False)]


def _target(to: str | None) -> str:
    """The server to move to: --to (refused when it holds a password), else
    FRAGBENCH_LEDGER_URL (the environment is readable by this user only, like ~/.pgpass)."""
    import os

    from fragbench.errors import UsageError
    from fragbench.ledger import LEDGER_URL_ENV

    if to is None:
        url = os.environ.get(LEDGER_URL_ENV, "").strip()
        if not url:
            raise UsageError(f"give the server: set {LEDGER_URL_ENV}=postgresql://user:password@"
                             "host:port/database, or --to postgresql://user@host:port/database "
                             "with the password in PGPASSWORD or ~/.pgpass (nothing was "
                             "written).")
        return url
    from fragbench.ledger_pg import has_password

    if not to.strip():
        raise UsageError("--to: give the server, postgresql://user@host:port/database.")
    if has_password(to.strip()):  # the value is not repeated: it holds the password
        raise UsageError(f"--to holds a password, which any user of this machine can read in its "
                         "process list: give --to without it and put the password in PGPASSWORD "
                         f"or ~/.pgpass, or leave out --to and set {LEDGER_URL_ENV} (nothing was "
                         "written; change that password if this machine is shared).")
    return to.strip()


@ledger_app.command()
def move(budget: BudgetArg, to: ToOption = None) -> None:
    """Move a file ledger into a PostgreSQL server, its chain intact.

    The file is FRAGBENCH_LEDGER_DIR's (or the default folder's); the server
    is --to's, else FRAGBENCH_LEDGER_URL's (a --to holding a password is
    refused: put it in PGPASSWORD or ~/.pgpass). The file is first retired by
    a `moved` record, then every record is copied with its exact text (every
    hash kept), verified, committed and read back; later runs refuse the file.
    Stopped midway, the budget is live in at most one store, and running
    `move` again completes (or checks) it. Refused when the server already
    holds the budget with other records."""
    from fragbench.ledger import LEDGER_ENV, Ledger, ledger_dir
    from fragbench.ledger_pg import move as do_move

    _check_id(budget)
    url = _target(to)
    source = Ledger(ledger_dir() / f"{budget}.jsonl", budget)
    moved = do_move(source, url)
    if not moved.copied:
        done = (f"already in {moved.ledger.where} (an earlier move copied its {moved.records} "
                "records; this one checked them and wrote nothing)")
    elif moved.resumed:
        done = (f"moved to {moved.ledger.where}, completing an earlier move that had retired "
                f"the file and copied nothing (its {moved.records} records copied now)")
    else:
        done = f"moved to {moved.ledger.where}"
    _say(f"ledger {source.where}: {done}, {moved.ledger.records} records, chain intact (head "
         f"sha256 {moved.ledger.head}); set FRAGBENCH_LEDGER_URL to that server (and unset "
         f"{LEDGER_ENV}) for every run drawing on budget {budget}.")
