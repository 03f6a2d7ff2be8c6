"""Servers written on raw sockets for the transport's tests (test_wire*.py): what they send is
exactly the bytes a test gives them, so a test can write what http.server never would (a
second response after the first, a lying Content-Length, two Content-Length headers).

- `RawServer(reply, tls=None)`: an HTTP/1.1 server that reads each request (head and
  Content-Length body), records it (`requests`: number, connection, method, target, headers,
  JSON body) and writes `reply(number, request)` as it is. It keeps the connection open for
  another request unless the request asked to close it (or the reply says so), as a
  keep-alive server does; `connections` counts those accepted.
- `ForwardingProxy()`: an HTTP proxy: CONNECT opens a tunnel; a request in absolute form is
  forwarded in origin form. Records what it was asked (`asked`: method and target).
- `Listener()`: a port that accepts connections and counts them, and answers nothing.
- `responses_answer(number, request, **options)`, `http_response(body, ...)`: the bytes.
- `certificate(folder)`: a self-signed certificate for localhost and 127.0.0.1 (made with the
  `openssl` command; the TLS tests are skipped without it).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fragbench.testing.loopback import RESPONSES

Reply = Callable[[int, dict[str, Any]], "bytes | tuple[bytes, bool]"]


def http_response(body: bytes, *, status: str = "200 OK",
                  headers: tuple[tuple[str, str], ...] = (), length: int | None = None,
                  framing: bool = True) -> bytes:
    """A response's bytes: status line, `content-type`, a Content-Length (`length`, or the
    body's; none when `framing` is False), `headers`, then `body`."""
    lines = [f"HTTP/1.1 {status}", "content-type: application/json",
             "x-request-id: req_raw"]
    if framing:
        lines.append(f"content-length: {len(body) if length is None else length}")
    lines += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def responses_body(number: int, request: dict[str, Any], **options: Any) -> bytes:
    """A valid Responses API body answering `request` (the loopback's shape and usage)."""
    from fragbench.testing.loopback import answer_for

    text = options.pop("text", None) or answer_for(request.get("body"))
    return json.dumps(RESPONSES.body(text, number=number, request=request.get("body"),
                                     **options)).encode()


def responses_answer(number: int, request: dict[str, Any], **options: Any) -> bytes:
    return http_response(responses_body(number, request, **options))


def _read_head(conn: socket.socket, buffer: bytes) -> tuple[bytes, bytes] | None:
    while b"\r\n\r\n" not in buffer:
        data = conn.recv(65536)
        if not data:
            return None
        buffer += data
    head, _, rest = buffer.partition(b"\r\n\r\n")
    return head, rest


def _parse(head: bytes) -> tuple[str, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return method, target, headers


class _Threaded:
    """Accepts on 127.0.0.1 in a daemon thread, one daemon thread per connection."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.port: int = self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.connections = 0
        self.errors: list[str] = []
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self.lock:
                number = self.connections
                self.connections += 1
            threading.Thread(target=self._serve, args=(conn, number), daemon=True).start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        try:
            conn.settimeout(30)
            self.handle(conn, number)
        except Exception as exc:  # kept for the test, never printed into its output
            self.errors.append(repr(exc))
        finally:
            conn.close()

    def handle(self, conn: socket.socket, number: int) -> None:
        raise NotImplementedError

    def __enter__(self) -> Any:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.closed.set()
        self.thread.join()
        self.sock.close()


class RawServer(_Threaded):
    def __init__(self, reply: Reply, tls: ssl.SSLContext | None = None) -> None:
        super().__init__()
        self.reply, self.tls = reply, tls
        self.requests: list[dict[str, Any]] = []

    @property
    def origin(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.origin + "/v1"

    def handle(self, conn: socket.socket, number: int) -> None:
        if self.tls is not None:
            conn = self.tls.wrap_socket(conn, server_side=True)
        buffer = b""
        while True:
            found = _read_head(conn, buffer)
            if found is None:
                return
            head, buffer = found
            method, target, headers = _parse(head)
            length = int(headers.get("content-length", "0"))
            while len(buffer) < length:
                data = conn.recv(65536)
                if not data:
                    return
                buffer += data
            payload, buffer = buffer[:length], buffer[length:]
            try:
                body = json.loads(payload)
            except ValueError:
                body = None
            with self.lock:
                request = {"number": len(self.requests), "connection": number,
                           "method": method, "target": target, "headers": headers,
                           "body": body}
                self.requests.append(request)
            reply = self.reply(request["number"], request)
            data, keep = reply if isinstance(reply, tuple) else (reply, True)
            conn.sendall(data)
            if not keep or headers.get("connection", "").lower() == "close":
                return


class ForwardingProxy(_Threaded):
    def __init__(self) -> None:
        super().__init__()
        self.asked: list[tuple[str, str]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def handle(self, conn: socket.socket, number: int) -> None:
        found = _read_head(conn, b"")
        if found is None:
            return
        head, rest = found
        method, target, _ = _parse(head)
        self.asked.append((method, target))
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            upstream = socket.create_connection((host, int(port)))
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            # http://host:port/path -> /path, sent to host:port
            where, _, path = target.split("://", 1)[1].partition("/")
            host, _, port = where.rpartition(":")
            upstream = socket.create_connection((host, int(port)))
            _, _, others = head.partition(b"\r\n")
            line = f"{method} /{path} HTTP/1.1".encode()
            upstream.sendall(line + b"\r\n" + others + b"\r\n\r\n" + rest)
            rest = b""
        with upstream:
            if rest:
                upstream.sendall(rest)
            _relay(conn, upstream)


def _relay(a: socket.socket, b: socket.socket) -> None:
    """Bytes both ways until either side closes."""
    def pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
    other = threading.Thread(target=pump, args=(b, a), daemon=True)
    other.start()
    pump(a, b)
    other.join(30)


class Listener(_Threaded):
    """Counts the connections it is offered, and answers nothing."""

    def handle(self, conn: socket.socket, number: int) -> None:
        return None


def certificate(folder: Path) -> tuple[Path, Path]:
    """(certificate, key) files: self-signed, for localhost and 127.0.0.1."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "2", "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


def server_tls(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context
