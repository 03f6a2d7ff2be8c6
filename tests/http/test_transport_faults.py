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

import pytest
from support.cli import error_lines, refreeze
from support.series import (
    assert_no_secret,
    assert_stopped_at,
    collect,
    collect_at,
    free_port,
    outcome_of,
)

from fragbench.budget.ledger import ledger_path
from fragbench.testing.loopback import Server, redirect, trickle

# Over 5 s of tests in all (`make check` leaves it to `make test`: pyproject.toml's markers).
pytestmark = pytest.mark.slow

NEVER_SENT = "the request never left this machine and nothing was billed"
MAY_BE_BILLED = "the server may have received and billed it"


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
