"""`fragbench ledger show|verify|raise|move|settle`: a budget's ledger read, audited, its
ceiling raised, moved and settled, in either store.

The store is the one a run would use (`fragbench.budget.stores.ledger_for`: FRAGBENCH_LEDGER_URL's
server, else the file store). Reading never writes; `settle` appends only what a series'
journal holds and the ledger lacks; `raise` appends one `ceiling` record. A ledger is read as
a run reads it (chain, genesis, amounts, each call's reservation and outcome, each raise),
except that one moved to a server is read rather than refused. Imports of the ledger stores
(and psycopg) happen inside the commands, so `fragbench --help` stays fast.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fragbench.cli.output import say

if TYPE_CHECKING:
    from fragbench.budget.ledger import LedgerBase

ledger_app = typer.Typer(help="Show, audit, raise the ceiling of, move and settle a budget's "
                         "ledger (in either store).",
                         no_args_is_help=True)

BudgetArg = Annotated[str, typer.Argument(
    help="The budget id (`id` in the config's budget table).")]


def _check_id(budget: str) -> None:
    from fragbench.errors import UsageError
    from fragbench.files import file_name_problem  # the config's rule for a budget id

    if (problem := file_name_problem(budget)) is not None:
        raise UsageError(f"BUDGET is not a budget id: it {problem}, as a config's [budget] id "
                         "is (it names the budget's ledger file).")


def _read(budget: str, kept: bool) -> tuple[LedgerBase, Exception | None]:
    """The ledger as far as it reads, and the error that stopped the reading (or None)."""
    from fragbench.budget.ledger import LedgerError, LedgerServerError
    from fragbench.budget.stores import ledger_for

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
    from fragbench.budget.money import usd

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
    elif kind == "ceiling":
        what = (f"ceiling raised from {record.get('previous_ceiling_usd')} USD to "
                f"{record.get('ceiling_usd')} USD: {record.get('reason')}")
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
    say(f"ledger {ledger.where}, in the store {ledger.store}")
    for _raw, record in ledger.kept or []:
        say(_row(record))
    if error is not None:
        # The records shown are those the chain vouches for: an edited record is not among
        # them, though it was read before the record that showed it edited.
        kept = ledger.kept or []
        say(f"chain BROKEN after record {kept[-1][1].get('n')}" if kept else
            "chain BROKEN at its first record")
        raise error
    say(_totals(ledger))
    moved = f"; moved to {ledger.moved_to}: runs draw on it there" if ledger.moved_to else ""
    say(f"chain intact: {ledger.records} records, head sha256 {ledger.head}{moved}")


@ledger_app.command()
def verify(budget: BudgetArg) -> None:
    """Audit the budget's ledger; one line, exit 0, or exit 4 naming the first bad record.

    Checked: the chain, the genesis record, every amount, each call's
    reservation and outcome (and, on a server, the head it keeps). Exit 0 with one line, or
    exit 4 with one line naming the first bad record."""
    ledger, _ = _read(budget, kept=False)
    say(f"ledger {ledger.where}: verified, {ledger.records} records, chain intact (head "
        f"sha256 {ledger.head}); {_totals(ledger)}")


CeilingOption = Annotated[str, typer.Option(
    "--ceiling", help="The new ceiling in USD, above the one in force (\"25\", \"12.50\").",
    show_default=False)]
ReasonOption = Annotated[str, typer.Option(
    "--reason", help="Why the ceiling is raised: one line, recorded in the ledger and shown by "
    "`ledger show`.", show_default=False)]


def _ceiling_value(text: str) -> Decimal:
    """--ceiling as an amount: the digits 0-9, maybe a point and decimals, above zero (read
    as the ledger reads its own amounts)."""
    from fragbench.budget.ledger import amount_of
    from fragbench.errors import UsageError

    shown = text if len(text) <= 40 else text[:40] + "..."
    amount = amount_of(text)
    if amount is None or amount <= 0:
        raise UsageError(f"--ceiling {shown!r} is not an amount in USD above zero: write it with "
                         "the digits 0-9, maybe a point and decimals (\"25\", \"12.50\"); "
                         "nothing was written.")
    return amount


def _reason_value(text: str) -> str:
    """--reason: one printable line, neither empty nor longer than REASON_MAX, holding nothing
    shaped like a key, token or account id (nor any secret of the environment)."""
    from fragbench.budget.ledger import REASON_MAX
    from fragbench.errors import UsageError
    from fragbench.redact import Redactor

    reason = text.strip()
    if not reason:
        raise UsageError("--reason is empty: say in one line why the ceiling is raised (it is "
                         "recorded in the ledger); nothing was written.")
    if not reason.isprintable():
        raise UsageError(f"--reason {reason[:40]!r} holds a line break or another control "
                         "character: give one line of text; nothing was written.")
    if len(reason) > REASON_MAX:
        raise UsageError(f"--reason is {len(reason)} characters long, more than {REASON_MAX}: "
                         "shorten it to one line; nothing was written.")
    if Redactor.from_env().found(reason):  # the value is not repeated: it holds a secret
        raise UsageError("--reason holds what looks like a key, token or account id, which "
                         "is never written to a ledger: leave it out; nothing was written.")
    return reason


@ledger_app.command("raise")
def raise_(budget: BudgetArg, ceiling: CeilingOption, reason: ReasonOption) -> None:
    """Raise the budget's ceiling, deliberately, with a reason.

    Appends one `ceiling` record (the ceiling in force, the new one, the
    reason), chained like every record, under the ledger's lock, in the store
    a run would use. A ceiling is only ever raised: one not above the ceiling
    in force is refused, with nothing written. Then set ceiling_usd in the
    experiment's config to the new ceiling and freeze again: a run refuses a
    plan whose ceiling is not the one in force."""
    from fragbench.budget.ledger import LedgerError
    from fragbench.budget.money import usd
    from fragbench.budget.stores import ledger_for
    from fragbench.redact import Redactor

    _check_id(budget)
    amount, why = _ceiling_value(ceiling), _reason_value(reason)
    ledger = ledger_for(budget).load()  # read and checked; refused when moved or altered
    if not ledger.exists() or ledger.records == 0:
        raise LedgerError(f"ledger {ledger.where}: holds no record of budget {budget!r} (in "
                          f"the store {ledger.store}; {ledger.store_help}), so there is no "
                          "ceiling to raise: set ceiling_usd in the config and freeze again, "
                          "and the first run records it (nothing was written).")
    ledger.open(Redactor.from_env())
    try:
        record = ledger.raise_ceiling(amount, why)
        totals = _totals(ledger)
    finally:
        ledger.close()
    say(f"ledger {ledger.where}: budget {budget}'s ceiling raised from "
        f"{record['previous_ceiling_usd']} USD to {usd(amount)} USD (record {ledger.records - 1}, "
        f"chain head sha256 {ledger.head}); {totals}. Set ceiling_usd = \"{usd(amount)}\" in "
        "the [budget] table of each experiment drawing on it, then `fragbench freeze` it.")


ToOption = Annotated[str | None, typer.Option(
    help="The server, postgresql://user@host:port/database, without a password (put it in "
         "PGPASSWORD or ~/.pgpass: a command line is visible to every user of the machine); "
         "default: FRAGBENCH_LEDGER_URL, which may hold one.", show_default=False)]


def _target(to: str | None) -> str:
    """The server to move to: --to (refused when it holds a password), else
    FRAGBENCH_LEDGER_URL (the environment is readable by this user only, like ~/.pgpass)."""
    import os

    from fragbench.budget.ledger import LEDGER_URL_ENV
    from fragbench.errors import UsageError

    if to is None:
        url = os.environ.get(LEDGER_URL_ENV, "").strip()
        if not url:
            raise UsageError(f"give the server: set {LEDGER_URL_ENV}=postgresql://user:password@"
                             "host:port/database, or --to postgresql://user@host:port/database "
                             "with the password in PGPASSWORD or ~/.pgpass (nothing was "
                             "written).")
        return url
    from fragbench.budget.ledger_pg import has_password

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
    from fragbench.budget.ledger import LEDGER_ENV, Ledger, ledger_dir
    from fragbench.budget.ledger_pg import move as do_move

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
    say(f"ledger {source.where}: {done}, {moved.ledger.records} records, chain intact (head "
        f"sha256 {moved.ledger.head}); set FRAGBENCH_LEDGER_URL to that server (and unset "
        f"{LEDGER_ENV}) for every run drawing on budget {budget}.")


SeriesArg = Annotated[Path, typer.Argument(
    help="A series folder, as `fragbench run` wrote it (OUT/EXPERIMENT/SERIES, holding "
         "journal.jsonl).", show_default=False)]


def _series_lock(series_dir: Path) -> int:
    """A descriptor holding the series folder's lock (`fragbench run` holds it while it
    collects): a series being collected is not settled under it."""
    import fcntl
    import os

    from fragbench.errors import SeriesError

    fd = os.open(series_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise SeriesError(f"{series_dir}: a run is collecting this series right now; settle "
                          "it once the run has ended (nothing was written).") from None
    return fd


def _series_header(series_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The series' journal, read and chain-checked, and its header."""
    from fragbench.errors import SeriesError
    from fragbench.series.journal import JOURNAL_FILE, chain_note, read_journal

    path = series_dir / JOURNAL_FILE
    if series_dir.is_symlink() or not series_dir.is_dir() or not path.is_file():
        raise SeriesError(f"{series_dir}: is not a series folder (no {JOURNAL_FILE} in it); "
                          "give the folder `fragbench run` wrote, OUT/EXPERIMENT/SERIES "
                          "(nothing was written).")
    if chain_note(path) is not None:
        # A series that needs settling was written by a chaining fragbench (the lost-ledger
        # path came with the chain): an unchained journal here is one stripped of its chain,
        # whose outcomes nothing vouches for, and none of them goes into a shared ledger.
        raise SeriesError(f"{path}: is not chained (no record carries prev or sha256), so "
                          "its outcomes cannot be checked; settle only takes a journal a "
                          "chaining fragbench wrote: restore it from your backup (nothing was "
                          "written).")
    records = read_journal(path)
    header = records[0] if records and records[0].get("type") == "header" else {}
    if not isinstance(header.get("series_uid"), str) or not header["series_uid"]:
        raise SeriesError(f"{path}: opens with no header naming its series; it is not a "
                          "journal `fragbench run` wrote (nothing was written).")
    return records, header


@ledger_app.command()
def settle(series_dir: SeriesArg) -> None:
    """Give the ledger the outcomes a series journaled while the ledger could not be written.

    A run whose ledger failed (its server down, restarted or silent past
    FRAGBENCH_LEDGER_TIMEOUT; its file's disk full) kept the answers in
    flight in its journal, and the ledger counts those calls at their whole
    reservations. Once the ledger can be written again, this appends, under
    its lock, the journal's outcome of each call of the series the ledger
    still holds open (its counted amount), checked as any run's append. Run
    again, it appends nothing. Refused while a run collects the series; the
    store is the one a run would use."""
    import os

    from fragbench.budget.ledger import LedgerError
    from fragbench.budget.ledger import settle as do_settle
    from fragbench.budget.money import usd
    from fragbench.budget.stores import ledger_for
    from fragbench.redact import Redactor

    fd = _series_lock(series_dir)
    try:
        records, header = _series_header(series_dir)
        uid, budget = header["series_uid"], header.get("budget")
        name = str(header.get("series") or uid)
        if budget is None:
            say(f"series {name} ({series_dir}) draws on no budget: nothing to settle.")
            return
        _check_id(str(budget))
        ledger = ledger_for(str(budget)).load()
        if not ledger.exists() or ledger.records == 0:
            raise LedgerError(f"ledger {ledger.where}: holds no record of budget {budget!r} "
                              f"(in the store {ledger.store}; {ledger.store_help}); nothing "
                              "was written.")
        if uid not in ledger.series:
            say(f"ledger {ledger.where}: holds no reservation of series {name} ({uid}): "
                f"nothing to settle (a run drawing on another store? {ledger.store_help}).")
            return
        ledger.open(Redactor())
        try:
            done = do_settle(ledger, uid, name, records)
            totals = _totals(ledger)
        finally:
            ledger.close()
    finally:
        os.close(fd)
    if done.appended:
        said = (f"settled series {name} from its journal: {len(done.appended)} outcomes "
                f"appended (calls {', '.join(done.appended)}), counting {usd(done.counted)} "
                f"USD in place of their reservations' {usd(done.released)} USD")
    else:
        said = f"nothing to settle for series {name}: every outcome its journal holds is here"
    if done.still_open:
        said += (f"; {len(done.still_open)} calls stay open at their reservations (the "
                 f"journal holds no counted outcome for them: {', '.join(done.still_open)})")
    say(f"ledger {ledger.where}: {said}; {totals}.")
