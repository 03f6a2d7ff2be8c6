"""fragbench's own HTTP/1.1 transport under the SDKs: one call, one connection, one answer.

The SDK (openai, anthropic) still builds the request: URL, headers, key, JSON body. Sending it
and reading the answer is done here, with h11 (an HTTP/1.1 state machine that bounds the size
of a head) over a plain or TLS socket, so that what reaches the collector is exactly one
response to this call, bounded in size, or a technical failure that says why:

- **A connection of its own.** Every request opens a new connection and sends
  `Connection: close`; nothing is pooled or reused, so a second response written after an
  answer (by a server or a middlebox) can never be read as the next call's answer.
- **A doubtful response is no answer.** Bytes after the body (before the server closes, which
  it must after `Connection: close`; waited for at most CLOSE_GRACE within the deadline), a
  body shorter than its Content-Length, two Content-Length headers, Content-Length with
  Transfer-Encoding, a head that is not HTTP: the exchange fails as `doubtful_response`.
- **A bounded body.** At most `max_body` bytes after decompression (gzip and deflate are
  decoded incrementally, with a bounded `zlib.decompressobj`, never at once) and at most
  twice that on the wire; beyond: `too_large`, the first `max_body` bytes kept. Another
  encoding (br, zstd, ...) or a body that is not what its encoding claims: `bad_encoding`.
  `Accept-Encoding: gzip, deflate` is sent, never the SDK's list.
- **One deadline.** Every socket operation waits at most what is left of the call's deadline.
  When the time is up, what has already arrived is still read (non-blocking): a process
  stopped (SIGSTOP) past its deadline and resumed keeps an answer that arrived meanwhile.
- **Never sent, only where proven.** Any failure before the first byte of the request is
  written (TCP connect, the proxy's tunnel, the TLS handshake) raises `httpx2.ConnectError`
  (or `ConnectTimeout`), and `Exchange.started` stays False; anything later may be billed.
- **No proxy from the environment**: HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and their lower-case
  forms are never read. A proxy is used only when the backend's config names one
  (`http://host:port`): https endpoints through a CONNECT tunnel, http ones in absolute form.
- **Redirects are the SDK's client's business**, and it never follows one (transport.py): a
  3xx comes back as a status.
- **Certificates** as httpx2 verifies them (`httpcore2.default_ssl_context`: SSL_CERT_FILE or
  SSL_CERT_DIR when set, else the system's), checked when the session opens (`tls_context`).

The SDK is handed the status and headers only, with an empty body, when the call runs inside
`calling(exchange)` (what `fragbench.transport.SDKSession` does): the session reads the body
from the Exchange, hands it to the collector to be recorded, and only then parses it, bounded.
Outside `calling`, the decoded body is handed to the SDK (and any failure raised as an httpx2
error), so the transport also works as an ordinary one.

Imported only when a session opens (h11, ssl, zlib and httpx2 are not needed by `--help`).
"""

from __future__ import annotations

import os
import re
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

import h11
import httpx2

from fragbench.errors import FragbenchError
from fragbench.http.limits import MAX_BODY_BYTES, MAY_BE_BILLED

MAX_HEAD = 64 * 1024
"""The most bytes a response head (status line and headers) may take; h11 refuses a longer
one, and the response is doubtful."""
READ_CHUNK = 64 * 1024
CLOSE_GRACE = 1.0
"""How long, at most, the server is waited for to close the connection after the body (it
must, after `Connection: close`); bytes arriving in that time make the response doubtful. A
server that neither closes nor sends anything is given the benefit of the doubt: its
connection is never used again."""
MAX_INFORMATIONAL = 8
"""1xx answers accepted before the final one: each is a whole, small h11 event, so without a
count a server writing `100 Continue` without end would keep a read going past any deadline
(and push the final head past what `framing_problem` reads)."""
ACCEPT_ENCODING = "gzip, deflate"
DECODED = ("gzip", "x-gzip", "deflate")
HOP_HEADERS = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"te", b"upgrade",
                         b"accept-encoding", b"cookie", b"proxy-authorization"})
"""Request headers the SDK's client may set that this transport decides alone."""
PASSED_OVER = frozenset({"content-length", "content-encoding", "transfer-encoding",
                         "connection", "keep-alive", "set-cookie"})
"""Response headers never handed to the SDK's client: the framing is this transport's, and a
cookie would carry state from one call to the next."""


class Exchange:
    """One call's request and response as the transport saw them.

    `deadline` (time.monotonic) bounds every socket operation; `max_body` bounds the body
    after decompression. Filled by the transport: `started` once a byte of the request is
    written; `status` and `headers` once a response head is read; `body` the decoded body (at
    most `max_body` bytes; the bytes as received when they could not be decoded); `complete`
    once the whole body was read; `failure` (kind, message) when the response is no usable
    answer: `doubtful_response`, `too_large`, `bad_encoding`, `second_request`.
    """

    def __init__(self, deadline: float, max_body: int, *, managed: bool = False) -> None:
        self.deadline, self.max_body, self.managed = deadline, max_body, managed
        self.requests = 0
        self.started = False
        self.status: int | None = None
        self.reason = ""
        self.headers: list[tuple[str, str]] = []
        self.body = bytearray()
        self.complete = False
        self.failure: tuple[str, str] | None = None
        self.server = ""
        """The server's host:port (the URL's, through a proxy too), for the lines that say
        what it sent."""

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def header(self, name: str) -> str | None:
        """The first value of a response header (name in lower case), or None."""
        return next((v for k, v in self.headers if k == name), None)

    def text(self) -> str:
        """The body as text that can always be written: UTF-8, any byte that is not valid
        UTF-8 escaped (`\\xNN`)."""
        return bytes(self.body).decode("utf-8", "backslashreplace")

    def readable(self) -> str:
        """The body as text to parse: UTF-8, any invalid byte read as U+FFFD (the answer it
        holds stays readable; `text()` keeps the byte itself, escaped)."""
        return bytes(self.body).decode("utf-8", "replace")

    def fail(self, kind: str, message: str) -> None:
        if self.failure is None:  # the first problem found is the one reported
            self.failure = (kind, message)


_local = threading.local()


@contextmanager
def calling(exchange: Exchange) -> Iterator[Exchange]:
    """Within this block, in this thread, the transport fills `exchange` (and hands the SDK an
    empty body): the block is one call, and a second request inside it is refused."""
    _local.exchange = exchange
    try:
        yield exchange
    finally:
        _local.exchange = None


def tls_context() -> ssl.SSLContext:
    """The certificates httpx2 would use: SSL_CERT_FILE or SSL_CERT_DIR when set, else the
    system's. A variable naming a file or folder that does not exist, or certificates that
    cannot be read, is one line naming the variable and the path (FragbenchError)."""
    import httpcore2

    for name, exists, what in (("SSL_CERT_FILE", os.path.isfile, "file"),
                               ("SSL_CERT_DIR", os.path.isdir, "folder")):
        path = os.environ.get(name)
        if path and not exists(path):
            raise FragbenchError(f"{name} is set to {path}, which is not an existing {what}: "
                                 f"point it at your certificates or unset it (nothing was "
                                 "sent or spent).")
    try:
        return httpcore2.default_ssl_context()
    except (OSError, ssl.SSLError) as exc:
        named = [f"{n} ({os.environ[n]})" for n in ("SSL_CERT_FILE", "SSL_CERT_DIR")
                 if os.environ.get(n)]
        raise FragbenchError(f"the certificates {' and '.join(named) or 'of the system'} "
                             f"cannot be read ({type(exc).__name__}: {exc}); fix or unset it "
                             "(nothing was sent or spent).") from None


def authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class WireTransport(httpx2.BaseTransport):
    """An httpx2 transport: one request per connection, bounded, within a deadline (the module
    docstring). `timeout` and `max_body` apply to a request sent outside `calling`; `proxy` is
    (host, port) of an http proxy, `proxy_url` its public URL, or both None."""

    def __init__(self, timeout: float, *, proxy: tuple[str, int] | None = None,
                 proxy_url: str | None = None, max_body: int = MAX_BODY_BYTES) -> None:
        self.timeout, self.proxy, self.proxy_url = timeout, proxy, proxy_url
        self.max_body = max_body
        self._tls: ssl.SSLContext | None = None
        self._tls_lock = threading.Lock()

    def tls(self) -> ssl.SSLContext:
        with self._tls_lock:
            if self._tls is None:
                self._tls = tls_context()
            return self._tls

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        exchange: Exchange | None = getattr(_local, "exchange", None)
        if exchange is None:
            exchange = Exchange(time.monotonic() + self.timeout, self.max_body)
        exchange.requests += 1
        if exchange.requests > 1:
            # max_retries=0 and no redirect followed: the SDK never asks. If it did, the
            # first request may already be billed; a second is never sent for one call. A
            # whole first response still speaks for the call (its status, its body).
            if not exchange.complete:
                exchange.fail("second_request", "the SDK asked to send a second request for "
                              "this call (a retry); it was not sent: one call is one request "
                              f"(the first: {MAY_BE_BILLED})")
            raise httpx2.UnsupportedProtocol("a second request for one call is refused")
        url = request.url
        if url.scheme not in ("http", "https"):
            raise httpx2.UnsupportedProtocol(f"the URL scheme {url.scheme!r} is neither http "
                                             "nor https")
        body = request.read()
        port = url.port or (443 if url.scheme == "https" else 80)
        exchange.server = authority(url.host, port)
        sock = self._connect(exchange, url.scheme, url.host, port)
        try:
            target = str(url).encode() if self.proxy and url.scheme == "http" else url.raw_path
            conn = send_request(sock, exchange, request.method.encode(), target,
                                outgoing(request.headers.raw), body)
            read_response(sock, exchange, conn)
        finally:
            sock.close()
        if exchange.failure is not None:
            raise httpx2.RemoteProtocolError(exchange.failure[1], request=request)
        headers = [(k, v) for k, v in exchange.headers if k not in PASSED_OVER]
        content = b"" if exchange.managed else bytes(exchange.body)
        assert exchange.status is not None  # read_response returns with a head or raises
        return httpx2.Response(exchange.status, headers=headers, content=content,
                               extensions={"http_version": b"HTTP/1.1",
                                           "reason_phrase": exchange.reason.encode("latin-1")})

    def _connect(self, exchange: Exchange, scheme: str, host: str, port: int) -> socket.socket:
        """An open connection (through the proxy's tunnel and TLS where they apply), or
        ConnectError / ConnectTimeout: nothing of the request was written."""
        remaining = exchange.remaining()
        if remaining <= 0:
            raise httpx2.ConnectTimeout("the deadline passed before the connection opened")
        where = self.proxy or (host, port)
        try:
            sock = socket.create_connection(where, timeout=remaining)
        except TimeoutError as exc:
            raise httpx2.ConnectTimeout(f"connecting to {authority(*where)} timed out") from exc
        except OSError as exc:
            via = " (the configured proxy)" if self.proxy else ""
            raise httpx2.ConnectError(f"cannot connect to {authority(*where)}{via}: "
                                      f"{exc.strerror or exc}") from exc
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.proxy is not None and scheme == "https":
                tunnel(sock, exchange, host, port)
            if scheme == "https":
                context = self.tls()
                sock.settimeout(max(exchange.remaining(), 0.001))
                try:
                    sock = context.wrap_socket(sock, server_hostname=host)
                except TimeoutError as exc:
                    raise httpx2.ConnectTimeout("the TLS handshake timed out") from exc
                except (OSError, ssl.SSLError) as exc:
                    raise httpx2.ConnectError(f"the TLS handshake with {host} failed: "
                                              f"{exc}") from exc
        except BaseException:
            sock.close()
            raise
        return sock


def outgoing(raw: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The SDK's request headers, less the hop-by-hop ones this transport decides, plus
    `Connection: close` and the encodings it can decode."""
    kept = [(k, v) for k, v in raw if k.lower() not in HOP_HEADERS]
    return [*kept, (b"Connection", b"close"), (b"Accept-Encoding", ACCEPT_ENCODING.encode())]


def tunnel(sock: socket.socket, exchange: Exchange, host: str, port: int) -> None:
    """Open a CONNECT tunnel to host:port through the proxy `sock` is connected to; a refusal
    or a proxy that does not answer is ConnectError / ConnectTimeout (the request itself was
    not sent)."""
    target = authority(host, port).encode()
    conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
    data = conn.send(h11.Request(method=b"CONNECT", target=target, headers=[(b"Host", target)]))
    informational = 0
    try:
        sock.settimeout(max(exchange.remaining(), 0.001))
        sock.sendall(data or b"")
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(receive(sock, exchange))
                continue
            if isinstance(event, h11.InformationalResponse):
                informational += 1
                if informational > MAX_INFORMATIONAL:
                    raise httpx2.ConnectError("the proxy answered CONNECT with more than "
                                              f"{MAX_INFORMATIONAL} informational responses")
                continue
            if isinstance(event, h11.Response):
                if not 200 <= event.status_code < 300:
                    raise httpx2.ConnectError(f"the proxy refused the tunnel to "
                                              f"{target.decode()} (HTTP {event.status_code})")
                return
            raise httpx2.ConnectError("the proxy closed the connection instead of opening the "
                                      "tunnel")
    except TimeoutError as exc:
        raise httpx2.ConnectTimeout("the proxy did not open the tunnel in time") from exc
    except h11.RemoteProtocolError as exc:
        raise httpx2.ConnectError(f"the proxy {_misspoke(exc, head=True)} in answer to "
                                  "CONNECT") from exc
    except (OSError, httpx2.ReadError) as exc:
        raise httpx2.ConnectError(f"the proxy failed while opening the tunnel: {exc}") from exc


def send_request(sock: socket.socket, exchange: Exchange, method: bytes, target: bytes,
                 headers: list[tuple[bytes, bytes]], body: bytes) -> h11.Connection:
    """Write the whole request within the deadline; the h11 connection that then reads the
    response. Refused before its first byte when the deadline has passed (nothing sent)."""
    conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
    data = b"".join(conn.send(e) or b"" for e in (
        h11.Request(method=method, target=target, headers=headers), h11.Data(data=body),
        h11.EndOfMessage()))
    remaining = exchange.remaining()
    if remaining <= 0:
        raise httpx2.ConnectTimeout("the deadline passed before the request was sent")
    exchange.started = True
    try:
        sock.settimeout(remaining)
        sock.sendall(data)
    except TimeoutError as exc:
        raise httpx2.WriteTimeout("the request could not be written in time") from exc
    except OSError as exc:
        raise httpx2.WriteError(f"the connection failed while the request was written "
                                f"({type(exc).__name__})") from exc
    return conn


def receive(sock: socket.socket, exchange: Exchange, until: float | None = None) -> bytes:
    """The next bytes from `sock` (b"" when the server closed), waiting at most until `until`
    (default: the deadline). When the time is up, what has already arrived is still returned
    (a non-blocking read); TimeoutError only when nothing has."""
    limit = exchange.deadline if until is None else until
    try:
        remaining = limit - time.monotonic()
        if remaining > 0:
            sock.settimeout(remaining)
            try:
                return sock.recv(READ_CHUNK)
            except TimeoutError:
                pass  # one last look below: the wait may have ended in a stopped process
        sock.settimeout(0)
        try:
            return sock.recv(READ_CHUNK)
        except (BlockingIOError, ssl.SSLWantReadError):
            raise TimeoutError from None
    except TimeoutError:
        raise
    except OSError as exc:
        raise httpx2.ReadError(f"the connection failed while the response was read "
                               f"({type(exc).__name__})") from exc


def read_response(sock: socket.socket, exchange: Exchange, conn: h11.Connection) -> None:
    """Read the response to the request `conn` sent into `exchange` (module docstring).
    Returns once the body is read or found unusable (`exchange.failure`); raises ReadTimeout at
    the deadline, ReadError or RemoteProtocolError when no response head arrived."""
    head = bytearray()
    decoder: Decoder | None = None
    received = 0
    informational = 0
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            if exchange.status is None and not received:
                raise httpx2.RemoteProtocolError("the server closed the connection without "
                                                 "answering") from exc
            server = exchange.server or "the endpoint"
            exchange.fail("doubtful_response", f"the server at {server} "
                          f"{_misspoke(exc, head=exchange.status is None)}, so it is no "
                          f"answer; {MAY_BE_BILLED}")
            return
        if event is h11.NEED_DATA:
            try:
                data = receive(sock, exchange)
            except TimeoutError:
                raise httpx2.ReadTimeout("the response did not arrive in time") from None
            received += len(data)
            if exchange.status is None and len(head) < MAX_HEAD + READ_CHUNK:
                head += data
            conn.receive_data(data)
            continue
        if isinstance(event, h11.InformationalResponse):
            informational += 1
            if informational > MAX_INFORMATIONAL:
                exchange.fail("doubtful_response", f"more than {MAX_INFORMATIONAL} "
                              f"informational (1xx) responses came before the answer; "
                              f"{MAY_BE_BILLED}")
                return
            continue
        if isinstance(event, h11.Response):
            if len(head) >= MAX_HEAD + READ_CHUNK:
                exchange.fail("doubtful_response", "the response heads are too long for their "
                              f"framing to be checked; {MAY_BE_BILLED}")
                return
            exchange.status = event.status_code
            exchange.reason = event.reason.decode("latin-1")
            exchange.headers = [(k.decode("latin-1").lower(), v.decode("latin-1"))
                                for k, v in event.headers]
            problem = framing_problem(bytes(head))
            if problem:
                exchange.fail("doubtful_response", f"the response {problem}: its length "
                              f"cannot be trusted; {MAY_BE_BILLED}")
                return
            decoder = Decoder(exchange.header("content-encoding"), exchange)
            continue
        if isinstance(event, h11.Data):
            assert decoder is not None
            if not decoder.feed(event.data):
                return
            continue
        if isinstance(event, h11.EndOfMessage):
            assert decoder is not None
            if decoder.finish():
                exchange.complete = True
                after_body(sock, exchange, conn)
            return
        # ConnectionClosed before EndOfMessage is a RemoteProtocolError in h11; anything else
        # here is a state h11 should not reach.
        exchange.fail("doubtful_response", f"the response ended unexpectedly ({event!r}); "
                      f"{MAY_BE_BILLED}")
        return


_H11_WORDS = (
    ("illegal request line", "sent a malformed HTTP status line"),
    ("illegal status line", "sent a malformed HTTP status line"),
    ("no response line", "sent a malformed HTTP status line"),
    ("illegal header line", "sent a malformed HTTP header line"),
    ("continuation line", "sent a malformed HTTP header line"),
    ("illegal header", "sent a malformed HTTP header"),
    ("receive buffer too long", f"sent a response head longer than {MAX_HEAD} bytes"),
    ("content-length", "sent an unusable Content-Length"),
    ("transfer-encoding", "sent a Transfer-Encoding other than chunked"),
    ("chunk", "sent a malformed chunked body"),
    ("peer closed connection without sending complete message body",
     "closed the connection before the whole body arrived"),
    ("peer unexpectedly closed", "closed the connection in the middle of the response"),
)
"""h11's words for what it refused (matched at the start of its message, any case), and
fragbench's: h11 speaks of a "request line" for a bad status line, and quotes the server's
bytes (up to 64 KiB of them), which no line of fragbench's repeats."""


def _misspoke(exc: h11.RemoteProtocolError, *, head: bool) -> str:
    """What was wrong with a response h11 refused, in fragbench's words (never its quote of
    the server's bytes); `head`: no status line had been read yet."""
    said = str(exc).lower()
    for start, words in _H11_WORDS:
        if said.startswith(start) or (start == "chunk" and "chunk" in said):
            return words
    return ("sent a response head that is not valid HTTP/1.1" if head
            else "sent a body whose framing is not valid HTTP/1.1")


def after_body(sock: socket.socket, exchange: Exchange, conn: h11.Connection) -> None:
    """After the body: the server must close. Bytes instead make the response doubtful."""
    trailing, closed = conn.trailing_data
    extra = len(trailing)
    if not extra and not closed:
        until = min(exchange.deadline, time.monotonic() + CLOSE_GRACE)
        try:
            extra = len(receive(sock, exchange, until))
        except (TimeoutError, httpx2.ReadError):
            extra = 0  # no more bytes, or a reset: nothing follows the body
    if extra:
        exchange.complete = False
        exchange.fail("doubtful_response", f"{extra} more byte(s) followed the response body "
                      "on the connection (a second response?), so this response may not be "
                      f"this call's; {MAY_BE_BILLED}")


_BLANK = re.compile(rb"\r?\n\r?\n")


def framing_problem(received: bytes) -> str | None:
    """What makes the final response head in `received` (after any 1xx) ambiguous about its
    length, in words: h11 silently merges repeated equal Content-Length headers and lets
    Transfer-Encoding win over Content-Length, both signs of a response that two readers can
    split differently."""
    start = 0
    while True:
        end = _BLANK.search(received, start)
        block = received[start:end.start() if end else len(received)]
        lines = block.split(b"\n")
        parts = lines[0].split()
        code = parts[1] if len(parts) > 1 else b""
        if end is not None and code[:1] == b"1" and len(code) == 3:
            start = end.end()
            continue
        names = [line.split(b":", 1)[0].strip().lower() for line in lines[1:] if b":" in line]
        lengths = [line.split(b":", 1)[1] for line in lines[1:]
                   if line.split(b":", 1)[0].strip().lower() == b"content-length"]
        if len(lengths) > 1 or any(b"," in value for value in lengths):
            return "carries more than one Content-Length"
        if lengths and b"transfer-encoding" in names:
            return "carries both Content-Length and Transfer-Encoding"
        return None


class Decoder:
    """The body as it arrives, decoded and bounded (`exchange.body`, `exchange.max_body`).

    Bytes that cannot be decoded (an encoding fragbench does not decode, or a body that is not
    what its encoding claims) fail the exchange as `bad_encoding`, and the body is then kept
    as received, bounded the same way."""

    def __init__(self, encoding: str | None, exchange: Exchange) -> None:
        self.exchange = exchange
        self.encoding = (encoding or "identity").strip().lower()
        self.wire = 0
        self.wire_bound = 2 * exchange.max_body + 64 * 1024
        self.received: bytearray | None = None  # the bytes as received, while decoding
        self.pending = b""  # deflate: its first bytes, until they say zlib or raw
        self.inflate: zlib._Decompress | None = None
        if self.encoding in ("gzip", "x-gzip"):
            self.inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        if self.encoding != "identity":
            self.received = bytearray()
        if self.encoding not in ("identity", *DECODED):
            self.give_up(f"the body is encoded as {self.encoding!r}, which fragbench does not "
                         "decode (it asks for gzip or deflate only)")

    def give_up(self, message: str) -> None:
        """Fail as bad_encoding; keep the bytes as received from here on."""
        self.exchange.fail("bad_encoding", f"{message}; {MAY_BE_BILLED}")
        self.exchange.body[:] = self.received or b""
        self.encoding, self.inflate, self.received, self.pending = "identity", None, None, b""

    def lie(self, detail: str) -> None:
        name = "gzip" if self.encoding in ("gzip", "x-gzip") else self.encoding
        self.give_up(f"the body claims {name} encoding and is not {name} ({detail})")

    def too_large(self) -> bool:
        exchange, bound = self.exchange, self.exchange.max_body
        if len(exchange.body) <= bound and self.wire <= self.wire_bound:
            return False
        del exchange.body[bound:]
        once = " once decompressed" if self.received is not None else ""
        exchange.fail("too_large", f"the response body is larger than {bound} bytes{once} "
                      "(the bound frozen in the plan, max_response_bytes): its first "
                      f"{len(exchange.body)} bytes are kept; {MAY_BE_BILLED}")
        return True

    def feed(self, data: bytes) -> bool:
        """Take the next bytes of the body; False once it is too large (stop reading)."""
        exchange = self.exchange
        self.wire += len(data)
        if self.received is not None:
            self.received += data[:exchange.max_body - len(self.received)]
        if self.encoding == "deflate" and self.inflate is None:
            self.pending += data
            if len(self.pending) < 2:
                return True
            cmf, flg = self.pending[0], self.pending[1]
            wrapped = cmf & 0x0F == 8 and (cmf * 256 + flg) % 31 == 0
            self.inflate = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
            data, self.pending = self.pending, b""
        if self.inflate is None:
            exchange.body += data[:exchange.max_body + 1 - len(exchange.body)]
            return not self.too_large()
        try:
            while data:
                # Never more than one byte past the bound at a time: a bomb is stopped there.
                room = exchange.max_body + 1 - len(exchange.body)
                exchange.body += self.inflate.decompress(data, room)
                if self.too_large():
                    return False
                data = self.inflate.unconsumed_tail
                if self.inflate.eof and (data or self.inflate.unused_data):
                    self.lie("bytes follow the end of its compressed stream")
                    return not self.too_large()
        except zlib.error as exc:
            self.lie(str(exc))
        return not self.too_large()

    def finish(self) -> bool:
        """At the end of the body: True when it was whole and decoded to its end."""
        if self.exchange.failure is None:
            if self.encoding == "deflate" and self.inflate is None and self.pending:
                self.lie("it is too short to be deflate data")
            elif self.inflate is not None and not self.inflate.eof and self.wire:
                self.lie("the compressed stream stops before its end")
        return self.exchange.failure is None
