"""The budget ledger: one per budget id, hash-chained, refused when altered, never trusted.

The key tests run on both stores (`store`): the file store, and a PostgreSQL server started from
the system's binaries (skipped with one line where there are none)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from support.cli import error_lines, process_env, run_cli
from support.ledgers import BUDGET, FileStore, Store, forged, write_some
from support.suite import ROOT

from fragbench.budget.ledger import Ledger, LedgerBase, LedgerError, ledger_path
from fragbench.budget.money import Budget
from fragbench.redact import Redactor

pytestmark = pytest.mark.slow


class PgStore(Store):
    def __init__(self, url: str) -> None:
        self.url = url

    def make(self, budget: Budget = BUDGET) -> LedgerBase:
        from fragbench.budget.ledger_pg import PgLedger

        return PgLedger(self.url, budget)

    def lines(self) -> list[bytes]:
        import psycopg

        with psycopg.connect(self.url) as conn:
            return [r[0].encode() for r in conn.execute(
                "SELECT line FROM fragbench_ledger WHERE budget_id = 'b' ORDER BY n")]

    def put(self, lines: list[bytes], head: bool) -> None:
        import psycopg

        with psycopg.connect(self.url) as conn:
            conn.execute("DELETE FROM fragbench_ledger WHERE budget_id = 'b'")
            for n, line in enumerate(lines):
                conn.execute("INSERT INTO fragbench_ledger VALUES ('b', %s, %s)",
                             (n, line.decode("utf-8", "replace")))
            if head:
                conn.execute("UPDATE fragbench_ledger_head SET n = %s, sha256 = %s WHERE "
                             "budget_id = 'b'", (len(lines) - 1,
                                                 hashlib.sha256(lines[-1]).hexdigest()))


@pytest.fixture(params=["file", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "file":
        return FileStore(tmp_path / "b.jsonl")
    return PgStore(request.getfixturevalue("ledger_url"))


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def rewrite(path: Path, records: list[dict]) -> None:
    path.write_bytes(b"\n".join(forged(records)) + b"\n")


def test_counts_chains_and_redacts(store: Store) -> None:
    write_some(store)
    raw = store.lines()
    records = [json.loads(line) for line in raw]
    assert [r["type"] for r in records] == ["budget", "reserve", "outcome", "reserve"]
    assert [r["n"] for r in records] == [0, 1, 2, 3]
    for before, record in zip(raw, records[1:], strict=False):
        assert record["prev"] == hashlib.sha256(before).hexdigest()
    assert not any(b"sk-secret-value-123" in line for line in raw)
    assert store.make().load().spent() == Decimal("0.10")


def test_a_second_writer_sees_what_the_first_appended(store: Store) -> None:
    first = store.make().open(Redactor())
    second = store.make().load().open(Redactor())
    with first.locked():
        first.append({"type": "reserve", "series_uid": "s1", "call_id": "a",
                      "reserved_usd": "1.5"})
    with second.locked():  # brought up to date under the lock, before any check
        assert second.spent() == Decimal("1.5")
        second.append({"type": "reserve", "series_uid": "s2", "call_id": "a",
                       "reserved_usd": "2"})
    with first.locked():
        assert first.spent() == Decimal("3.5")
    first.close()
    second.close()
    assert store.make().load().spent() == Decimal("3.5")


def test_a_torn_last_line_is_ignored_then_repaired(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    write_some(path)
    with open(path, "ab") as fh:  # a power loss in the middle of the next reservation
        fh.write(b'{"type": "reserve", "series_uid": "s3", "call_id": "a", "res')
    assert Ledger(path, BUDGET).load().spent() == Decimal("0.10")
    later = Ledger(path, BUDGET).load().open(Redactor())
    with later.locked():
        later.append({"type": "reserve", "series_uid": "s3", "call_id": "b",
                      "reserved_usd": "0.01"})
    later.close()
    reread = Ledger(path, BUDGET).load()
    assert reread.spent() == Decimal("0.11")
    assert path.read_text(encoding="utf-8").count('"type": "repair"') == 1


TAMPERS = {
    "negative counted_usd (hashes recomputed)": (
        lambda rs: rs[2].update(counted_usd="-5"), "invalid counted_usd"),
    "unparsable amount (hashes recomputed)": (
        lambda rs: rs[1].update(reserved_usd="ninety cents"), "invalid reserved_usd"),
    "an outcome with no reservation (hashes recomputed)": (
        lambda rs: rs.pop(1), "no open reservation"),
}


@pytest.mark.parametrize("name", list(TAMPERS))
def test_a_forged_value_is_refused(store: Store, name: str) -> None:
    write_some(store)
    records = [{k: v for k, v in json.loads(r).items() if k not in ("n", "prev")}
               for r in store.lines()]
    change, words = TAMPERS[name]
    change(records)
    store.put(forged(records), head=True)
    with pytest.raises(LedgerError, match=words):
        store.make().load()


EDITS = {
    "a deleted line": lambda ls: ls[:2] + ls[3:],
    "an amount lowered by hand": lambda ls: [ls[0], ls[1].replace(b'"0.09"', b'"0.01"'),
                                             *ls[2:]],
    "a line that is not JSON": lambda ls: [ls[0], b"garbage", *ls[2:]],
    "an inserted line": lambda ls: [*ls[:2], ls[1], *ls[2:]],
}


@pytest.mark.parametrize("name", list(EDITS))
def test_a_hand_edit_breaks_the_chain(store: Store, name: str) -> None:
    write_some(store)
    store.put(EDITS[name](store.lines()), head=False)
    with pytest.raises(LedgerError, match="never trusted"):
        store.make().load()


def test_one_budget_has_one_ceiling(store: Store) -> None:
    write_some(store)
    other = Budget(id="b", ceiling_usd=Decimal(20), prior_spend_usd=Decimal("0.5"),
                   framing_tokens=1024)
    with pytest.raises(LedgerError, match="one budget has one ceiling"):
        store.make(other).load()


@pytest.mark.parametrize("kind", ["symlink to /dev/null", "dangling symlink", "a folder"])
def test_a_ledger_that_is_no_file_is_refused(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "b.jsonl"
    if kind == "symlink to /dev/null":
        os.symlink("/dev/null", path)
    elif kind == "dangling symlink":
        os.symlink(tmp_path / "gone.jsonl", path)
    else:
        path.mkdir()
    with pytest.raises(LedgerError):
        Ledger(path, BUDGET).load()
    with pytest.raises(LedgerError):
        Ledger(path, BUDGET).open(Redactor())


@pytest.mark.parametrize("damage", ["negative amount", "symlink to /dev/null"])
def test_plan_and_run_refuse_a_damaged_ledger_in_one_line(experiment: Path, workspace: Path,
                                                           damage: str) -> None:
    path = ledger_path("protocol-1.0-openai")
    path.parent.mkdir(parents=True, exist_ok=True)
    if damage == "symlink to /dev/null":
        os.symlink("/dev/null", path)
    else:
        rewrite(path, [{"type": "budget", "id": "protocol-1.0-openai", "ceiling_usd": "10",
                        "prior_spend_usd": "0.41792"},
                       {"type": "reserve", "series_uid": "x", "call_id": "c",
                        "reserved_usd": "-100"}])
    for args in (("plan", str(experiment)),
                 ("run", str(experiment), "--out", str(workspace / "outputs"))):
        result = run_cli(*args, env={"OPENAI_API_KEY": "sk-test-ledger-000000000000",
                                     "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
        assert result.returncode == 4, result.stderr
        assert len(error_lines(result.stderr)) == 1 and str(path) in result.stderr
    assert not (workspace / "outputs").exists()


@pytest.mark.parametrize("crash", [
    "a line ended but its repair never written",
    "a whole record written but its newline lost",
    "two torn lines in a row",
])
def test_every_crash_leaves_a_ledger_the_next_writer_can_repair(tmp_path: Path,
                                                                crash: str) -> None:
    path = tmp_path / "b.jsonl"
    write_some(path)
    record = json.dumps({"type": "reserve", "series_uid": "s3", "call_id": "a",
                         "reserved_usd": "5", "n": 4, "prev": "x"}).encode()
    with open(path, "ab") as fh:
        fh.write({"a line ended but its repair never written": b'{"type": "res\n',
                  "a whole record written but its newline lost": record,
                  "two torn lines in a row": b'{"type": "res\n{"ty'}[crash])
    assert Ledger(path, BUDGET).load().spent() == Decimal("0.10")  # read, not refused
    later = Ledger(path, BUDGET).load().open(Redactor())
    with later.locked():
        later.append({"type": "reserve", "series_uid": "s3", "call_id": "b",
                      "reserved_usd": "0.01"})
    later.close()
    assert Ledger(path, BUDGET).load().spent() == Decimal("0.11")


def test_a_ledger_replaced_under_a_run_stops_it(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    write_some(path)
    ledger = Ledger(path, BUDGET).load().open(Redactor())
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(path.read_bytes())
    copy.replace(path)  # a checkout or a restore renames another file into place
    with pytest.raises(LedgerError, match="replaced or removed"), ledger.locked():
        pass
    ledger.close()


def test_a_relative_ledger_folder_is_refused(experiment: Path) -> None:
    result = run_cli("plan", str(experiment), env={"FRAGBENCH_LEDGER_DIR": "ledgers"})
    assert result.returncode == 4
    [line] = error_lines(result.stderr)
    assert "FRAGBENCH_LEDGER_DIR=ledgers" in line and "absolute path" in line


WITHOUT_PSYCOPG = ("import runpy, sys; sys.modules['psycopg'] = None; "
                   "runpy.run_module('fragbench', run_name='__main__')")
"""fragbench as a machine without psycopg runs it: a fresh interpreter where importing psycopg
(or any part of it) fails, as when the package is not installed."""


@pytest.mark.parametrize("args", [("ledger", "show", "b"), ("ledger", "move", "b"),
                                  ("ledger", "move", "b", "--to", "postgresql://u@h/db")])
def test_a_server_store_without_psycopg_is_refused_in_one_line(tmp_path: Path,
                                                                args: tuple[str, ...]) -> None:
    """A subprocess: psycopg cannot be removed from this interpreter, which imported it."""
    env = process_env({"FRAGBENCH_LEDGER_URL": "postgresql://team@127.0.0.1:9/budgets"})
    env.pop("FRAGBENCH_LEDGER_DIR", None)
    if args[1] == "move":
        env["FRAGBENCH_LEDGER_DIR"] = str(tmp_path)
        write_some(tmp_path / "b.jsonl")
    done = subprocess.run([sys.executable, "-c", WITHOUT_PSYCOPG, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 4, done.stderr
    [line] = error_lines(done.stderr)
    assert "psycopg is not installed: install fragbench[postgres]" in line


# -- Issue 24: a second outcome, and the edited record named ----------------------------------

def two_outcomes() -> list[dict]:
    """One call reserved at 5 USD and given two outcomes of 0.01 USD: counted as twice settled,
    it would record a spend of 0.01 + 0.01 - 5 = -4.98 USD."""
    return [{"type": "budget", "id": "b", "ceiling_usd": "10", "prior_spend_usd": "0.5"},
            {"type": "reserve", "series_uid": "s1", "call_id": "a", "reserved_usd": "5"},
            {"type": "outcome", "series_uid": "s1", "call_id": "a", "counted_usd": "0.01"},
            {"type": "outcome", "series_uid": "s1", "call_id": "a", "counted_usd": "0.01"}]


def test_a_second_outcome_for_one_call_is_refused_when_read(store: Store) -> None:
    write_some(store)  # creates the server's tables, and the head `put` then forges
    store.put(forged(two_outcomes()), head=True)
    with pytest.raises(LedgerError, match=r"record 3|line 4") as refused:
        store.make().load()
    assert "second outcome for call a of series s1" in str(refused.value)


def test_a_second_outcome_for_one_call_is_never_written(store: Store) -> None:
    ledger = store.make().open(Redactor())
    outcome = {"type": "outcome", "series_uid": "s1", "call_id": "a", "counted_usd": "0.01"}
    with ledger.locked():
        ledger.append({"type": "reserve", "series_uid": "s1", "call_id": "a",
                       "reserved_usd": "5"})
        ledger.append(outcome)
    with pytest.raises(LedgerError, match="second outcome for call a"), ledger.locked():
        ledger.append(outcome)
    ledger.close()
    reread = store.make().load()  # still readable: nothing of the refused record was written
    assert reread.spent() == Decimal("0.01") and reread.records == 3


EDITED = {
    # what is edited, how, and the record the refusal must name (file line; server record)
    "an amount of record 1": (1, lambda r: r.replace(b'"0.09"', b'"0.01"'), "line 2 was edited",
                              "record 1 was edited"),
    "the prev of record 2": (2, lambda r: r.replace(b'"prev": "', b'"prev": "0'),
                             "line 3 was edited", "record 2 was edited"),
    "the genesis's ceiling": (0, lambda r: r.replace(b'"10"', b'"10.0"'), "line 1 was edited",
                              "record 0 was edited"),
}


@pytest.mark.parametrize("name", list(EDITED))
def test_an_edited_record_is_named_not_the_one_after_it(store: Store, name: str) -> None:
    """The record after an edited one chains to its old text: the break shows between the
    two, and the refusal names the edited one (the one after it, still vouched for by its own
    successor, is intact). With a budget that reads any ceiling, so only the chain speaks."""
    write_some(store)
    at, edit, in_file, on_server = EDITED[name]
    lines = store.lines()
    lines[at] = edit(lines[at])
    store.put(lines, head=False)
    with pytest.raises(LedgerError) as refused:
        store.make("b").load()  # type: ignore[arg-type]
    expected = in_file if isinstance(store, FileStore) else on_server
    assert expected in str(refused.value), str(refused.value)


def test_an_edit_before_the_last_record_names_both_in_a_file(tmp_path: Path) -> None:
    """A file's last line has no successor to vouch for it: an edit of the line before it is
    named with it (a server's head vouches for its last record: tested in test_ledger_pg)."""
    path = tmp_path / "b.jsonl"
    write_some(path)
    path.write_bytes(path.read_bytes().replace(b'"0.02"', b'"0.01"'))
    with pytest.raises(LedgerError, match="line 3 or line 4 was edited"):
        Ledger(path, BUDGET).load()
