"""Issue 16, two lines the CLI prints: after a second Ctrl-C with several calls in flight, the
interrupted line names every call abandoned (not only the first); `fragbench plan` under a
PostgreSQL ledger store says what that store needs (never "set FRAGBENCH_LEDGER_DIR…").

The interruption: `fragbench run` in a subprocess (the process and its signals are under test),
the real openai SDK against the loopback server holding every request. The plan: the real CLI
in process against a throwaway PostgreSQL server (skipped, in one line, where none can start).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from decimal import Decimal
from pathlib import Path

import pytest
from support.cli import error_lines, process_env, refreeze, run_cli
from support.processes import Lines, wait_for
from support.suite import CANARY_KEY, PATIENCE, ROOT

from fragbench.budget.ledger_pg import shown_url
from fragbench.budget.money import usd
from fragbench.testing.loopback import Server

pytestmark = pytest.mark.slow

IN_FLIGHT = 4


def test_a_second_ctrl_c_names_every_call_abandoned_in_flight(
        experiment: Path, server: Server, held: threading.Event) -> None:
    refreeze(experiment, 'plugin = "openai"\n',
             f'plugin = "openai"\nmax_in_flight = {IN_FLIGHT}\n')
    out = experiment.parent.parent / "outputs"
    env = process_env({"OPENAI_API_KEY": CANARY_KEY, "OPENAI_BASE_URL": server.base_url})
    from support.processes import signals_at_default

    with signals_at_default():  # the SIGINTs below must reach the run
        proc = subprocess.Popen([sys.executable, "-m", "fragbench", "run", str(experiment),
                                 "--series", "openai", "--out", str(out)],
                                cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    assert proc.stderr is not None
    lines = Lines(proc.stderr)
    try:
        wait_for("the calls in flight at the server",
                 lambda: len(server.requests) >= IN_FLIGHT or proc.poll() is not None)
        proc.send_signal(signal.SIGINT)
        lines.wait_for("no new call will start")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(PATIENCE) == 130
    finally:
        held.set()
        if proc.poll() is None:
            proc.kill()
    stderr = "\n".join(lines.rest())
    assert len(server.requests) == IN_FLIGHT
    [line] = error_lines(stderr)
    assert line.startswith("fragbench: interrupted (SIGINT) at call 1 of 72: no call recorded; "
                           "SIGINT received twice: the wait for the answers to calls 1, 2, 3, 4 "
                           "was abandoned; they stay counted at their reservations. Series "
                           "openai is final, as interrupted"), line


def test_plan_under_a_postgresql_store_says_what_that_store_needs(
        experiment: Path, workspace: Path, ledger_url: str, server: Server) -> None:
    shown = shown_url(ledger_url)
    # Frozen again in this copy: the line, not the committed plan's currency, is under test.
    assert run_cli("freeze", str(experiment)).returncode == 0
    first = run_cli("plan", str(experiment))
    assert first.returncode == 0, first.stderr
    [line] = [x for x in first.stdout.splitlines() if x.startswith("ledger store")]
    assert line == (f"ledger store {shown}: no ledger for budget protocol-1.0-openai there yet "
                    "(the first run creates it); if this budget was spent from a file ledger, "
                    "move it here first (`fragbench ledger move protocol-1.0-openai --to "
                    "\"$FRAGBENCH_LEDGER_URL\"`, with FRAGBENCH_LEDGER_DIR naming its folder if "
                    "it is not the default); the store is the server FRAGBENCH_LEDGER_URL "
                    "names; unset it to use the file store.")
    ran = run_cli("run", str(experiment), "--out", str(workspace / "outputs"),
                  env={"OPENAI_API_KEY": CANARY_KEY, "OPENAI_BASE_URL": server.base_url})
    assert ran.returncode == 0, ran.stderr
    again = run_cli("plan", str(experiment))
    [line] = [x for x in again.stdout.splitlines() if x.startswith("ledger store")]
    assert line == (f"ledger store {shown}: budget protocol-1.0-openai has 146 records there "
                    "(1 series); records kept in any other store are not counted (the store is "
                    "the server FRAGBENCH_LEDGER_URL names; unset it to use the file store).")
    assert "FRAGBENCH_LEDGER_DIR" not in line


def plan_lines(*args: str) -> list[str]:
    result = run_cli("plan", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_plan_of_1200_calls_is_a_bounded_summary_with_its_verdict_first(
        experiment: Path) -> None:
    """Issue 24: `plan` at 1,200 calls printed 1,206 lines, its verdict last. The verdict
    (endpoint, balance and whether a series fits, ledger store, frozen plan) now comes right
    after the first line, and the schedule lists its first 20 calls, then one line saying how
    many are left, what they reserve (the --json plan's own amounts, summed) and how to list
    them; `--calls` lists all 1,200, still after the verdict."""
    config = experiment / "config.toml"
    config.write_text(config.read_text(encoding="utf-8").replace(
        "repetitions = 3", "repetitions = 50"), encoding="utf-8")  # 24 calls a repetition
    lines = plan_lines(str(experiment))
    assert lines[0].endswith(": 1200 calls, reservations for backend openai")
    assert len(lines) <= 30
    head = next(i for i, ln in enumerate(lines) if ln.startswith("seq  call"))
    verdict = lines[1:head]
    assert verdict[0].startswith("endpoint: ")
    assert "a new series DOES NOT FIT" in verdict[1]  # about 110 USD against 9.58
    assert verdict[-1].startswith("frozen plan ") and "OUT OF DATE" in verdict[-1]
    listed = lines[head + 1:-1]
    assert [int(ln.split()[0]) for ln in listed] == list(range(1, 21))
    review = json.loads(run_cli("plan", str(experiment), "--json").stdout)["review"]
    rest = [Decimal(r) for r in review["reserved_usd"][20:]]
    assert lines[-1] == (
        f"... 1180 more calls (seq 21 to 1200) not listed, reserving {usd(sum(rest))} USD, "
        f"{usd(min(rest))} to {usd(max(rest))} each; `fragbench plan {experiment} --calls` "
        "lists every call, `--json` prints the whole plan.")
    every = plan_lines(str(experiment), "--calls")
    assert every[1:head + 1] == lines[1:head + 1]  # the same verdict, first
    assert [int(ln.split()[0]) for ln in every[head + 1:]] == list(range(1, 1201))


def test_protocol_plan_lists_its_72_calls_after_the_verdict() -> None:
    lines = plan_lines(str(ROOT / "experiments" / "protocol-1.0"), "--backend", "extractive")
    head = next(i for i, ln in enumerate(lines) if ln.startswith("seq  call"))
    assert lines[1:head] == [  # the verdict: the baseline is not priced
        "endpoint: backend extractive states none (its plugin has no check_environment).",
        "backend extractive is not priced: it draws on no budget.",
        f"frozen plan {ROOT / 'experiments' / 'protocol-1.0' / 'experiment.json'} is current."]
    assert [int(ln.split()[0]) for ln in lines[head + 1:]] == list(range(1, 73))
