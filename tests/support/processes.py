"""`fragbench run` as a process: started, read line by line, signalled, killed at a chosen
write; and the limits a test puts on this process (signals at their default, a file size)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import queue
import random
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import attrs

from fragbench.series.journal import read_journal
from fragbench.testing.loopback import Action, Handler, Server, answer_for, ok
from support.cli import process_env
from support.suite import CANARY_KEY, PATIENCE, ROOT

TERMINAL_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


def _deaf(signum: int, frame: Any) -> None:
    """Does nothing: this process stays as deaf to the signal as when it ignored it."""


@contextlib.contextmanager
def signals_at_default() -> Iterator[None]:
    """Wrap the start of a process a test will send SIGINT, SIGTERM or SIGHUP: it begins with
    them at their default, as a terminal's foreground job does, even when pytest inherited
    them ignored (`nohup make test` ignores SIGHUP; a non-interactive shell's background job,
    `make test &`, ignores SIGINT). fragbench keeps an inherited ignore as the user's choice,
    so a test signalling that run would otherwise wait for nothing.

    An ignored signal stays ignored across exec, a caught one starts at its default: while
    the process starts, this one catches each ignored signal with a handler that does
    nothing, then ignores it again. Only here, never for the whole session: the suite's own
    processes (xdist workers, Ray clusters) keep the protection `nohup` gave them."""
    import signal

    ignored = [getattr(signal, name) for name in TERMINAL_SIGNALS
               if signal.getsignal(getattr(signal, name)) is signal.SIG_IGN]
    for signum in ignored:
        signal.signal(signum, _deaf)
    try:
        yield
    finally:
        for signum in ignored:
            signal.signal(signum, signal.SIG_IGN)


def answer_when_opened(gate: threading.Event) -> Action:
    """A valid answer, sent once the test opens `gate` (or after PATIENCE)."""
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        gate.wait(PATIENCE)
        try:
            handler.send_json(200, handler.server.shape.body(answer_for(body), number=number,
                                                             request=body))
        except OSError:  # the client abandoned the call and exited: expected in those tests
            handler.close_connection = True
    return act


def wait_for(what: str, condition: Any) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


class Lines:
    """A stream's lines, read in a thread as they come, so a test can wait for one."""

    def __init__(self, stream: IO[str]) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, text: str) -> str:
        deadline = time.monotonic() + PATIENCE
        for line in self.seen:
            if text in line:
                return line
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"gave up waiting for a line with {text!r}: {self.seen}"
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                continue
            assert line is not None, f"the stream ended without {text!r}: {self.seen}"
            self.seen.append(line)
            if text in line:
                return line

    def rest(self) -> list[str]:
        """Every line, once the stream has ended."""
        while (line := self._queue.get(timeout=PATIENCE)) is not None:
            self.seen.append(line)
        return self.seen


@attrs.frozen
class Run:
    proc: subprocess.Popen[str]
    stderr: Lines
    series_dir: Path


def start_run(experiment: Path, server: Server, **popen: Any) -> Run:
    """A billed run of 72 calls in a subprocess, against `server`."""
    out = experiment.parent.parent / "outputs"
    env = process_env({"OPENAI_API_KEY": CANARY_KEY, "OPENAI_BASE_URL": server.base_url})
    env.pop("PYTHONUNBUFFERED", None)  # output buffered, as from a user's shell
    streams: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    streams.update(popen)
    # Signals at their default in the run (`signals_at_default`), unless the test sets them
    # itself (`preexec_fn`: the nohup test).
    with contextlib.nullcontext() if "preexec_fn" in popen else signals_at_default():
        proc = subprocess.Popen([sys.executable, "-m", "fragbench", "run", str(experiment),
                                 "--series", "openai", "--backend", "openai", "--out",
                                 str(out)], cwd=ROOT, env=env, text=True, **streams)
    stderr = Lines(proc.stderr) if proc.stderr is not None else None
    return Run(proc, stderr, out / "protocol-1.0" / "openai")  # type: ignore[arg-type]


def journal(series_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in
            (series_dir / "journal.jsonl").read_text(encoding="utf-8").splitlines()]


def blocked_on_ledger(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the process's main thread is inside flock(2): waiting for the ledger's lock,
    the only file lock a run takes after it started. False where /proc cannot say (another
    machine or system): the caller then waits for the record the point is about alone."""
    number = FLOCK_SYSCALL.get(platform.machine())
    try:
        fields = Path(f"/proc/{proc.pid}/syscall").read_text(encoding="ascii").split()
    except OSError:
        return False
    return number is not None and bool(fields) and fields[0] == str(number)


def journal_has(series_dir: Path, kind: str, seq: int | None = None) -> bool:
    """Whether the series' journal holds a `kind` record (of call `seq`): read back as
    `measure` would, a torn last line and all."""
    path = series_dir / "journal.jsonl"
    if not path.exists():
        return False
    return any(r["type"] == kind and (seq is None or r.get("seq") == seq)
               for r in read_journal(path))


def kill(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(PATIENCE)
    if proc.stderr is not None:
        proc.stderr.close()


def killed_mid_run(experiment: Path, out: Path, server: Server, rng: random.Random
                   ) -> tuple[int, Path, list[dict[str, Any]]]:
    """`fragbench run` in a subprocess, SIGKILLed a random instant (up to 20 ms) after the
    server wrote the answer to a random one of its first `RANDOM_AMONG` requests: how many
    requests the server received, the series folder, and its journal read back (readable, torn
    last line or not)."""
    holder = Holder(rng.randrange(0, RANDOM_AMONG), hold=False)
    server.reset()
    server.default = holder
    proc = launch(experiment, out, server)
    wait_event("the chosen answer sent", holder.answered, proc)
    time.sleep(rng.uniform(0, 0.02))
    kill(proc)
    series_dir = out / "protocol-1.0" / "openai"
    with server.lock:
        received = len(server.requests)
    return received, series_dir, read_journal(series_dir / "journal.jsonl")


def launch(experiment: Path, out: Path, server: Server) -> subprocess.Popen[bytes]:
    """`fragbench run` of the experiment's billed series, as a user starts it."""
    env = process_env({"OPENAI_API_KEY": CANARY_KEY, "OPENAI_BASE_URL": server.base_url})
    return subprocess.Popen([sys.executable, "-m", "fragbench", "run", str(experiment),
                             "--out", str(out)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@contextlib.contextmanager
def ledger_held(path: Path) -> Iterator[None]:
    """The budget ledger's lock, taken as another run drawing on the budget takes it."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def wait_until(what: str, condition: Callable[[], bool], proc: subprocess.Popen[bytes]) -> None:
    """Wait for `condition`, failing with what the process said if it ended first, or after
    PATIENCE (a bound on a failure, never on a passing run)."""
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if proc.poll() is not None:
            assert condition(), (f"the run ended before {what}",
                                 proc.stderr.read().decode() if proc.stderr else "")
            return
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)  # the journal is read back at each look: not too often on a busy CPU


FLOCK_SYSCALL = {"x86_64": 73, "aarch64": 32}
"""flock(2)'s number in /proc/PID/syscall, by machine (Linux's syscall tables)."""


class Holder:
    """A server action: every request answered at once with a valid answer, except request
    `at` (0-based), held until `release()`. `arrived` is set when it comes in, `answered` once
    its answer was written (or the client was gone)."""

    def __init__(self, at: int | None, *, hold: bool = True) -> None:
        self.at = at
        self.arrived = threading.Event()
        self.answered = threading.Event()
        self.gate = threading.Event()
        if not hold:
            self.gate.set()
        self.answer = ok()

    def release(self) -> None:
        self.gate.set()

    def __call__(self, handler: Handler, number: int, body: dict[str, Any]) -> None:
        mine = number == self.at
        if mine:
            self.arrived.set()
            self.gate.wait(PATIENCE)
        try:
            self.answer(handler, number, body)
        except OSError:  # the client was killed: expected here
            handler.close_connection = True
        finally:
            if mine:
                self.answered.set()


RANDOM_AMONG = 8
"""The random kills follow one of the first 8 answers: the windows between two writes are the
same at every call (a later one only has more settled calls before it, which the chosen points
show), and a run killed early costs a loaded machine less."""


def wait_event(what: str, event: threading.Event, proc: subprocess.Popen[bytes]) -> None:
    wait_until(what, event.is_set, proc)


@contextlib.contextmanager
def file_size_limit(size: int) -> Iterator[None]:
    """Files of this process may not grow past `size` bytes, as on a disk that is full: a
    write across the limit is short, the next one fails (Python ignores SIGXFSZ)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
