"""Issue 14, the run's side of items 3, 4, 5, 6 and 8, and the small things a new user met.

The real CLI in process (Typer's runner) or the library's `run`, the real openai SDK against
the loopback server, real files; a subprocess only where the process is what is tested (a file
size limit standing in for a full disk).
"""

from __future__ import annotations

import importlib.metadata
import json
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from support.cli import error_lines, process_env, refreeze, run_cli
from support.series import calls_of, collect, free_port
from support.suite import CANARY_KEY, ROOT

import fragbench
from fragbench.calls.interruption import SIGNALS, Interruption, on_signals
from fragbench.errors import Interrupted
from fragbench.run import run
from fragbench.testing.loopback import Handler, Server, answer_for, ok

pytestmark = pytest.mark.slow

OPENAI = ("--series", "openai", "--backend", "openai")


def env_for(server: Server) -> dict[str, str]:
    return {"OPENAI_API_KEY": CANARY_KEY, "OPENAI_BASE_URL": server.base_url}


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# -- Item 4: the library takes the interruption as a parameter -----------------------------------

@pytest.fixture
def openai_env(server: Server, monkeypatch: pytest.MonkeyPatch) -> Server:
    for name, value in env_for(server).items():
        monkeypatch.setenv(name, value)
    return server


def test_a_notebook_interrupts_a_run_through_its_interruption(experiment: Path,
                                                              openai_env: Server) -> None:
    """Requested from another thread (here the server's, as call 2 arrives): call 2 is still
    recorded, and no call 3 is sent."""
    stop = Interruption()

    def answer_then_stop(handler: Handler, number: int, body: dict[str, Any]) -> None:
        stop.request()
        ok()(handler, number, body)

    openai_env.script[1] = answer_then_stop
    out = experiment.parent.parent / "outputs"
    result = run(experiment, "openai", "openai", out, interruption=stop)
    assert result.stop is not None and (result.stop.reason, result.stop.seq) == ("interrupted", 3)
    assert len(openai_env.requests) == 2 and result.sent == 2 and not result.sent_nothing
    assert calls_of(result.series_dir)["status"][:3].to_list() == ["completed", "completed",
                                                                   "not_sent"]


def _caller_handler(signum: int, frame: object) -> None:
    """The caller's own handler (a signal the run must take over, then give back)."""


def test_signal_handlers_are_the_run_s_only_while_it_runs() -> None:
    """Each signal starts caught by the caller's handler, not ignored: pytest under `nohup`
    (or in a shell's background job) inherits an ignored SIGHUP (or SIGINT), which the run
    rightly leaves ignored (tests/test_signals.py)."""
    outer = {sig: signal.signal(sig, _caller_handler) for sig in SIGNALS}
    try:
        asked = Interruption()
        with on_signals(asked):
            assert all(signal.getsignal(sig) not in (_caller_handler, None) for sig in SIGNALS)
            signal.raise_signal(signal.SIGTERM)  # handled: this process goes on
        assert asked.requested and asked.exit_code == 143
        assert all(signal.getsignal(sig) is _caller_handler for sig in SIGNALS)
    finally:
        for sig, handler in outer.items():  # None: set outside Python, the default then
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def test_a_signal_ignored_when_the_run_begins_stays_ignored() -> None:
    """`nohup` (SIGHUP) or a background job (SIGINT): the run leaves an inherited ignore as
    it is, and takes the others."""
    outer = {sig: signal.signal(sig, _caller_handler) for sig in SIGNALS}
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with on_signals(Interruption()):
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is not _caller_handler
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is _caller_handler
    finally:
        for sig, handler in outer.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def test_an_interruption_before_the_series_began_writes_nothing(experiment: Path,
                                                                openai_env: Server) -> None:
    stop = Interruption()
    stop.request()
    out = experiment.parent.parent / "outputs"
    with pytest.raises(Interrupted) as raised:
        run(experiment, "openai", "openai", out, interruption=stop)
    assert raised.value.exit_code == 130 and "nothing was written or sent" in str(raised.value)
    assert not out.exists() and openai_env.requests == []


def test_an_interruption_before_the_first_call_leaves_the_name_free(experiment: Path,
                                                                    openai_env: Server) -> None:
    stop = Interruption()

    def say(line: str) -> None:
        if line.startswith("billed run:"):  # the series folder is claimed: the next is call 1
            stop.request()

    out = experiment.parent.parent / "outputs"
    result = run(experiment, "openai", "openai", out, say=say, interruption=stop)
    assert result.stop is not None and (result.stop.reason, result.stop.seq) == ("interrupted", 1)
    assert result.sent == 0 and result.sent_nothing and openai_env.requests == []
    again = run_cli("run", str(experiment), *OPENAI, "--out", str(out), env=env_for(openai_env))
    assert again.returncode == 0, again.stderr
    assert len(openai_env.requests) == 72


# -- Item 5: nothing that left no trace on the wire uses a series up ------------------------------

@pytest.mark.parametrize("key", ["sk-1234", "sk-proj-with\nan-inner-newline-0123456789abcdef"],
                         ids=["too short", "an inner newline"])
def test_a_refused_key_writes_nothing_and_the_name_stays_free(experiment: Path, server: Server,
                                                              ledger_store: Path,
                                                              key: str) -> None:
    out = experiment.parent.parent / "outputs"
    refused = run_cli("run", str(experiment), *OPENAI, "--out", str(out),
                      env={**env_for(server), "OPENAI_API_KEY": key})
    assert refused.returncode == 4, refused.stderr
    [line] = error_lines(refused.stderr)
    assert "OPENAI_API_KEY" in line and "nothing was sent" in line
    # Refused before anything was written: no series folder, no ledger record.
    assert not out.exists() and list(ledger_store.iterdir()) == [] and server.requests == []
    good = run_cli("run", str(experiment), *OPENAI, "--out", str(out), env=env_for(server))
    assert good.returncode == 0, good.stderr
    assert len(server.requests) == 72


def test_a_series_whose_first_call_never_left_runs_again_under_its_name(
        experiment: Path, server: Server) -> None:
    out = experiment.parent.parent / "outputs"
    nowhere = f"http://127.0.0.1:{free_port()}/v1"
    first = run_cli("run", str(experiment), *OPENAI, "--out", str(out),
                    env={**env_for(server), "OPENAI_BASE_URL": nowhere})
    assert first.returncode == 3, first.stderr
    [line] = error_lines(first.stderr)
    assert "Nothing left this machine" in line and "same --series openai" in line
    assert (out / "protocol-1.0" / "openai" / "report.html").is_file()  # as for any stop
    again, series_dir = collect(experiment, server)
    assert again.returncode == 0, again.stderr
    assert calls_of(series_dir)["status"].to_list() == ["completed"] * 72


def test_a_series_with_a_call_sent_says_how_to_rebuild_it(experiment: Path,
                                                          server: Server) -> None:
    first, series_dir = collect(experiment, server)
    assert first.returncode == 0
    again, _ = collect(experiment, server)
    assert again.returncode == 4
    [line] = error_lines(again.stderr)
    assert f"`fragbench measure {series_dir}` rebuilds its tables" in line
    assert len(server.requests) == 72


# -- Item 6: the ledger store is named ------------------------------------------------------------

def test_the_ledger_store_is_named_and_a_new_ledger_said_once(experiment: Path, server: Server,
                                                              ledger_store: Path) -> None:
    first, _ = collect(experiment, server)
    assert first.returncode == 0, first.stderr
    [started] = [line for line in first.stderr.splitlines() if "has no ledger" in line]
    assert f"no ledger in the store {ledger_store} yet" in started
    assert "FRAGBENCH_LEDGER_DIR" in started and "XDG_DATA_HOME" in started
    ledger = ledger_store / "protocol-1.0-openai.jsonl"
    held = len(ledger.read_bytes().splitlines())
    second, _ = collect(experiment, server, series="openai-2")
    assert second.returncode == 0, second.stderr
    assert "has no ledger" not in second.stderr
    [billed] = [line for line in second.stderr.splitlines() if "billed run:" in line]
    # What it held, and the record that names the new series.
    assert f"{held + 1} records, in the store {ledger_store})" in billed


def test_a_ledger_that_cannot_be_written_is_named(experiment: Path, server: Server,
                                                  ledger_store: Path) -> None:
    """A file-size limit cuts the ledger's first write short, as a full disk would."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (40, 40))

    out = experiment.parent.parent / "outputs"
    proc = subprocess.run([sys.executable, "-m", "fragbench", "run", str(experiment), *OPENAI,
                           "--out", str(out)], cwd=ROOT, env=process_env(env_for(server)),
                          capture_output=True, text=True, preexec_fn=limit, check=False)
    assert proc.returncode == 4, proc.stderr
    [line] = error_lines(proc.stderr)
    ledger = ledger_store / "protocol-1.0-openai.jsonl"
    assert f"ledger {ledger}: cannot be written" in line and "FRAGBENCH_LEDGER_DIR" in line
    assert line.count(str(ledger)) == 1 and "bytes written" in line  # said once, and why
    assert "free space" in line and "nothing was sent" in line
    assert not ledger.exists() and not out.exists() and server.requests == []


# -- Item 8: proxies ------------------------------------------------------------------------------

def test_proxy_variables_of_the_environment_are_said_to_be_ignored(experiment: Path,
                                                                   server: Server) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    out = experiment.parent.parent / "outputs"
    result = run_cli("run", str(experiment), *OPENAI, "--out", str(out),
                     env={**env_for(server), "HTTPS_PROXY": dead, "http_proxy": dead,
                          "ALL_PROXY": "socks5://127.0.0.1:1"})
    assert result.returncode == 0, result.stderr
    assert len(server.requests) == 72
    [billed] = [line for line in result.stderr.splitlines() if "billed run:" in line]
    assert "the environment sets ALL_PROXY, HTTPS_PROXY, http_proxy: ignored" in billed
    info = json.loads((out / "protocol-1.0" / "openai" / "series.json").read_text())
    assert info["proxy"] is None


def test_a_proxy_the_config_names_is_said_and_recorded(experiment: Path,
                                                       server: Server) -> None:
    """The loopback server serves as the proxy (it reads the absolute-form target's path)."""
    refreeze(experiment, "timeout_seconds = 600",
             f'timeout_seconds = 600\nproxy = "{server.origin}"')
    out = experiment.parent.parent / "outputs"
    nowhere = f"http://127.0.0.1:{free_port()}/v1"  # reached only through the proxy
    result = run_cli("run", str(experiment), *OPENAI, "--out", str(out),
                     env={**env_for(server), "OPENAI_BASE_URL": nowhere})
    assert result.returncode == 0, result.stderr
    assert len(server.requests) == 72
    [billed] = [line for line in result.stderr.splitlines() if "billed run:" in line]
    assert f"at {nowhere}/ through the proxy {server.origin}" in billed
    info = json.loads((out / "protocol-1.0" / "openai" / "series.json").read_text())
    assert info["proxy"] == server.origin


# -- Items 2 and 3: record first, then look --------------------------------------------------------

def test_every_body_is_journaled_before_its_outcome(experiment: Path, server: Server) -> None:
    result, series_dir = collect(experiment, server)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in
               (series_dir / "journal.jsonl").read_text(encoding="utf-8").splitlines()]
    kinds = [(r["type"], r.get("seq")) for r in records if r["type"] in ("received", "outcome")]
    assert kinds == [(kind, seq) for seq in range(1, 73) for kind in ("received", "outcome")]
    received = {r["seq"]: r for r in records if r["type"] == "received"}
    assert all(received[s]["http_status"] == 200 for s in received)
    outcomes = {r["seq"]: r for r in records if r["type"] == "outcome"}
    # Written once: the outcome does not repeat the body its `received` record holds.
    assert all("raw" not in outcomes[s] and received[s]["raw"] for s in outcomes)


def test_the_frozen_body_bound_reaches_the_session(experiment: Path, server: Server) -> None:
    refreeze(experiment, 'default_backend = "openai"',
             'default_backend = "openai"\nmax_response_bytes = 65536')
    server.script[1] = ok(text=answer_for({}) + " " * 70_000)  # a body past 64 KiB
    result, series_dir = collect(experiment, server)
    assert result.returncode == 3, result.stderr
    calls = calls_of(series_dir)
    assert calls["status"][:2].to_list() == ["completed", "failed"]
    assert calls["stop_reason"][1] == "technical_failure"


# -- Small things ---------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["experiments", "the experiment itself",
                                   "another experiment", "a config.toml below the cwd"])
def test_out_inside_an_experiment_folder_is_refused(experiment: Path, workspace: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    where: str) -> None:
    monkeypatch.chdir(workspace)
    if where == "a config.toml below the cwd":
        (workspace / "mine").mkdir()
        (workspace / "mine" / "config.toml").write_text("# a study of my own\n")
    out = {"experiments": Path("experiments"),
           "the experiment itself": experiment / "outputs",
           "another experiment": workspace / "experiments" / "protocol-1.0-anthropic" / "o",
           "a config.toml below the cwd": Path("mine") / "results"}[where]
    before = tree(workspace)
    result = run_cli("run", str(experiment), "--series", "extractive", "--out", str(out))
    assert result.returncode == 4, result.stderr
    [line] = error_lines(result.stderr)
    assert f"--out {out}:" in line and "an experiment folder" in line
    assert "nothing was written" in line
    assert tree(workspace) == before


def test_version() -> None:
    installed = importlib.metadata.version("fragbench")
    result = run_cli("--version")
    assert (result.returncode, result.stdout) == (0, f"fragbench {installed}\n")
    assert fragbench.__version__ == installed


def test_shell_completion_is_offered() -> None:
    """The options are listed, and the bash script they print comes out. The script is asked
    for through click's variable, as the printed script itself does: `--show-completion`
    detects the shell from the process tree, which a test started outside a shell (`nohup`,
    a CI runner) does not have."""
    helped = run_cli("--help")
    assert "--show-completion" in helped.stdout and "--install-completion" in helped.stdout
    result = run_cli(env={"_FRAGBENCH_COMPLETE": "source_bash"})
    assert result.returncode == 0 and "_FRAGBENCH_COMPLETE=complete_bash" in result.stdout
    assert "complete -o default -F _fragbench_completion fragbench" in result.stdout


def test_an_offline_run_prints_a_tenth_of_its_calls_and_no_money(experiment: Path) -> None:
    out = experiment.parent.parent / "outputs"
    result = run_cli("run", str(experiment), "--series", "extractive", "--out", str(out))
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("call ")]
    assert [line.split()[1] for line in lines] == [f"{n}/72" for n in range(8, 73, 8)]
    assert all("USD" not in line and "elapsed, about" in line and "left" in line
               for line in lines)
    series_dir = out / "protocol-1.0" / "extractive"
    citations = pl.read_parquet(series_dir / "citations.parquet")
    valid = citations.filter(pl.col("valid")).height
    last = result.stdout.splitlines()[-1]
    assert last.startswith(f"citations: {valid} valid, {citations.height - valid} invalid")
    assert last.endswith(f"evidence, call by call: {series_dir / 'report.html'}")
    measured = run_cli("measure", str(series_dir))
    assert measured.stdout.endswith(
        f"tables, report.md, report.html and the figures rebuilt in {series_dir}\n")


def test_a_billed_run_prints_every_call_with_its_money(experiment: Path,
                                                       server: Server) -> None:
    result, _ = collect(experiment, server)
    lines = [line for line in result.stderr.splitlines() if line.startswith("call ")]
    assert len(lines) == 72
    assert all("series spent" in line and "budget used" in line and "left" in line
               for line in lines)


def test_a_body_that_cannot_be_journaled_stops_the_series_and_is_printed(
        experiment: Path, server: Server) -> None:
    """A file-size limit makes the journal refuse call 2's body, as a full disk would: the
    series stops there (cannot_record), and the body, paid for, is printed instead."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    marker = "PAID-FOR-AND-KEPT"
    server.script[1] = ok(text=marker + " " * 150_000)  # its record crosses the limit
    out = experiment.parent.parent / "outputs"
    proc = subprocess.run([sys.executable, "-m", "fragbench", "run", str(experiment), *OPENAI,
                           "--out", str(out)], cwd=ROOT, env=process_env(env_for(server)),
                          capture_output=True, text=True, preexec_fn=limit, check=False)
    assert proc.returncode == 3, proc.stderr
    assert len(server.requests) == 2
    [kept] = [line for line in error_lines(proc.stderr) if "unrecorded outcome of call 2" in line]
    assert marker in kept and '"type": "received"' in kept
    [stop] = [line for line in error_lines(proc.stderr) if "series stopped" in line]
    assert "cannot_record" in stop and "journal.jsonl" in stop
    journal = (out / "protocol-1.0" / "openai" / "journal.jsonl").read_bytes()
    assert b'"type": "outcome", "call_id": "price-en-B-full-r1"' not in journal
