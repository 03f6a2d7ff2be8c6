"""A small Responses-API server on 127.0.0.1 for the real openai SDK to talk to.

Each request is answered by the next scripted action (or the default one); every request is
recorded (method, path, headers, JSON body), whatever its method, so that tests can count them
and check them field by field: a client that follows a redirect with a GET sends a request too.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def response_body(text: str, *, model: str = "gpt-6-astra-2026-09-30", status: str = "completed",
                  service_tier: str = "default", usage: Any = None,
                  refusal: str | None = None, incomplete_reason: str | None = None,
                  error_message: str = "The model failed.", number: int = 0) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if refusal is not None:
        content.append({"type": "refusal", "refusal": refusal})
    elif text:
        content.append({"type": "output_text", "text": text, "annotations": []})
    body: dict[str, Any] = {
        "id": f"resp_{number:04d}", "object": "response", "created_at": 1_780_000_000 + number,
        "status": status, "model": model, "parallel_tool_calls": True, "tool_choice": "auto",
        "tools": [], "error": None,
        "incomplete_details": {"reason": incomplete_reason} if incomplete_reason else None,
        "service_tier": service_tier,
        "output": [{"type": "message", "id": f"msg_{number:04d}", "role": "assistant",
                    "status": "completed", "content": content}],
        "usage": usage if usage is not None else default_usage(number),
    }
    if usage == "omit":
        del body["usage"]
    if status == "failed":
        body["error"] = {"code": "server_error", "message": error_message}
    return body


def default_usage(number: int) -> dict[str, Any]:
    """Different for every request, so that a cost attributed to the wrong call shows."""
    return {"input_tokens": 400 + number, "input_tokens_details": {"cached_tokens": 100,
            "cache_write_tokens": 50}, "output_tokens": 300 + number,
            "output_tokens_details": {"reasoning_tokens": 200}, "total_tokens": 700 + 2 * number}


def answer_for(body: dict[str, Any]) -> str:
    """A plausible structured answer: cite the first supplied sentence's first words."""
    lines = [ln for ln in body.get("input", "").splitlines() if ln.startswith("[")]
    citations = []
    if lines:
        fid, _, text = lines[0][1:].partition("] ")
        citations.append({"id": fid, "extract": " ".join(text.split()[:5])})
    return json.dumps({"answer": "See the cited sentence.", "citations": citations})


Action = Callable[["Handler", int, dict[str, Any]], None]


def ok(**kwargs: Any) -> Action:
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        text = kwargs.pop("text", None) if "text" in kwargs else answer_for(body)
        handler.send_json(200, response_body(text, number=number, **kwargs))
    return act


def http_error(code: int, message: str = "error") -> Action:
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        handler.send_json(code, {"error": {"message": message, "type": "server_error"}})
    return act


def raw(code: int, text: str, content_type: str = "application/json") -> Action:
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        data = text.encode()
        handler.send_response(code)
        handler.send_header("content-type", content_type)
        handler.send_header("content-length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
    return act


def json_body(code: int, value: Any) -> Action:
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        handler.send_json(code, value)
    return act


def sleep(seconds: float) -> Action:
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        time.sleep(seconds)
        handler.send_json(200, response_body(answer_for(body), number=number))
    return act


def redirect(code: int, location: str) -> Action:
    """A 3xx pointing elsewhere: a client that follows it sends a second request for one call."""
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        data = json.dumps({"error": {"message": "moved", "type": "redirect"}}).encode()
        handler.send_response(code)
        handler.send_header("location", location)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
    return act


def trickle(total_seconds: float, pieces: int) -> Action:
    """A valid response whose body arrives in `pieces` parts spread over `total_seconds`.

    Each pause is short, so no single read waits long: only a deadline on the whole request
    stops the client before the end. Once the client has gone the writes fail; the handler then
    stops quietly instead of printing a traceback into the test's output.
    """
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        data = json.dumps(response_body(answer_for(body), number=number)).encode()
        size = -(-len(data) // pieces)
        try:
            handler.send_response(200)
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(data)))
            handler.end_headers()
            for start in range(0, len(data), size):
                time.sleep(total_seconds / pieces)
                handler.wfile.write(data[start:start + size])
                handler.wfile.flush()
        except OSError:  # BrokenPipeError, ConnectionResetError: the client gave up
            handler.close_connection = True
    return act


def drop() -> Action:
    """Read the request, then close the connection without a response."""
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        handler.close_connection = True
        handler.connection.shutdown(2)
    return act


class Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: without TCP_NODELAY, Nagle's algorithm holds the
    # body until the client's delayed ACK, about 40 ms a call spent waiting in the kernel.
    disable_nagle_algorithm = True

    def log_message(self, *args: Any) -> None:
        return None

    def send_json(self, code: int, value: Any) -> None:
        data = json.dumps(value).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("x-request-id", f"req_{len(self.server.requests):04d}")
        self.send_header("openai-organization", "org-SECRETACCOUNT123")
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", 0))
        payload = self.rfile.read(length)
        try:
            body = json.loads(payload)
        except ValueError:
            body = {}
        with self.server.lock:
            number = len(self.server.requests)
            self.server.requests.append({"method": self.command, "path": self.path,
                                         "headers": dict(self.headers), "body": body})
            action = self.server.script.get(number, self.server.default)
        action(self, number, body)

    def __getattr__(self, name: str) -> Any:
        # The base class answers a method it has no do_<METHOD> for with 501 and records
        # nothing; every method (a GET after a 302, a PUT, ...) is a request and must be
        # counted, so each one goes through do_POST's recording and the script.
        if name.startswith("do_"):
            return self.do_POST
        raise AttributeError(name)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.requests: list[dict[str, Any]] = []
        self.script: dict[int, Action] = {}
        self.default: Action = ok()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.errors: list[str] = []

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up (a deadline, a dropped connection) breaks the pipe: expected
        in fault tests. Kept for inspection instead of printed, since the command under test
        runs in this process and its stderr is what the tests read."""
        import sys

        self.errors.append(repr(sys.exc_info()[1]))

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def __enter__(self) -> Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
        self.server_close()
