"""Durable files: atomic and fsync'ed writes, folders made durable in their parents, the
hash chain of an append-only line file (the journal's and the ledger's), and the one rule for an
id that names a file; a frozen plan as read, with its hash (`Plan`).

A leaf: the journal, the ledger, the tables, the figures and the pages all write through it, and
it imports nothing of fragbench, so no stage reaches up to another for a helper.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""An id that names a file or folder: a budget id (its ledger file), an experiment id (the
folder OUT/<id> its series are written in), a series name (OUT/<id>/<series>). One path part:
no separator, never `.` or `..`, never absolute."""
FILE_NAME_RULE = "up to 64 letters, digits, '.', '_' and '-', starting with a letter or digit"


def file_name_problem(value: str) -> str | None:
    """Why `value` cannot be an id that names a file or folder (FILE_NAME), in words that
    follow it; None when it can. `new experiment`'s NAME is a stricter form of this rule."""
    if FILE_NAME.fullmatch(value):
        return None
    shown = repr(value[:80]) + ("..." if len(value) > 80 else "")  # one bounded line
    return f"must be {FILE_NAME_RULE}, not {shown}"


GENESIS = "0" * 64
"""The `prev` of a chain's first record (a journal's, a ledger's): no line comes before it."""

class Plan(dict):  # type: ignore[type-arg]
    """A frozen plan as read from its file (experiment.json, or a series' plan.json copy of
    it), with `sha256`, the hash of the bytes read: what shows the hash takes it from here, so
    that a command reads and parses the plan once (at 100,000 calls it is some 200 MB)."""

    sha256: str

    @classmethod
    def parsed(cls, data: bytes, value: dict[str, Any]) -> Plan:
        plan = cls(value)
        plan.sha256 = hashlib.sha256(data).hexdigest()
        return plan

    def without_corpus(self) -> Plan:
        """This plan but its `corpus` block, with the same hash: what deriving a series'
        tables and pages holds. The block is every sentence of every case (a third of the
        file, some hundreds of MiB parsed, at 100,000 calls), and nothing derived reads it
        from the plan: the series' facts.parquet records the corpus as used."""
        plan = Plan({key: value for key, value in self.items() if key != "corpus"})
        plan.sha256 = self.sha256
        return plan


def plan_sha256(plan: dict[str, Any], path: Path) -> str:
    """The hash of a plan's file: from `plan` when it was read as a `Plan`, else from `path`'s
    bytes (a caller of the library that parsed the file itself)."""
    return plan.sha256 if isinstance(plan, Plan) else hashlib.sha256(path.read_bytes()).hexdigest()


def line_hash(line: bytes) -> str:
    """The sha256 of a line's exact bytes, its newline left out: what the next line's `prev`
    holds."""
    return hashlib.sha256(line).hexdigest()



def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """Write `path` through `write(tmp)` beside it, then rename into place: a crash or a full
    disk leaves the old file or the new one, never half of one, and no temporary file. An
    OSError that names no file (or the temporary one) is raised naming `path`."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        write(tmp)
        tmp.replace(path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno is not None \
                and exc.filename in (None, str(tmp), tmp):
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise


def write_text_atomically(path: Path, text: str) -> None:
    write_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_synced(path: Path, data: bytes) -> None:
    """Write `data` to `path` and fsync it before returning."""
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def make_dirs(path: Path) -> None:
    """Create `path` and its missing parents, each made durable in its parent (a power loss
    must not take a folder holding billed records). NotADirectoryError where a file stands in
    the way; other OSErrors as they come."""
    missing = []
    while not path.is_dir():
        if path.exists() or path.is_symlink():
            raise NotADirectoryError(20, "is not a folder", str(path))
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:  # another run created it meanwhile: a folder is all we need
            if not folder.is_dir():
                raise
        fsync_dir(folder.parent)
