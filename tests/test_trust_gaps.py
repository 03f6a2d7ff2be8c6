"""The trust gaps that new users and fault injection found: money, secrets, one-line errors.

The real command (in process, through Typer's runner, or as a subprocess where the process is
what is tested), the real openai SDK against the loopback server, real files.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from support.cli import error_lines, process_env, refreeze, run_cli
from support.series import calls_of, collect
from support.suite import CANARY_KEY, PATIENCE, ROOT

from fragbench.budget.ledger import Ledger, ledger_path
from fragbench.experiment.config import load_experiment
from fragbench.series.journal import chain
from fragbench.testing.loopback import Handler, Server, answer_for, ok, response_body

pytestmark = pytest.mark.slow

OPENAI_ENV = {"OPENAI_API_KEY": CANARY_KEY}


def env_for(server: Server) -> dict[str, str]:
    return {**OPENAI_ENV, "OPENAI_BASE_URL": server.base_url}


# -- 1. A series name never picks a paid backend ---------------------------------------------

def test_a_series_name_that_names_no_backend_needs_backend(experiment: Path, workspace: Path,
                                                           server: Server) -> None:
    out = workspace / "outputs"
    result = run_cli("run", str(experiment), "--series", "extractive-b", "--out", str(out),
                     env=env_for(server))
    assert result.returncode == 2  # usage
    [line] = error_lines(result.stderr)
    assert "--series extractive-b names no backend" in line and "--backend" in line
    assert server.requests == [] and not out.exists()
    # With --backend it is an offline series like any other.
    ok_run = run_cli("run", str(experiment), "--series", "extractive-b", "--backend",
                     "extractive", "--out", str(out), env=env_for(server))
    assert ok_run.returncode == 0, ok_run.stderr
    assert server.requests == []
    info = json.loads((out / "protocol-1.0" / "extractive-b" / "series.json").read_text())
    assert info["backend"] == "extractive"


def test_a_billed_run_says_what_it_draws_on_before_the_first_call(experiment: Path,
                                                                  server: Server) -> None:
    result, _ = collect(experiment, server)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    [announce] = [i for i, line in enumerate(lines) if "billed run:" in line]
    first_call = next(i for i, line in enumerate(lines) if line.startswith("call 1/72"))
    assert announce < first_call
    text = lines[announce]
    plan = json.loads((experiment / "experiment.json").read_text(encoding="utf-8"))
    for part in ("backend openai", server.base_url, "budget protocol-1.0-openai",
                 str(ledger_path("protocol-1.0-openai")),
                 "balance 9.58208 USD", f"reserve {plan['budget']['total_reservation_usd']} USD"):
        assert part in text, (part, text)


# -- 2. One budget, one ledger ------------------------------------------------------------------

def balance_line(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if "= balance" in line)


def test_a_copied_experiment_draws_on_the_same_ledger(experiment: Path, workspace: Path,
                                                      server: Server, tmp_path: Path) -> None:
    refreeze(experiment, 'ceiling_usd = "10"', 'ceiling_usd = "7.5"')
    # Copied before anything was spent: the copy holds no record of what the original spends.
    copy = tmp_path / "elsewhere" / "experiments" / "protocol-1.0-copy"
    shutil.copytree(experiment, copy)
    shutil.copytree(workspace / "corpus", tmp_path / "elsewhere" / "corpus")
    first, _ = collect(experiment, server)
    assert first.returncode == 0, first.stderr
    original, copied = run_cli("plan", str(experiment)), run_cli("plan", str(copy))
    assert original.returncode == copied.returncode == 0
    assert balance_line(original.stdout) == balance_line(copied.stdout)
    assert "DOES NOT FIT" in copied.stdout
    again = run_cli("run", str(copy), "--series", "openai-copy", "--backend", "openai",
                    "--out", str(tmp_path / "out"), env=env_for(server))
    assert again.returncode == 4 and "nothing was sent" in again.stderr
    assert len(server.requests) == 72 and not (tmp_path / "out").exists()


def test_another_ceiling_under_the_same_budget_id_is_refused(experiment: Path,
                                                             server: Server) -> None:
    first, _ = collect(experiment, server)
    assert first.returncode == 0
    refreeze(experiment, 'ceiling_usd = "10"', 'ceiling_usd = "50"')
    for args in (("plan", str(experiment)),
                 ("run", str(experiment), "--series", "openai-2", "--backend", "openai",
                  "--out", str(experiment.parent.parent / "outputs"))):
        result = run_cli(*args, env=env_for(server))
        assert result.returncode == 4
        [line] = error_lines(result.stderr)
        assert "one budget has one ceiling" in line
    assert len(server.requests) == 72


# -- 5. Impossible usage does not lock the budget ------------------------------------------------

def test_an_impossible_usage_is_counted_at_the_reservation(experiment: Path,
                                                           server: Server) -> None:
    server.script[5] = ok(usage={
        "input_tokens": 10**12, "input_tokens_details": {"cached_tokens": 0,
                                                         "cache_write_tokens": 0},
        "output_tokens": 10**12, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 2 * 10**12})
    first, series_dir = collect(experiment, server)
    assert first.returncode == 3 and "impossible usage" in first.stderr
    row = calls_of(series_dir).row(5, named=True)
    assert row["cost_usd"] is None and row["counted_usd"] == row["reserved_usd"]
    assert row["input_tokens"] == 10**12  # the reported figures, kept for a person to read
    server.script.clear()
    second, _ = collect(experiment, server, series="openai-2")
    assert second.returncode == 0, second.stderr  # the budget is not locked


# -- 6. A series that sent nothing is not burned ---------------------------------------------

def seed_series(out: Path, name: str, files: dict[str, str]) -> Path:
    series_dir = out / "protocol-1.0" / name
    series_dir.mkdir(parents=True)
    for file, text in files.items():
        (series_dir / file).write_text(text, encoding="utf-8")
    return series_dir


AT = "2026-10-08T12:00:00.000+00:00"
HEADER = {"at": AT, "type": "header", "series": "openai", "series_uid": "u1"}
RESERVE = {"at": AT, "type": "reserve", "call_id": "x", "seq": 1, "reserved_usd": "0.09"}
HEADER_ONLY = chain([HEADER]).decode()
RESERVED = chain([HEADER, RESERVE]).decode()


@pytest.mark.parametrize("left", ["an empty folder", "killed before its journal header",
                                  "a journal with a header only"])
def test_a_series_that_sent_nothing_can_run_again(experiment: Path, server: Server,
                                                  left: str) -> None:
    out = experiment.parent.parent / "outputs"
    files = {"an empty folder": {},
             "killed before its journal header": {"plan.json": "{}", "series.json": "{"},
             "a journal with a header only": {"plan.json": "{}",
                                              "journal.jsonl": HEADER_ONLY}}[left]
    seed_series(out, "openai", files)
    result, series_dir = collect(experiment, server)
    assert result.returncode == 0, result.stderr
    assert len(server.requests) == 72
    assert calls_of(series_dir)["status"].to_list() == ["completed"] * 72


@pytest.mark.parametrize("left", ["a reservation", "a file fragbench did not write"])
def test_a_series_with_a_reservation_stays_final(experiment: Path, server: Server,
                                                 left: str) -> None:
    out = experiment.parent.parent / "outputs"
    files = ({"journal.jsonl": RESERVED} if left == "a reservation"
             else {"journal.jsonl": HEADER_ONLY, "notes.txt": "mine"})
    series_dir = seed_series(out, "openai", files)
    result, _ = collect(experiment, server)
    assert result.returncode == 4 and "never appended to or overwritten" in result.stderr
    assert server.requests == []
    assert sorted(p.name for p in series_dir.iterdir()) == sorted(files)


def test_a_series_known_to_the_ledger_stays_final(experiment: Path, server: Server) -> None:
    """Its journal lost, a series whose uid the ledger names still sent something."""
    first, series_dir = collect(experiment, server)
    assert first.returncode == 0
    (series_dir / "journal.jsonl").unlink()
    for extra in series_dir.iterdir():
        if extra.name not in ("plan.json", "series.json", "facts.parquet", "retrieval.parquet"):
            shutil.rmtree(extra) if extra.is_dir() else extra.unlink()
    again, _ = collect(experiment, server)
    assert again.returncode == 4 and len(server.requests) == 72


# -- 9. Balance without unbounded scans ----------------------------------------------------------

def test_foreign_files_under_out_block_nothing(experiment: Path, workspace: Path,
                                               server: Server) -> None:
    out = workspace / "outputs"
    foreign = out / "someone" / "else"
    foreign.mkdir(parents=True)
    (foreign / "journal.jsonl").write_text("not a journal\n{}\n", encoding="utf-8")
    planned = run_cli("plan", str(experiment))
    assert planned.returncode == 0, planned.stderr
    result, series_dir = collect(experiment, server)
    assert result.returncode == 0, result.stderr
    moved = workspace / "moved" / "deeper" / "openai"
    shutil.move(str(series_dir), moved)
    (moved.parent.parent / "journal.jsonl").write_text("garbage\nmore\n", encoding="utf-8")
    before = (moved / "calls.parquet").read_bytes()
    measured = run_cli("measure", str(moved))
    assert measured.returncode == 0, measured.stderr
    assert (moved / "calls.parquet").read_bytes() == before


# -- 10, 11. Secrets, printed or written, in any form ------------------------------------------

def escaped(text: str) -> str:
    return "".join(f"\\u{ord(c):04x}" for c in text)


def body_with(text_parts: list[str], number: int, **kwargs: Any) -> dict[str, Any]:
    body = response_body("", number=number, **kwargs)
    body["output"][0]["content"] = [{"type": "output_text", "text": t, "annotations": []}
                                    for t in text_parts]
    return body


def send_text(handler: Handler, text: str) -> None:
    data = text.encode()
    handler.send_response(200)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def key_escaped(handler: Handler, number: int, body: dict[str, Any]) -> None:
    answer = json.dumps({"answer": f"the key is {CANARY_KEY}", "citations": []})
    text = json.dumps(body_with([answer], number))
    send_text(handler, text.replace(CANARY_KEY, escaped(CANARY_KEY)))


def key_partly_escaped(handler: Handler, number: int, body: dict[str, Any]) -> None:
    answer = json.dumps({"answer": f"the key is {CANARY_KEY}", "citations": []})
    text = json.dumps(body_with([answer], number))
    send_text(handler, text.replace(CANARY_KEY, CANARY_KEY[:6] + escaped(CANARY_KEY[6:12])
                                    + CANARY_KEY[12:]))


def key_split(handler: Handler, number: int, body: dict[str, Any]) -> None:
    answer = json.dumps({"answer": f"the key is {CANARY_KEY}", "citations": []})
    cut = answer.index(CANARY_KEY) + 10
    handler.send_json(200, body_with([answer[:cut], answer[cut:]], number))


def key_in_capitals(handler: Handler, number: int, body: dict[str, Any]) -> None:
    handler.send_json(200, body_with([answer_for(body)], number, status="failed",
                                     error_message=f"bad key {CANARY_KEY.upper()}"))


def key_in_a_repeated_field(handler: Handler, number: int, body: dict[str, Any]) -> None:
    """A JSON parser keeps the last of two equal keys: the first still reaches the disk."""
    text = json.dumps(body_with([answer_for(body)], number))
    send_text(handler, text.replace('"error": null', f'"error": "{CANARY_KEY}", "error": null',
                                    1))


OPAQUE = "opaque-credential-4417-zulu-8831"
"""A secret of no known shape, found only because the environment names it a token."""


def opaque_split(handler: Handler, number: int, body: dict[str, Any]) -> None:
    answer = json.dumps({"answer": f"the token is {OPAQUE}", "citations": []})
    cut = answer.index(OPAQUE) + 12
    handler.send_json(200, body_with([answer[:cut], answer[cut:]], number))


def key_escaped_in_no_json(handler: Handler, number: int, body: dict[str, Any]) -> None:
    send_text(handler, f"<html>upstream says: {escaped(CANARY_KEY)}</html>")


ECHOES = {
    "in the status": (ok(status=CANARY_KEY), 3),
    "as \\u escapes": (key_escaped, 0),
    "partly escaped": (key_partly_escaped, 0),
    "split across two parts": (key_split, 0),
    "in capitals, in an error": (key_in_capitals, 3),
    # A body with a repeated key is no response (issue 14, item 2): the series stops there.
    "in a repeated JSON key": (key_in_a_repeated_field, 3),
    "a secret of no known shape, split in two": (opaque_split, 0),
    "as \\u escapes in a body that is not JSON": (key_escaped_in_no_json, 3),
}


def decoded_texts(value: Any) -> Iterator[str]:
    """Every string of a value, and of any JSON held in a string, decoded."""
    if isinstance(value, str):
        yield value
        try:
            inner = json.loads(value)
        except ValueError:
            return
        if not isinstance(inner, str):
            yield from decoded_texts(inner)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from decoded_texts(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from decoded_texts(v)


def decoded_values(value: Any) -> Iterator[str]:
    """The string values alone (no keys), in order, JSON held in strings decoded."""
    if isinstance(value, str):
        try:
            inner = json.loads(value)
        except ValueError:
            yield value
            return
        yield from decoded_values(inner) if not isinstance(inner, str) else [value]
    elif isinstance(value, dict):
        for v in value.values():
            yield from decoded_values(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from decoded_values(v)


def file_texts(path: Path) -> Iterator[str]:
    data = path.read_bytes()
    yield data.decode("utf-8", "replace")
    if path.suffix == ".parquet":
        frame = pl.read_parquet(path)
        for column in frame.columns:
            yield from decoded_texts(frame[column].cast(pl.String, strict=False).to_list()
                                     if frame[column].dtype == pl.String
                                     else [str(v) for v in frame[column].to_list()])
    elif path.suffix in (".jsonl", ".json"):
        for line in data.decode("utf-8", "replace").splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            texts = list(decoded_texts(doc))
            yield from texts
            yield "".join(texts)
            yield "".join(decoded_values(doc))  # a key split across two fields


def assert_no_key_anywhere(result: Any, roots: list[Path]) -> None:
    """Neither secret nor either end of one (a secret cut in two leaks by halves)."""
    pieces = [piece for secret in (CANARY_KEY.lower(), OPAQUE)
              for piece in (secret, secret[:8], secret[-8:])]
    for printed in (result.stdout.lower(), result.stderr.lower()):
        assert not any(piece in printed for piece in pieces)
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file():
                for text in file_texts(path):
                    assert not any(piece in text.lower() for piece in pieces), path


@pytest.mark.parametrize("name", list(ECHOES))
def test_a_key_echoed_back_is_never_written_or_printed(
        experiment: Path, server: Server, ledger_store: Path, name: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    action, code = ECHOES[name]
    server.script[2] = action
    monkeypatch.setenv("FRAGBENCH_TEST_TOKEN", OPAQUE)
    result, series_dir = collect(experiment, server)
    assert result.returncode == code, result.stderr
    assert len(server.requests) == (3 if code else 72)
    assert "[redacted]" in (series_dir / "journal.jsonl").read_text(encoding="utf-8")
    flags = calls_of(series_dir)["redacted"].to_list()
    assert flags[2] is True and flags[:2] == [False, False]  # said, on that call only
    assert_no_key_anywhere(result, [experiment.parent.parent, ledger_store])


@pytest.mark.parametrize("leak", ["escaped", "split"])
def test_the_secret_checker_finds_the_leaks_it_guards_against(tmp_path: Path,
                                                              leak: str) -> None:
    body = ({"t": CANARY_KEY} if leak == "escaped"
            else {"output": [{"text": CANARY_KEY[:10]}, {"text": CANARY_KEY[10:]}]})
    (tmp_path / "x.jsonl").write_text(json.dumps({"raw": json.dumps(body)}) + "\n")
    with pytest.raises(AssertionError):
        assert_no_key_anywhere(type("R", (), {"stdout": "", "stderr": ""})(), [tmp_path])


# -- 12. One-line errors, nothing lost -------------------------------------------------------

def unwritable(tmp_path: Path) -> Path:
    """A folder nothing can be created in: read-only for a user; /sys for root, whom file
    modes do not stop."""
    if os.geteuid() == 0:
        return Path("/sys/fragbench-test-out")
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    return folder / "out"


def assert_refused(result: Any, code: int, *words: str) -> None:
    assert result.returncode == code, (result.returncode, result.stderr)
    [line] = error_lines(result.stderr)
    for word in words:
        assert word in line, (word, line)


def test_out_that_cannot_be_created(experiment: Path, tmp_path: Path) -> None:
    out = unwritable(tmp_path)
    result = run_cli("run", str(experiment), "--series", "extractive", "--out", str(out))
    assert_refused(result, 4, str(out), "cannot be created", "writable --out")
    assert not out.exists()


def test_out_that_is_a_file(experiment: Path, workspace: Path) -> None:
    out = workspace / "outputs"
    out.write_text("a file", encoding="utf-8")
    result = run_cli("run", str(experiment), "--series", "extractive", "--out", str(out))
    assert_refused(result, 4, str(out), "is a file")
    assert out.read_text(encoding="utf-8") == "a file"


def test_a_dangling_symlink_at_the_series_path(experiment: Path, workspace: Path) -> None:
    series_dir = workspace / "outputs" / "protocol-1.0" / "extractive"
    series_dir.parent.mkdir(parents=True)
    os.symlink(workspace / "gone", series_dir)
    result = run_cli("run", str(experiment), "--series", "extractive", "--out",
                     str(workspace / "outputs"))
    assert_refused(result, 4, str(series_dir), "symbolic link")
    assert series_dir.is_symlink() and not (workspace / "gone").exists()


def test_run_writes_nothing_into_the_experiment_folder(experiment: Path, workspace: Path,
                                                       server: Server) -> None:
    """So a read-only experiment folder (a checkout, a mounted share) runs as any other."""
    def tree() -> dict[str, bytes]:
        return {str(p): p.read_bytes() for p in sorted(experiment.rglob("*")) if p.is_file()}

    before = tree()
    experiment.chmod(0o555)
    try:
        result, _ = collect(experiment, server)
    finally:
        experiment.chmod(0o755)
    assert result.returncode == 0, result.stderr
    assert tree() == before


@pytest.mark.parametrize("option", ["--chunk-size", "--top-k"])
def test_retrieve_numbers_too_large(workspace: Path, option: str) -> None:
    out = workspace / "r.parquet"
    result = run_cli("retrieve", str(workspace / "corpus" / "0.2"), option, str(2**31),
                     "--out", str(out))
    assert_refused(result, 2, option, "2147483647")
    assert not out.exists()


def test_retrieve_out_that_is_a_folder(workspace: Path) -> None:
    out = workspace / "results.parquet"
    out.mkdir()
    result = run_cli("retrieve", str(workspace / "corpus" / "0.2"), "--out", str(out))
    assert_refused(result, 2, str(out), "is a folder")
    assert list(workspace.glob("*.tmp")) == [] and list(out.iterdir()) == []


def test_two_runs_of_one_series_at_once(experiment: Path, workspace: Path, server: Server,
                                        held: threading.Event) -> None:
    """The second run starts while the first's call 1 is held by the server (not after a
    fixed delay a loaded machine could outlast), so the first is surely still collecting."""
    out = workspace / "outputs"
    env = process_env(env_for(server))
    first = subprocess.Popen([sys.executable, "-m", "fragbench", "run", str(experiment),
                              "--series", "openai", "--backend", "openai", "--out", str(out)],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + PATIENCE
        while not server.requests and first.poll() is None:
            assert time.monotonic() < deadline, "gave up waiting for the first run's call 1"
            time.sleep(0.01)
        second = run_cli("run", str(experiment), "--series", "openai", "--backend", "openai",
                         "--out", str(out), env=env_for(server))
    finally:
        held.set()
        first.wait(PATIENCE)
    assert first.returncode == 0
    assert_refused(second, 4, "another run is collecting", "openai")
    assert len(server.requests) == 72
    assert calls_of(out / "protocol-1.0" / "openai")["status"].to_list() == ["completed"] * 72


def test_a_series_folder_locked_by_a_run_is_never_cleared(experiment: Path,
                                                          workspace: Path) -> None:
    """The lock, held as a live run holds it: even a folder that sent nothing stays."""
    series_dir = seed_series(workspace / "outputs", "extractive", {"plan.json": "{}"})
    fd = os.open(series_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        result = run_cli("run", str(experiment), "--series", "extractive", "--out",
                         str(workspace / "outputs"))
    finally:
        os.close(fd)
    assert_refused(result, 4, "another run is collecting")
    assert [p.name for p in series_dir.iterdir()] == ["plan.json"]


def test_a_full_disk_stops_the_series_in_one_line(experiment: Path, workspace: Path,
                                                  server: Server, ledger_store: Path) -> None:
    """A file-size limit makes the journal's writes fail as a full disk would, mid-run."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (60_000, 60_000))

    out = workspace / "outputs"
    env = process_env(env_for(server))
    proc = subprocess.run([sys.executable, "-m", "fragbench", "run", str(experiment),
                           "--series", "openai", "--backend", "openai", "--out", str(out)],
                          env=env, capture_output=True, text=True, preexec_fn=limit,
                          check=False)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    stop = [line for line in error_lines(proc.stderr) if "series stopped" in line]
    assert len(stop) == 1 and "cannot_record" in stop[0] and "journal.jsonl" in stop[0]
    sent = len(server.requests)
    assert 0 < sent < 72
    series_dir = out / "protocol-1.0" / "openai"
    # Every request sent is counted in the ledger, at least at its reservation.
    budget = load_experiment(experiment).budget
    ledger = Ledger(ledger_path(budget.id), budget).load()
    reserves = [json.loads(line) for line in ledger.path.read_text().splitlines()
                if '"reserve"' in line]
    assert len(reserves) == sent
    # With room again, the tables are rebuilt from what was recorded; nothing was lost.
    measured = run_cli("measure", str(series_dir))
    assert measured.returncode == 0, measured.stderr
    status = json.loads((series_dir / "status.json").read_text(encoding="utf-8"))
    assert status["state"] in ("stopped", "interrupted")
    calls = calls_of(series_dir)
    assert calls.filter(pl.col("status") != "not_sent").height >= sent - 1
    # The ledger holds every cost the journal knows, and the reservations of the rest.
    known = sum((Decimal(str(c)) for c in calls["cost_usd"].drop_nulls().to_list()), Decimal(0))
    assert ledger.spent() >= known > 0


@pytest.mark.parametrize("command", ["report", "measure"])
def test_report_or_measure_on_a_folder_that_is_no_series(workspace: Path,
                                                         command: str) -> None:
    result = run_cli(command, str(workspace / "corpus"))
    assert_refused(result, 4, str(workspace / "corpus"), "is not a series folder")
    assert sorted(p.name for p in (workspace / "corpus").iterdir()) == \
        sorted(p.name for p in (ROOT / "corpus").iterdir())


def test_a_chunker_that_breaks_its_contract_is_named(tmp_path: Path) -> None:
    site = tmp_path / "site"
    dist = site / "broken_chunker-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-chunker\n"
                                   "Version: 0.1\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text("[fragbench]\nbroken = broken_chunker\n",
                                           encoding="utf-8")
    (site / "broken_chunker.py").write_text(
        "from fragbench.hookspecs import hookimpl\n"
        "class Broken:\n"
        "    name = 'broken'\n"
        "    api_version = '1.0'\n"
        "    def chunk(self, sentences, size):\n"
        "        return sentences.select('case', 'lang', 'variant', 'text')\n"
        "@hookimpl\n"
        "def register_chunkers(register):\n"
        "    register(Broken())\n", encoding="utf-8")
    env = process_env({"PYTHONPATH": str(site)})
    proc = subprocess.run([sys.executable, "-m", "fragbench", "retrieve",
                           str(ROOT / "corpus" / "0.2"),
                           "--chunker", "broken", "--out", str(tmp_path / "r.parquet")],
                          env=env, capture_output=True, text=True, check=False)
    assert_refused(proc, 4, "chunker 'broken'", "broken-chunker 0.1", "no column chunk, fact_ids")
    assert not (tmp_path / "r.parquet").exists()


# -- 13. A plan people can review -----------------------------------------------------------

def test_plan_for_another_backend(experiment: Path) -> None:
    result = run_cli("plan", str(experiment), "--backend", "extractive")
    assert result.returncode == 0, result.stderr
    assert "reservations for backend extractive" in result.stdout
    assert "backend extractive is not priced" in result.stdout
    rows = [line for line in result.stdout.splitlines() if re.match(r"\s*\d+\s", line)]
    assert len(rows) == 72 and all(row.rstrip().endswith(" 0") for row in rows)
    unknown = run_cli("plan", str(experiment), "--backend", "nope")
    assert_refused(unknown, 2, "--backend nope", "openai, extractive")


def test_plan_as_json(experiment: Path) -> None:
    result = run_cli("plan", str(experiment), "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    frozen = json.loads((experiment / "experiment.json").read_text(encoding="utf-8"))
    frozen.pop("recorded")
    assert doc["plan"] == frozen
    review = doc["review"]
    assert review["backend"] == "openai" and review["frozen_plan"]["current"] is True
    assert review["budget"]["balance_usd"] == "9.58208"
    assert sum(Decimal(r) for r in review["reserved_usd"]) == \
        Decimal(review["total_reservation_usd"])


def test_plan_names_each_changed_file(experiment: Path, workspace: Path) -> None:
    for path in (workspace / "corpus/0.2/price.toml", experiment / "prompts/en.toml"):
        path.write_bytes(path.read_bytes() + b"\n# edited\n")
    result = run_cli("plan", str(experiment))
    assert result.returncode == 0, result.stderr
    # The verdict lines come before the calls (`plan` prints its verdict first).
    verdict = next(line for line in result.stdout.splitlines() if line.startswith("frozen plan"))
    assert "OUT OF DATE" in verdict and "is current" not in result.stdout
    assert "corpus/0.2/price.toml changed" in verdict and "prompts/en.toml changed" in verdict
    review = json.loads(run_cli("plan", str(experiment), "--json").stdout)["review"]
    assert review["frozen_plan"]["current"] is False
    assert len([d for d in review["frozen_plan"]["differences"] if "changed" in d]) == 2


# -- 14. The README's examples work right after `make demo` -------------------------------

def test_readme_examples_work_after_the_demo(workspace: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\ndemo:")[1].split("\n\n")[0]
    commands = [line.strip().removeprefix("$(VENV)/bin/fragbench ").split()
                for line in recipe.splitlines() if "bin/fragbench " in line]
    assert commands, recipe
    # The section moved from the README to docs/results.md with issue 25's first screen.
    page = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    section = page.split("## Comparing series with Polars")[1].split("\n## ")[0]
    code = section.split("```python\n")[1].split("```")[0]
    compare = re.search(r"`fragbench (compare [^`]+)`", section)
    assert compare is not None
    monkeypatch.chdir(workspace)
    for args in commands:
        done = run_cli(*args)
        assert done.returncode == 0, (args, done.stderr)
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/results.md", "exec"), namespace)
    compared = run_cli(*compare.group(1).split())
    assert compared.returncode == 0, compared.stderr
