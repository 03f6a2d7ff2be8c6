"""Transport faults of the OpenAI backend: redirects, a body that never ends, a request that never
left the machine. The real openai SDK, in the real command, against the real loopback server.

Each test counts what the server received (a redirect followed by the client would show as a
second request, a GET included), checks where the series stopped and what calls.parquet and the
journal say, and that no secret was written or printed.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from conftest import CANARY_KEY, error_lines, refreeze, run_cli
from loopback import Server, redirect, trickle
from test_collect_openai import assert_no_secret, calls_of, collect

from fragbench.ledger import ledger_path

NEVER_SENT = "the request never left this machine and nothing was billed"
MAY_BE_BILLED = "the server may have received and billed it"


def collect_at(experiment: Path, base_url: str) -> tuple[Any, Path]:
    """`collect` with OPENAI_BASE_URL pointing wherever the test needs, no server implied."""
    out = experiment.parent.parent / "outputs"
    result = run_cli("run", str(experiment), "--series", "openai", "--backend", "openai",
                     "--out", str(out),
                     env={"OPENAI_API_KEY": CANARY_KEY, "OPENAI_BASE_URL": base_url})
    assert "Traceback" not in result.stderr, result.stderr
    assert_no_secret(result, experiment.parent.parent)
    return result, out / "protocol-1.0" / "openai"


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def outcome_of(path: Path, seq: int) -> dict[str, Any]:
    return next(r for r in records(path) if r["type"] == "outcome" and r["seq"] == seq)


def assert_stopped_at(result: Any, series_dir: Path, seq: int, failure: str) -> dict[str, Any]:
    """Stopped as a technical failure at call `seq`: every call before it answered, none after
    it sent. Returns that call's row."""
    assert result.returncode == 3, result.stderr
    assert f"stopped at call {seq}" in result.stderr and "technical_failure" in result.stderr
    calls = calls_of(series_dir)
    assert calls["status"][:seq - 1].to_list() == ["completed"] * (seq - 1)
    assert calls["status"][seq:].to_list() == ["not_sent"] * (calls.height - seq)
    row = calls.row(seq - 1, named=True)
    assert row["stop_reason"] == "technical_failure" and row["failure"] == failure
    assert calls["stop_reason"].null_count() == calls.height - 1
    status = json.loads((series_dir / "status.json").read_text(encoding="utf-8"))
    assert status["state"] == "stopped" and status["stop"]["seq"] == seq
    return row


@pytest.mark.parametrize("code", [307, 302])
def test_a_redirect_is_not_followed(experiment: Path, server: Server, ledger_store: Path,
                                    code: int) -> None:
    # Pointing back at the same server, a followed redirect would arrive here: a second POST
    # after a 307, a GET after a 302.
    server.script[5] = redirect(code, server.base_url + "/responses")
    result, series_dir = collect(experiment, server)
    assert_no_secret(result, ledger_store)
    assert len(server.requests) == 6
    assert [r["method"] for r in server.requests] == ["POST"] * 6
    assert f"HTTP {code}" in result.stderr and "not followed" in result.stderr
    row = assert_stopped_at(result, series_dir, 6, "http_error")
    assert row["http_status"] == code and "not followed" in row["error"]
    assert row["cost_usd"] is None and row["counted_usd"] == row["reserved_usd"]
    outcome = outcome_of(series_dir / "journal.jsonl", 6)
    assert outcome["status"] == "failed" and outcome["http_status"] == code


def test_the_timeout_bounds_the_whole_request(experiment: Path, server: Server,
                                              ledger_store: Path) -> None:
    refreeze(experiment, "timeout_seconds = 600", "timeout_seconds = 1")
    # Each piece comes long before a 1 s read timeout would fire, so only a deadline on the
    # whole request stops this call; without one it completes after 20 s and the test fails.
    server.script[2] = trickle(20, 100)
    result, series_dir = collect(experiment, server)
    assert_no_secret(result, ledger_store)
    assert len(server.requests) == 3
    assert "timed out" in result.stderr and MAY_BE_BILLED in result.stderr
    row = assert_stopped_at(result, series_dir, 3, "timeout")
    assert row["cost_usd"] is None and row["counted_usd"] == row["reserved_usd"]


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on: bound to learn it, then released."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_a_request_that_never_left_is_said_so(experiment: Path, server: Server,
                                              ledger_store: Path) -> None:
    result, series_dir = collect_at(experiment, f"http://127.0.0.1:{free_port()}/v1")
    assert_no_secret(result, ledger_store)
    assert len(server.requests) == 0
    lines = [line for line in result.stderr.splitlines() if NEVER_SENT in line]
    assert len(lines) == 1, result.stderr
    assert "connection refused" in lines[0]
    row = assert_stopped_at(result, series_dir, 1, "connection")
    assert NEVER_SENT in row["error"]
    # Nothing was sent, so nothing is counted: the collector releases the reservation.
    for path in (series_dir / "journal.jsonl", ledger_path("protocol-1.0-openai")):
        assert outcome_of(path, 1)["counted_usd"] == "0", path
    assert row["counted_usd"] == 0 and row["reserved_usd"] > 0
    status = json.loads((series_dir / "status.json").read_text(encoding="utf-8"))
    assert status["spent_usd"] == "0"


@pytest.mark.parametrize(("url", "said"), [
    ("ftp://127.0.0.1:{port}/v1", "is not an http:// or https:// URL"),
    ("127.0.0.1:{port}/v1", "is not an http:// or https:// URL"),
    ("http://127.0.0.1:{port}/v1?api-version=1", "no user name, password, query or fragment"),
    ("http://user:hunter2pass@127.0.0.1:{port}/v1", "no user name, password, query"),
    ("http://127.0.0.1:99999/v1", "invalid port"),
    ("http://127.0.0.1:/v1", "invalid port"),
], ids=["ftp", "no-scheme", "query", "user-info", "port-out-of-range", "empty-port"])
def test_an_unusable_endpoint_in_the_environment_is_refused_before_anything(
        experiment: Path, server: Server, ledger_store: Path, url: str, said: str) -> None:
    """OPENAI_BASE_URL goes through the checks a config's base_url does (item 5): refused in
    one line naming the variable, never quoting it (it may hold a password), before the series
    folder or the ledger exist; the server (whose port the URL names) receives nothing."""
    result, series_dir = collect_at(experiment, url.format(port=server.port))
    assert result.returncode == 4, result.stderr
    (line,) = error_lines(result.stderr)
    assert line.startswith("fragbench: OPENAI_BASE_URL ") and said in line, line
    assert "nothing was sent" in line and "hunter2pass" not in result.stderr
    assert len(server.requests) == 0
    assert not series_dir.exists() and not any(ledger_store.iterdir())


def test_a_refused_connect_on_a_client_of_its_own_is_never_sent() -> None:
    """A backend on an HTTP client of its own hands `connection_failure` whatever its client
    raised: a plain ConnectionRefusedError (a socket's), or one wrapped the way urllib wraps
    it, proves nothing was written (only a TCP connect raises it). A reset after connecting
    proves nothing: the request may have gone."""
    import urllib.error
    import urllib.request

    from fragbench.transport import connection_failure

    port = free_port()
    with pytest.raises(ConnectionRefusedError) as plain:
        socket.create_connection(("127.0.0.1", port), timeout=10).close()
    with pytest.raises(urllib.error.URLError) as wrapped:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/v1", data=b"{}", timeout=10)
    for error in (plain.value, wrapped.value):
        failure = connection_failure(error, "MINE_BASE_URL")
        assert failure.never_sent, error
        assert failure.kind == "connection" and NEVER_SENT in failure.message
        assert "connection refused (ConnectionRefusedError)" in failure.message
    reset = connection_failure(ConnectionResetError(104, "reset"), "MINE_BASE_URL")
    assert not reset.never_sent and MAY_BE_BILLED in reset.message
