"""A throwaway PostgreSQL server for the tests, started from the system's binaries.

The binaries are looked for in `pg_config --bindir`, /usr/lib/postgresql/*/bin (Debian's
`postgresql` package, newest first) and PATH; `missing()` names what is not there, for the one
line a skipped test prints (`make postgresql` installs Debian's package where it can).

The server lives in a temporary folder: its data, its unix socket and its log; it listens on
127.0.0.1 at a free port, with a password (scram-sha-256) so that the tests exercise the URL a
team would use, password included, and check it is never written or printed. PostgreSQL refuses
to run as root: under root (CI) every server command runs as the `postgres` user (created by
Debian's package) or else `nobody`, through `runuser`, and the folder is theirs.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

USER = "fragbench"
PASSWORD = "pg-Secret-pass-0123456789"
"""Long enough for the Redactor to treat as a secret; the tests look for it in every output."""
TOOLS = ("initdb", "pg_ctl", "postgres")


def _has_tools(folder: Path) -> bool:
    return all((folder / tool).is_file() for tool in TOOLS)


def find_bindir() -> Path | None:
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True,
                                 check=True).stdout.strip()
            candidates.append(Path(out))
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                      key=lambda p: [int(x) if x.isdigit() else 0 for x in Path(p).parent.name
                                     .split(".")], reverse=True)
    candidates += [Path(p) for p in versions]
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).resolve().parent)
    return next((c for c in candidates if _has_tools(c)), None)


def missing() -> str | None:
    """Why no server can be started here, in one line; None when one can."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (the dev environment has it: make test)"
    if find_bindir() is None:
        return ("no PostgreSQL server binaries (initdb, pg_ctl, postgres) in pg_config --bindir, "
                "/usr/lib/postgresql/*/bin or PATH: the PostgreSQL tests are skipped; "
                "`make postgresql` installs Debian's as root")
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser: PostgreSQL refuses to run as root"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """initdb + pg_ctl in a temporary folder; `stop` removes it."""

    def __init__(self) -> None:
        bindir = find_bindir()
        assert bindir is not None
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="fragbench-pg-"))
        self.data = self.root / "data"
        self.port = 0
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            name = "postgres"
            try:
                entry = pwd.getpwnam(name)
            except KeyError:
                name, entry = "nobody", pwd.getpwnam("nobody")
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
            self.prefix = ["runuser", "-u", name, "--"]
            self.owner: tuple[int, int] | None = (entry.pw_uid, entry.pw_gid)
        else:
            self.owner = None

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.prefix, *args], cwd=self.root, capture_output=True,
                              text=True, check=False)

    def start(self) -> Server:
        pwfile = self.root / "pw"
        pwfile.write_text(PASSWORD + "\n", encoding="utf-8")
        if self.owner is not None:
            os.chown(pwfile, *self.owner)
        done = self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-U", USER,
                         "-E", "UTF8", "--no-sync", "--auth-local=trust",
                         "--auth-host=scram-sha-256", f"--pwfile={pwfile}")
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr.strip()}")
        for _attempt in range(5):  # another process may take the free port first
            self.port = _free_port()
            done = self._start()
            if done.returncode == 0:
                return self
        raise RuntimeError(f"pg_ctl start failed: {done.stderr.strip()} {self.log_tail()}")

    def _start(self) -> subprocess.CompletedProcess[str]:
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                   "-c fsync=off -c max_connections=50")
        return self.pg_ctl("-o", options, "-l", str(self.root / "log"), "-t", "600", "start")

    def pg_ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`pg_ctl -D DATA -w ARGS` as the server's user (a fault a test injects: `restart -m
        fast`), waiting for it to finish."""
        return self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-w", *args)

    def log_tail(self) -> str:
        return (self.root / "log").read_text(errors="replace")[-2000:]

    def postmaster_pid(self) -> int:
        """The running postmaster's process id (the first line of postmaster.pid)."""
        return int((self.data / "postmaster.pid").read_text(encoding="ascii").split()[0])

    def start_again(self, patience: float) -> None:
        """Start the server again on its port after its postmaster was killed: once every
        orphaned backend has exited (until then the old shared memory is in use and the
        start is refused), within `patience` seconds."""
        import time

        deadline = time.monotonic() + patience
        while (done := self._start()).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"pg_ctl start failed: {done.stderr.strip()} "
                                   f"{self.log_tail()}")
            time.sleep(0.2)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh database (so that each test has budgets of its own); its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
                      "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


def started_postgresql() -> Iterator[Any]:
    """A throwaway PostgreSQL server from the system's binaries (`Server` above), stopped
    and removed when the generator ends; the test skipped with one line naming what is missing
    where it cannot start. For a fixture: `yield from started_postgresql()`."""
    from support import pg_server

    why = pg_server.missing()
    if why is not None:
        pytest.skip(why)
    srv = pg_server.Server().start()
    try:
        yield srv
    finally:
        srv.stop()
