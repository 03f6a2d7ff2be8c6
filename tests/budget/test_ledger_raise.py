"""Issue 26: a budget's ceiling raised deliberately, `fragbench ledger raise BUDGET --ceiling USD
--reason TEXT`, as README.md and docs/your-own-experiment.md ("Raising the ceiling") say.

A raise is a `ceiling` record, chained like every record, in either store; a ceiling is only
ever raised (a lower or equal one is refused, and so is a hand-written record lowering it);
bad input is refused in one line naming the value, with nothing written; a plan whose ceiling
is not the ledger's ceiling in force is refused, pointing at `fragbench ledger raise`. The
page's own commands run end to end against the loopback server (real openai SDK).
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
from decimal import Decimal
from pathlib import Path

import pytest
from support.cli import error_lines, refreeze, run_cli
from support.ledgers import BUDGET, forged, write_some
from support.pg_server import PASSWORD
from support.suite import CANARY_KEY, ROOT
from support.walkthrough import blocks, edit_toml

from fragbench.budget.ledger import Ledger, LedgerBase, LedgerError
from fragbench.budget.money import Budget
from fragbench.budget.stores import ledger_for
from fragbench.redact import Redactor
from fragbench.testing.loopback import Server

pytestmark = pytest.mark.slow

PAGE = ROOT / "docs" / "your-own-experiment.md"
SECTION = "## Raising the ceiling"
REASON = "the whole dev set, 7,405 questions"


def budget(ceiling: str, prior: str = "0.5") -> Budget:
    return Budget(id="b", ceiling_usd=Decimal(ceiling), prior_spend_usd=Decimal(prior),
                  framing_tokens=1024)


class PgStore:
    """write_some's store on the server FRAGBENCH_LEDGER_URL names."""

    def __init__(self, url: str) -> None:
        self.url = url

    def make(self, budget: Budget = BUDGET) -> LedgerBase:
        from fragbench.budget.ledger_pg import PgLedger

        return PgLedger(self.url, budget)


@pytest.fixture(params=["file", "postgresql"])
def written(request: pytest.FixtureRequest, ledger_store: Path) -> Path | str:
    """Budget `b` (ceiling 10, prior 0.5, two series) in the store the environment selects:
    the file, or the server's URL."""
    if request.param == "file":
        write_some(ledger_store / "b.jsonl")
        return ledger_store / "b.jsonl"
    url = str(request.getfixturevalue("ledger_url"))
    write_some(PgStore(url))  # type: ignore[arg-type]
    return url


def records(where: Path | str) -> list[bytes]:
    """Every record's text, in order, in either store (and, on a server, its head)."""
    if isinstance(where, Path):
        return where.read_bytes().splitlines()
    import psycopg

    with psycopg.connect(where) as conn:
        lines = [str(r[0]).encode() for r in conn.execute(
            "SELECT line FROM fragbench_ledger WHERE budget_id = 'b' ORDER BY n")]
        head = conn.execute("SELECT n, sha256 FROM fragbench_ledger_head WHERE budget_id = "
                            "'b'").fetchone()
    return [*lines, f"head {head}".encode()]


# -- The record, on both stores ------------------------------------------------------------------

def test_a_raise_appends_one_chained_record_that_show_and_verify_accept(
        written: Path | str) -> None:
    before = records(written)
    raised = run_cli("ledger", "raise", "b", "--ceiling", "25", "--reason", REASON)
    assert raised.returncode == 0, raised.stderr
    assert "ceiling raised from 10 USD to 25 USD" in raised.stdout
    assert 'Set ceiling_usd = "25"' in raised.stdout and "freeze" in raised.stdout
    after = records(written)
    lines = after[:-1] if isinstance(written, str) else after
    old = before[:-1] if isinstance(written, str) else before
    assert lines[:len(old)] == old and len(lines) == len(old) + 1  # appended, nothing else
    record = json.loads(lines[-1])
    assert {k: record[k] for k in ("n", "type", "previous_ceiling_usd", "ceiling_usd",
                                   "reason")} == {
        "n": 4, "type": "ceiling", "previous_ceiling_usd": "10", "ceiling_usd": "25",
        "reason": REASON}
    assert record["prev"] == hashlib.sha256(lines[-2]).hexdigest() and record["at"]
    if isinstance(written, str):  # the server's head names the raise
        assert after[-1] == f"head (4, '{hashlib.sha256(lines[-1]).hexdigest()}')".encode()
        assert PASSWORD not in raised.stdout + raised.stderr
        assert all(PASSWORD.encode() not in line for line in after)

    shown = run_cli("ledger", "show", "b")
    assert shown.returncode == 0, shown.stderr
    [row] = [line for line in shown.stdout.splitlines() if "ceiling raised" in line]
    assert row.split()[0] == "4" and record["at"] in row
    assert row.endswith(f"ceiling raised from 10 USD to 25 USD: {REASON}")
    assert "ceiling 25 - prior 0.5 - recorded series 0.1 = balance 24.4 USD" in shown.stdout
    assert "chain intact: 5 records" in shown.stdout
    verified = run_cli("ledger", "verify", "b")
    assert verified.returncode == 0, verified.stderr
    assert "verified, 5 records, chain intact" in verified.stdout
    assert "ceiling 25 - prior 0.5" in verified.stdout

    # The ceiling in force is the raise's: the config must say 25 now, neither 10 nor 30.
    assert ledger_for(budget("25")).load().ceiling == Decimal(25)
    with pytest.raises(LedgerError, match=r'one budget has one ceiling at a time; set '
                       r'ceiling_usd = "25" in the config and freeze again'):
        ledger_for(budget("10")).load()
    with pytest.raises(LedgerError, match=r"raise the ledger's ceiling first: `fragbench ledger "
                       r"raise b --ceiling 30 --reason TEXT`"):
        ledger_for(budget("30")).load()

    # A second raise chains on the first; the one before it is the ceiling it replaces.
    again = run_cli("ledger", "raise", "b", "--ceiling", "40.5", "--reason", "a second pass")
    assert again.returncode == 0, again.stderr
    assert "ceiling raised from 25 USD to 40.5 USD" in again.stdout
    assert ledger_for(budget("40.5")).load().ceiling == Decimal("40.5")
    with pytest.raises(LedgerError, match="raised from the 10 USD of its first record"):
        ledger_for(budget("25")).load()


REFUSED = [
    # (--ceiling, --reason, exit, what the one line says)
    ("5", REASON, 4, "--ceiling 5: is not above budget b's ceiling in force, 10 USD"),
    ("9.99", REASON, 4, "--ceiling 9.99: is not above"),
    ("10", REASON, 4, "--ceiling 10: is not above"),  # the same ceiling again
    ("10.000", REASON, 4, "--ceiling 10: is not above"),
    ("0", REASON, 2, "--ceiling '0' is not an amount in USD above zero"),
    ("-5", REASON, 2, "--ceiling '-5' is not an amount in USD above zero"),
    ("1e3", REASON, 2, "--ceiling '1e3' is not an amount"),
    ("ten", REASON, 2, "--ceiling 'ten' is not an amount"),
    ("", REASON, 2, "--ceiling '' is not an amount"),
    ("25 ", REASON, 2, "--ceiling '25 ' is not an amount"),
    ("\u0662\u0665", REASON, 2, "is not an amount"),  # Arabic-Indic digits, which Decimal reads
    ("25", "", 2, "--reason is empty"),
    ("25", "   ", 2, "--reason is empty"),
    ("25", "two\nlines", 2, "--reason 'two\\nlines' holds a line break"),
    ("25", "x" * 501, 2, "--reason is 501 characters long, more than 500"),
    ("25", f"paid with {CANARY_KEY}", 2, "--reason holds what looks like a key"),
    ("25", "Authorization: Bearer abcdefghijklmnopqrstuvwxyz", 2,
     "--reason holds what looks like a key"),
]


@pytest.mark.parametrize(("ceiling", "reason", "code", "says"), REFUSED,
                         ids=[f"{c!r}-{r[:12]!r}" for c, r, _, _ in REFUSED])
def test_a_lower_ceiling_or_bad_input_is_refused_and_nothing_is_written(
        written: Path | str, ceiling: str, reason: str, code: int, says: str) -> None:
    before = records(written)
    result = run_cli("ledger", "raise", "b", "--ceiling", ceiling, "--reason", reason)
    assert result.returncode == code, (result.stdout, result.stderr)
    [line] = error_lines(result.stderr)
    assert says in line, line
    assert "nothing was written" in line
    assert CANARY_KEY not in result.stderr + result.stdout
    assert records(written) == before


def test_a_raise_after_a_raise_is_checked_against_the_raised_ceiling(written: Path | str
                                                                     ) -> None:
    assert run_cli("ledger", "raise", "b", "--ceiling", "25", "--reason", REASON
                   ).returncode == 0
    before = records(written)
    lower = run_cli("ledger", "raise", "b", "--ceiling", "20", "--reason", "less")
    assert lower.returncode == 4
    [line] = error_lines(lower.stderr)
    assert "--ceiling 20: is not above budget b's ceiling in force, 25 USD" in line
    assert records(written) == before


def test_a_budget_with_no_ledger_has_no_ceiling_to_raise(ledger_store: Path) -> None:
    result = run_cli("ledger", "raise", "fresh", "--ceiling", "25", "--reason", REASON)
    assert result.returncode == 4
    [line] = error_lines(result.stderr)
    assert "holds no record of budget 'fresh'" in line
    assert "set ceiling_usd in the config and freeze again" in line
    assert not any(ledger_store.iterdir())  # no file made
    bad = run_cli("ledger", "raise", "../b", "--ceiling", "25", "--reason", REASON)
    assert bad.returncode == 2 and "BUDGET is not a budget id" in bad.stderr


def test_a_raise_of_a_moved_file_ledger_is_refused(ledger_store: Path) -> None:
    path = ledger_store / "b.jsonl"
    write_some(path)
    ledger = Ledger(path, "b")
    ledger.audit = True  # as `ledger move` writes it: the file retired
    ledger.load().open(Redactor())
    with ledger.locked():
        ledger.append({"type": "moved", "to": "postgresql://127.0.0.1:5432/x"})
    ledger.close()
    before = path.read_bytes()
    result = run_cli("ledger", "raise", "b", "--ceiling", "25", "--reason", REASON)
    assert result.returncode == 4 and "was moved to the server" in result.stderr
    assert path.read_bytes() == before


# -- A ceiling record written by hand -------------------------------------------------------------

GENESIS = {"type": "budget", "id": "b", "ceiling_usd": "10", "prior_spend_usd": "0.5"}


@pytest.mark.parametrize(("raise_", "says"), [
    ({"previous_ceiling_usd": "10", "ceiling_usd": "5"},
     "line 2 sets the ceiling to 5 USD, not above the 10 USD in force: a ceiling is only ever "
     "raised"),
    ({"previous_ceiling_usd": "10", "ceiling_usd": "10"}, "not above the 10 USD in force"),
    ({"previous_ceiling_usd": "8", "ceiling_usd": "25"},
     "line 2 raises a ceiling of '8' USD, not the one in force (10 USD)"),
    ({"previous_ceiling_usd": "10", "ceiling_usd": "-25"}, "line 2 has an invalid ceiling_usd"),
    ({"previous_ceiling_usd": "10", "ceiling_usd": "1e3"}, "line 2 has an invalid ceiling_usd"),
    ({"previous_ceiling_usd": "10", "ceiling_usd": "25"}, "line 2 gives no reason"),
    ({"previous_ceiling_usd": "10", "ceiling_usd": "25", "reason": " "}, "gives no reason"),
])
def test_a_ceiling_record_that_is_no_raise_is_an_altered_ledger(
        ledger_store: Path, raise_: dict, says: str) -> None:
    """A forger who lowers the ceiling and rewrites every hash: only the values speak."""
    path = ledger_store / "b.jsonl"
    path.write_bytes(b"\n".join(forged([GENESIS, {"type": "ceiling", **raise_}])) + b"\n")
    with pytest.raises(LedgerError, match="never trusted") as refused:
        Ledger(path, "b").load()
    assert says in str(refused.value)
    result = run_cli("ledger", "verify", "b")
    assert result.returncode == 4 and says in result.stderr


def test_a_bug_writing_a_lowering_record_is_refused_before_it_is_written(
        written: Path | str) -> None:
    before = records(written)
    ledger = ledger_for("b").load()
    ledger.open(Redactor())
    try:
        for record in ({"previous_ceiling_usd": "10", "ceiling_usd": "5", "reason": "x"},
                       {"previous_ceiling_usd": "7", "ceiling_usd": "25", "reason": "x"},
                       {"previous_ceiling_usd": "10", "ceiling_usd": "25"}):
            with pytest.raises(LedgerError, match="refused to write a raise that"), \
                    ledger.locked():
                ledger.append({"type": "ceiling", **record})
        with pytest.raises(LedgerError, match="--ceiling 10: is not above"):
            ledger.raise_ceiling(Decimal(10), "x")
    finally:
        ledger.close()
    assert records(written) == before


# -- The page followed: a run against the raised ceiling ------------------------------------------

def page_commands() -> tuple[list[str], str]:
    """The section's shell commands, in order, and its config change (the TOML block)."""
    found = blocks(PAGE, SECTION, "A ceiling is only ever raised")
    commands = [line for b in found if b.lang == "shell" for line in b.text.splitlines()
                if line.strip() and not line.startswith("#")]
    [toml] = [b.text for b in found if b.lang == "toml"]
    return commands, toml


def run_line(line: str, server: Server) -> str:
    """One of the page's command lines, in process: its environment prefix given to the
    command (the loopback server for the page's example address), a `| grep TEXT` checked on
    its output."""
    command, _, grep = line.partition(" | grep ")
    words = shlex.split(command)
    env = {}
    while "=" in words[0]:
        key, value = words.pop(0).split("=", 1)
        env[key] = value.replace("http://127.0.0.1:8000/v1", server.base_url)
    assert words[0] == ".venv/bin/fragbench", line
    if "OPENAI_API_KEY" in env:  # the canary the test looks for in every file, for the fake key
        env["OPENAI_API_KEY"] = CANARY_KEY
    result = run_cli(*words[1:], env=env)
    assert result.returncode == 0, (line, result.stdout, result.stderr)
    if grep:
        assert shlex.split(grep)[0] in result.stdout, (line, result.stdout)
    return result.stderr


def hotpot_dev(workspace: Path, ceiling: str) -> Path:
    """Protocol 1.0's experiment copied to experiments/hotpot-dev with the page's budget id."""
    experiment = workspace / "experiments" / "hotpot-dev"
    shutil.copytree(workspace / "experiments" / "protocol-1.0", experiment)
    config = experiment / "config.toml"
    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace('id = "protocol-1.0-openai"', 'id = "hotpot-dev"')
                      .replace('ceiling_usd = "10"', f'ceiling_usd = "{ceiling}"'),
                      encoding="utf-8")
    assert run_cli("freeze", str(experiment)).returncode == 0
    return experiment


def billed(experiment: Path, series: str, server: Server) -> tuple[int, str]:
    result = run_cli("run", str(experiment), "--series", series, "--backend", "openai",
                     "--out", str(experiment.parent.parent / "outputs"),
                     env={"OPENAI_API_KEY": CANARY_KEY, "OPENAI_BASE_URL": server.base_url})
    assert "Traceback" not in result.stderr
    return result.returncode, result.stderr


def test_the_page_raises_the_ceiling_and_a_run_uses_it(workspace: Path, server: Server,
                                                       ledger_store: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A first series fits under 7.5 USD, a second does not (refused, nothing sent); the
    page's commands raise the ceiling to 25, change the config, freeze, plan and run the
    second series, which runs whole against the raised ceiling; `ledger show` lists the
    raise."""
    experiment = hotpot_dev(workspace, "7.5")
    code, _ = billed(experiment, "openai", server)
    assert code == 0
    sent = len(server.requests)
    code, err = billed(experiment, "openai-full", server)
    assert code == 4 and "has" in err and "USD left (ceiling 7.5" in err
    assert len(server.requests) == sent  # refused before anything was sent

    commands, toml = page_commands()
    assert commands[0].startswith(".venv/bin/fragbench ledger raise hotpot-dev --ceiling 25 ")
    assert "ceiling_usd = \"25\"" in toml and any(" freeze " in c for c in commands)
    monkeypatch.chdir(workspace)
    run_line(commands[0], server)
    edit_toml(experiment / "config.toml", toml)
    said = [run_line(line.replace("from 2 USD", "from 7.5 USD"), server)  # the page's 2 USD
            for line in commands[1:]]
    [announce] = [line for text in said for line in text.splitlines() if "billed run:" in line]
    assert "budget hotpot-dev: balance" in announce and "of ceiling 25 (ledger" in announce

    assert len(server.requests) == sent + 72  # the second series, whole
    ledger = ledger_for(Budget(id="hotpot-dev", ceiling_usd=Decimal(25),
                               prior_spend_usd=Decimal("0.41792"), framing_tokens=1024)).load()
    assert ledger.ceiling == Decimal(25) and len(ledger.series) == 2
    assert Decimal("0.41792") + ledger.spent() <= Decimal(25)
    info = json.loads((workspace / "outputs" / "protocol-1.0" / "openai-full" / "series.json"
                       ).read_text(encoding="utf-8"))
    assert info["budget"] == "hotpot-dev"
    for path in ledger_store.rglob("*"):
        assert CANARY_KEY.encode() not in path.read_bytes()


@pytest.mark.parametrize("where", ["file", "postgresql"])
def test_a_plan_ceiling_other_than_the_ledgers_is_refused_until_raised(
        request: pytest.FixtureRequest, where: str, experiment: Path, server: Server) -> None:
    """The config's ceiling raised and frozen without `ledger raise`: `plan` and `run` are
    refused (exit 4, nothing sent), naming the command; a raise to another amount still is;
    the raise to the config's amount lets the run go, under that ceiling; and a config back at
    the old ceiling is refused too (the ledger's ceiling was raised)."""
    if where == "postgresql":
        request.getfixturevalue("ledger_url")
    refreeze(experiment, 'ceiling_usd = "10"', 'ceiling_usd = "7.5"')
    assert billed(experiment, "first", server)[0] == 0
    sent = len(server.requests)
    refreeze(experiment, 'ceiling_usd = "7.5"', 'ceiling_usd = "15"')
    for args in (("plan", str(experiment), "--backend", "openai"),
                 ("run", str(experiment), "--series", "second", "--backend", "openai",
                  "--out", str(experiment.parent.parent / "outputs"))):
        result = run_cli(*args, env={"OPENAI_API_KEY": CANARY_KEY,
                                     "OPENAI_BASE_URL": server.base_url})
        assert result.returncode == 4, result.stderr
        [line] = error_lines(result.stderr)
        assert "with ceiling 7.5 USD, but the config says 15" in line
        assert "`fragbench ledger raise protocol-1.0-openai --ceiling 15 --reason TEXT`" in line
        assert "nothing was sent" in line
    assert not (experiment.parent.parent / "outputs" / "protocol-1.0" / "second").exists()

    assert run_cli("ledger", "raise", "protocol-1.0-openai", "--ceiling", "12", "--reason",
                   "not enough").returncode == 0
    code, err = billed(experiment, "second", server)
    assert code == 4 and "with ceiling 12 USD, raised from the 7.5 USD of its first record, " \
        "but the config says 15" in err
    assert len(server.requests) == sent

    assert run_cli("ledger", "raise", "protocol-1.0-openai", "--ceiling", "15", "--reason",
                   "a second series").returncode == 0
    code, err = billed(experiment, "second", server)
    assert code == 0, err
    assert "balance" in err and "of ceiling 15 (ledger" in err
    assert len(server.requests) == sent + 72

    refreeze(experiment, 'ceiling_usd = "15"', 'ceiling_usd = "7.5"')
    code, err = billed(experiment, "third", server)
    assert code == 4 and 'set ceiling_usd = "15" in the config and freeze again' in err
    assert len(server.requests) == sent + 72


def test_a_raise_too_small_for_the_plan_is_still_refused_before_anything_is_sent(
        experiment: Path, server: Server) -> None:
    """The run checks the raised ceiling like any other: a series that does not fit under it
    is refused before its first call."""
    refreeze(experiment, 'ceiling_usd = "10"', 'ceiling_usd = "7.5"')
    assert billed(experiment, "first", server)[0] == 0
    sent = len(server.requests)
    assert run_cli("ledger", "raise", "protocol-1.0-openai", "--ceiling", "8", "--reason",
                   "a little more").returncode == 0
    refreeze(experiment, 'ceiling_usd = "7.5"', 'ceiling_usd = "8"')
    code, err = billed(experiment, "second", server)
    assert code == 4 and "USD left (ceiling 8," in err and "nothing was sent" in err
    assert len(server.requests) == sent
