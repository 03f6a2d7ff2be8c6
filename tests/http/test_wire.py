"""Hostile bytes at the HTTP edge (issue 14, items 1-3), at the level where they happen: servers
written on raw sockets (`wire_servers.RawServer`) send exactly the bytes of the fault, the real
openai SDK sends through fragbench's transport (`fragbench.http.wire`), and the real backend session
(`OpenAIBackend().open(params)`, `session.send(request)`) or the real command reads them.

- Item 1: every call opens a connection of its own; a second response written after an answer,
  a length that lies either way, two Content-Length headers, Content-Length with
  Transfer-Encoding: a technical failure counted at the reservation, never the next call's
  answer.
- Item 2: a body with a repeated key is no response, whichever copy would be priced.
- Item 3: the body is handed over (`on_body`) before anything parses it; nesting 500 deep is
  recorded, not parsed; a gzip bomb is bounded after decompression, its first bytes kept; a
  lone surrogate or an invalid byte is kept writable; gzip and deflate are decoded, a body that
  lies about its encoding says so.
- The deadline: an answer that arrived before a late read is still read.
"""

from __future__ import annotations

import json
import socket
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from support.cli import refreeze, run_cli
from support.series import assert_stopped_at, body_of, collect_at, records
from support.wire_servers import RawServer, http_response, responses_answer, responses_body

from fragbench.builtin.openai_backend import OpenAIBackend
from fragbench.interfaces import BackendFailure, Reply, Request
from fragbench.testing import samples
from fragbench.transport import SDKSession

pytestmark = pytest.mark.slow

KEY = "sk-proj-WIREwire0123456789abcdefXYZ"
PARAMS: dict[str, Any] = {"model": "gpt-6-astra", "reasoning_effort": "medium",
                          "max_output_tokens": 1200, "service_tier": "default", "store": False,
                          "timeout_seconds": 30}
CALLS = samples.calls()


@pytest.fixture
def current(experiment: Path) -> Path:
    """The experiment's copy with its plan frozen as the code stands now: these tests are about
    the transport, not about a plan that other work in progress has made stale."""
    frozen = run_cli("freeze", str(experiment))
    assert frozen.returncode == 0, frozen.stderr
    return experiment


@pytest.fixture
def session_at(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """`session_at(server)`: the real OpenAI backend's session, pointed at `server`."""
    opened: list[SDKSession] = []

    def open_at(server: RawServer, **params: Any) -> SDKSession:
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        session = OpenAIBackend().open({**PARAMS, **params})
        opened.append(session)
        return session
    yield open_at
    for session in opened:
        session.close()


def request(n: int = 0) -> Request:
    return CALLS[n].request


def failure_of(session: SDKSession, n: int = 0) -> BackendFailure:
    with pytest.raises(BackendFailure) as failed:
        session.send(request(n))
    return failed.value


# -- Item 1: a response that is not this call's ---------------------------------------------------

def keep_alive_then_a_second_response(number: int, req: dict[str, Any]) -> bytes:
    """A keep-alive server (it closes only when asked) behind a middlebox that writes a second
    whole response after the answer to request 1."""
    answer = responses_answer(number, req)
    if number == 1:
        return answer + responses_answer(99, req, usage={"input_tokens": 1, "output_tokens": 1})
    return answer


def test_a_second_response_is_never_read_as_the_next_calls_answer(session_at: Any) -> None:
    with RawServer(keep_alive_then_a_second_response) as server:
        session = session_at(server)
        first = session.send(request(0))
        second = failure_of(session, 1)
        third = session.send(request(2))
    assert first.status == "completed" and first.usage and first.usage.input_tokens == 400
    assert second.kind == "doubtful_response" and not second.never_sent
    assert "followed the response body" in second.message
    assert second.raw is not None and '"resp_0001"' in second.raw  # the body as it came
    # Call 3 reads its own answer (request 2's usage), never the 2 tokens written after call 2.
    assert third.status == "completed" and third.usage and third.usage.input_tokens == 402
    assert [r["connection"] for r in server.requests] == [0, 1, 2]
    assert all(r["headers"]["connection"] == "close" for r in server.requests)


def test_a_second_response_stops_the_series_at_its_call_counted_at_its_reservation(
        current: Path) -> None:
    with RawServer(keep_alive_then_a_second_response) as server:
        result, series_dir = collect_at(current, server.base_url)
    assert len(server.requests) == 2  # call 3 never went out
    assert "more byte(s) followed the response body" in result.stderr
    row = assert_stopped_at(result, series_dir, 2, "doubtful_response")
    assert row["cost_usd"] is None and row["counted_usd"] == row["reserved_usd"]
    assert '"resp_0001"' in body_of(series_dir / "journal.jsonl", 2)


LIES: dict[str, Any] = {
    # name: a function of the valid body giving the bytes sent, and whether to close after
    "a Content-Length longer than the body": lambda body: (
        http_response(body, length=len(body) + 40), False),
    "a Content-Length shorter than the body": lambda body: (
        http_response(body, length=len(body) - 40), False),
    "two equal Content-Length headers": lambda body: (
        http_response(body, headers=(("content-length", str(len(body))),)), False),
    "a Content-Length of 'n, n'": lambda body: (
        http_response(body, framing=False,
                      headers=(("content-length", f"{len(body)}, {len(body)}"),)), False),
    "Content-Length with Transfer-Encoding": lambda body: (
        http_response(f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n",
                      headers=(("transfer-encoding", "chunked"),)), False),
    "a head that is not HTTP": lambda body: (b"HTTP/1.1 OK-ish\r\n\r\n" + body, False),
    # Each 1xx is a whole, small event: a flood of them once kept the read going past the
    # deadline and pushed a Content-Length + Transfer-Encoding head past the framing check.
    "a flood of 100 Continue before the answer": lambda body: (
        b"HTTP/1.1 100 Continue\r\n\r\n" * 1_000 + http_response(body), False),
    "1xx heads too long to check, then Content-Length with Transfer-Encoding": lambda body: (
        (b"HTTP/1.1 103 Early Hints\r\nx-pad: " + b"p" * 60_000 + b"\r\n\r\n") * 4
        + http_response(f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n",
                        headers=(("transfer-encoding", "chunked"),)), False),
}


@pytest.mark.parametrize("lie", list(LIES))
def test_a_response_whose_length_lies_is_doubtful(session_at: Any, lie: str) -> None:
    with RawServer(lambda n, req: LIES[lie](responses_body(n, req))) as server:
        failure = failure_of(session_at(server))
    assert len(server.requests) == 1
    assert failure.kind == "doubtful_response" and not failure.never_sent, failure.message
    assert "may have received and billed it" in failure.message


# Issue 24, item 10: h11's words ("illegal request line" for a status line starting with a
# control byte, "illegal status line: bytearray(b'...')" quoting up to 64 KiB of the server's
# bytes) are said in fragbench's, naming the server.
BAD_HEADS = {
    "garbage": (b"garbage\r\n\r\n", "sent a malformed HTTP status line"),
    "a control byte first": (b"\x00HTTP/1.1 200 OK\r\n\r\n", "sent a malformed HTTP status line"),
    "a control byte, then the server closes": (b"\x00HTTP/1.1 200",
                                               "sent a malformed HTTP status line"),
    "a status of four digits": (b"HTTP/1.1 2000 OK\r\n\r\n", "sent a malformed HTTP status line"),
    "a long status line": (b"HTTP/1.1 OK " + b"s3cr3t" * 5000 + b"\r\n\r\n",
                           "sent a malformed HTTP status line"),
    "a header line without a colon": (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
                                      "sent a malformed HTTP header line"),
}


@pytest.mark.parametrize("bad", list(BAD_HEADS))
def test_a_malformed_head_is_said_in_fragbench_words(session_at: Any, bad: str) -> None:
    sent, words = BAD_HEADS[bad]
    with RawServer(lambda n, req: (sent, True)) as server:
        failure = failure_of(session_at(server))
    assert failure.kind == "doubtful_response" and not failure.never_sent, failure.message
    assert f"the server at 127.0.0.1:{server.port} {words}" in failure.message
    assert "illegal" not in failure.message and "bytearray" not in failure.message
    assert "s3cr3t" not in failure.message and len(failure.message) < 300

def test_a_chunked_answer_without_a_length_is_read(session_at: Any) -> None:
    def chunked(number: int, req: dict[str, Any]) -> bytes:
        body = responses_body(number, req)
        half = len(body) // 2
        data = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in (body[:half],
                                                                           body[half:]))
        return http_response(data + b"0\r\n\r\n", framing=False,
                             headers=(("transfer-encoding", "chunked"),))
    with RawServer(chunked) as server:
        reply = session_at(server).send(request())
    assert reply.status == "completed" and reply.usage and reply.usage.input_tokens == 400


# -- Item 2: repeated keys ---------------------------------------------------------------------

DEARER = {"input_tokens": 7000, "input_tokens_details": {"cached_tokens": 0,
                                                         "cache_write_tokens": 0},
          "output_tokens": 1000, "output_tokens_details": {"reasoning_tokens": 0},
          "total_tokens": 8000}


def repeated(key: str, value: Any) -> Any:
    def reply(number: int, req: dict[str, Any]) -> bytes:
        body = responses_body(number, req)
        return http_response(b'{"' + key.encode() + b'": ' + json.dumps(value).encode() + b", "
                             + body[1:])
    return reply


@pytest.mark.parametrize(("key", "value"), [("usage", DEARER), ("model", "gpt-4o-mini"),
                                            ("input_tokens", 1)])
def test_a_body_with_a_repeated_key_is_no_response(session_at: Any, key: str, value: Any
                                                   ) -> None:
    if key == "input_tokens":  # repeated inside the usage object, not at the top
        def reply(number: int, req: dict[str, Any]) -> bytes:
            body = responses_body(number, req).replace(b'"input_tokens": 400',
                                                       b'"input_tokens": 9, "input_tokens": 400')
            return http_response(body)
    else:
        reply = repeated(key, value)
    with RawServer(reply) as server:
        failure = failure_of(session_at(server))
    assert failure.kind == "repeated_key" and not failure.never_sent
    assert f"repeats the key '{key}'" in failure.message
    assert failure.raw is not None and failure.raw.count(f'"{key}"') == 2


def test_a_repeated_usage_is_never_priced_from_either_copy(current: Path) -> None:
    with RawServer(lambda n, req: (repeated("usage", DEARER) if n == 1 else responses_answer)(
            n, req)) as server:
        result, series_dir = collect_at(current, server.base_url)
    row = assert_stopped_at(result, series_dir, 2, "repeated_key")
    assert row["cost_usd"] is None and row["counted_usd"] == row["reserved_usd"]
    assert row["input_tokens"] is None
    assert body_of(series_dir / "journal.jsonl", 2).count('"usage"') == 2


# -- Item 3: record first, then look, bounded ------------------------------------------------------

def test_the_body_is_handed_over_before_anything_parses_it(session_at: Any) -> None:
    deep = b'{"object": "response", "deep": ' + b"[" * 500 + b"]" * 500 + b"}"
    bodies = [responses_body(0, {}), deep, b"<html>upstream error</html>",
              b'{"error": {"message": "no"}}']
    statuses = ["200 OK", "200 OK", "200 OK", "503 Service Unavailable"]
    with RawServer(lambda n, req: http_response(bodies[n], status=statuses[n])) as server:
        session = session_at(server)
        handed: list[tuple[str, int]] = []
        session.on_body = lambda text, status: handed.append((text, status))
        assert isinstance(session.send(request(0)), Reply)
        failures = [failure_of(session, n) for n in (1, 2, 3)]
    assert handed == [(b.decode(), int(s[:3])) for b, s in zip(bodies, statuses, strict=True)]
    assert [f.kind for f in failures] == ["bad_body", "bad_body", "http_error"]
    assert "nests 501 levels deep" in failures[0].message and failures[0].raw == deep.decode()


def test_an_exception_from_on_body_comes_out_of_send_unchanged(session_at: Any) -> None:
    class DiskFull(OSError):
        pass

    def refuse(text: str, status: int) -> None:
        raise DiskFull("no space left on device")
    with RawServer(responses_answer) as server:
        session = session_at(server)
        session.on_body = refuse
        with pytest.raises(DiskFull):
            session.send(request())


def gzip(data: bytes, wbits: int = 16 + zlib.MAX_WBITS) -> bytes:
    packer = zlib.compressobj(6, zlib.DEFLATED, wbits)
    return packer.compress(data) + packer.flush()


def bomb(size: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    piece = b" " * (1 << 20)
    return b"".join(packer.compress(piece) for _ in range(size >> 20)) + packer.flush()


def test_a_gzip_bomb_is_bounded_after_decompression(session_at: Any) -> None:
    packed = bomb(128 << 20)  # 128 MiB of spaces in about 128 KiB
    with RawServer(lambda n, req: http_response(packed, headers=(
            ("content-encoding", "gzip"),))) as server:
        session = session_at(server)
        session.max_body_bytes = 65536
        handed: list[str] = []
        session.on_body = lambda text, status: handed.append(text)
        failure = failure_of(session)
    assert failure.kind == "too_large" and not failure.never_sent
    assert "larger than 65536 bytes once decompressed" in failure.message
    assert failure.raw == " " * 65536 and handed == [" " * 65536]


@pytest.mark.parametrize("encoding", ["gzip", "deflate (zlib)", "deflate (raw)", "x-gzip"])
def test_compressed_answers_are_decoded(session_at: Any, encoding: str) -> None:
    wbits = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS,
             "deflate (zlib)": zlib.MAX_WBITS, "deflate (raw)": -zlib.MAX_WBITS}[encoding]
    with RawServer(lambda n, req: http_response(gzip(responses_body(n, req), wbits), headers=(
            ("content-encoding", encoding.split()[0]),))) as server:
        reply = session_at(server).send(request())
    assert reply.status == "completed" and reply.usage and reply.usage.input_tokens == 400
    assert server.requests[0]["headers"]["accept-encoding"] == "gzip, deflate"


@pytest.mark.parametrize(("encoding", "body", "said"), [
    ("gzip", b'{"plain": "JSON"}', "claims gzip encoding and is not gzip"),
    ("deflate", b'{"plain": "JSON"}', "claims deflate encoding and is not deflate"),
    ("gzip", None, "stops before its end"),
    ("br", b"\x8b\x02\x80{}\x03", "encoded as 'br', which fragbench does not decode"),
])
def test_a_body_that_lies_about_its_encoding_says_so(session_at: Any, encoding: str,
                                                     body: bytes | None, said: str) -> None:
    sent = body if body is not None else gzip(b'{"cut": "short"}')[:-12]
    with RawServer(lambda n, req: http_response(sent, headers=(
            ("content-encoding", encoding),))) as server:
        failure = failure_of(session_at(server))
    assert failure.kind == "bad_encoding" and said in failure.message, failure.message
    assert "connection error" not in failure.message and not failure.never_sent
    if body is not None:  # kept as it came, any byte that is not UTF-8 escaped
        assert failure.raw == body.decode("utf-8", "backslashreplace")


def test_text_that_is_not_valid_unicode_is_kept_writable(session_at: Any) -> None:
    def reply(number: int, req: dict[str, Any]) -> bytes:
        body = responses_body(number, req, model="gpt-6-astra-\ud83d")
        return http_response(body.replace(b"See the cited", b"See \\ud83d the \xff cited"))
    with RawServer(reply) as server:
        session = session_at(server)
        handed: list[str] = []
        session.on_body = lambda text, status: handed.append(text)
        reply_ = session.send(request())
    # Parsed with the byte read as U+FFFD; the raw body keeps it, escaped.
    assert reply_.text is not None and "See \ufffd the \ufffd cited" in reply_.text
    assert reply_.raw is not None and "See \\ud83d the \\xff cited" in reply_.raw
    assert reply_.model == "gpt-6-astra-\ufffd"
    for text in (reply_.raw, handed[0], reply_.text, reply_.model):
        assert text is not None
        text.encode("utf-8")  # writable as UTF-8: no lone surrogate, no raw byte


def test_a_bomb_and_a_surrogate_are_recorded_small_and_the_series_rebuilds(
        current: Path) -> None:
    """Call 1's answer holds a lone surrogate (kept, collection goes on); call 2 is a gzip bomb
    (bounded by the plan's max_response_bytes, counted at its reservation, its first bytes
    kept, no journal line near its size); `measure` rebuilds every table after."""
    refreeze(current, 'default_backend = "openai"',
             'default_backend = "openai"\nmax_response_bytes = 65536')
    packed = bomb(64 << 20)

    def reply(number: int, req: dict[str, Any]) -> bytes:
        if number == 1:
            return http_response(packed, headers=(("content-encoding", "gzip"),))
        return http_response(responses_body(number, req).replace(
            b"See the cited", b"See \\ud83d the cited"))
    with RawServer(reply) as server:
        result, series_dir = collect_at(current, server.base_url)
    row = assert_stopped_at(result, series_dir, 2, "too_large")
    assert row["counted_usd"] == row["reserved_usd"]
    assert body_of(series_dir / "journal.jsonl", 2) == " " * 65536
    journal = (series_dir / "journal.jsonl").read_bytes()
    assert max(len(line) for line in journal.splitlines()) < 200_000
    first = pl.read_parquet(series_dir / "calls.parquet").sort("seq").row(0, named=True)
    assert first["status"] == "completed" and "See \ufffd the cited" in first["text"]
    rebuilt = run_cli("measure", str(series_dir))
    assert rebuilt.returncode == 0, rebuilt.stderr


def test_a_field_nested_500_deep_is_recorded_and_stops_the_series(current: Path) -> None:
    def reply(number: int, req: dict[str, Any]) -> bytes:
        body = responses_body(number, req)
        if number == 1:
            body = body[:-1] + b', "deep": ' + b"[" * 500 + b"]" * 500 + b"}"
        return http_response(body)
    with RawServer(reply) as server:
        result, series_dir = collect_at(current, server.base_url)
    row = assert_stopped_at(result, series_dir, 2, "bad_body")  # exit 3, not a traceback
    assert "nests 501 levels deep" in row["error"]
    kept = [r for r in records(series_dir / "journal.jsonl") if r.get("seq") == 2
            and r.get("raw")]
    assert kept and all("[" * 500 in r["raw"] for r in kept)


# -- The deadline: what has arrived is read, even late --------------------------------------------

def test_an_answer_that_arrived_is_read_even_past_the_deadline() -> None:
    """A process stopped (SIGSTOP) past its deadline and resumed finds the answer in its
    socket: the transport reads what has arrived (non-blocking) instead of discarding it."""
    from fragbench.http.wire import Exchange, read_response, send_request

    ours, theirs = socket.socketpair()
    with ours, theirs:
        exchange = Exchange(time.monotonic() + 30, 1 << 20)
        conn = send_request(ours, exchange, b"POST", b"/v1/responses",
                            [(b"Host", b"example"), (b"Content-Length", b"2")], b"{}")
        body = responses_body(0, {})
        theirs.sendall(http_response(body))
        theirs.shutdown(socket.SHUT_WR)
        exchange.deadline = time.monotonic() - 60  # the time was up long ago
        read_response(ours, exchange, conn)
    assert exchange.complete and exchange.failure is None and bytes(exchange.body) == body


def test_past_the_deadline_with_nothing_arrived_is_a_timeout() -> None:
    import httpx2

    from fragbench.http.wire import Exchange, read_response, send_request

    ours, theirs = socket.socketpair()
    with ours, theirs:
        exchange = Exchange(time.monotonic() + 30, 1 << 20)
        conn = send_request(ours, exchange, b"POST", b"/", [(b"Host", b"example"),
                                                            (b"Content-Length", b"0")], b"")
        exchange.deadline = time.monotonic() - 1
        with pytest.raises(httpx2.ReadTimeout):
            read_response(ours, exchange, conn)
    assert exchange.started and exchange.status is None
