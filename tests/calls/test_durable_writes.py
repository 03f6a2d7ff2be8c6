"""What is on disk when (`fragbench.calls.collector`): before a request leaves, its
reservation is fsync'ed in the ledger (then in the journal); after it returns, its body and
outcome are fsync'ed in the journal before the ledger is given the outcome (then fsync'ed
there). Every fsync is watched through `os.fsync` itself."""

from __future__ import annotations

import json
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from support.collector import USAGE, billed, concurrent_backend, planned

from fragbench.calls.collector import collect
from fragbench.interfaces import Reply, Request

BODY = '{"id": "resp_1", "status": "completed"}'


def synced_lines(path: Path, size: int) -> list[dict[str, Any]]:
    """The records of `path`'s first `size` bytes: what an fsync at that size made durable."""
    return [json.loads(line) for line in path.read_bytes()[:size].splitlines()]


class Watched:
    """A session that journals its body as it arrived (`on_body`) and, at each send, notes
    what the ledger and the journal had fsync'ed."""

    endpoint = "scripted"
    concurrent = False

    def __init__(self, fsyncs: list[tuple[str, int]]) -> None:
        self.fsyncs = fsyncs
        self.on_body: Any = None
        self.at_send: list[list[tuple[str, int]]] = []

    def send(self, request: Request) -> Reply:
        self.at_send.append(list(self.fsyncs))
        self.on_body(BODY, 200)
        return Reply(status="completed", model="m", service_tier=None, request_id=None,
                     usage=USAGE, text='{"answer": "", "citations": []}', raw=BODY)

    def close(self) -> None:
        return None


def test_each_call_is_durable_where_it_must_be(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _budget, ledger, journal, book = billed(tmp_path, Decimal(100))
    fsyncs: list[tuple[str, int]] = []  # (file name, its size at the fsync)
    ledger_then: list[int] = []  # the ledger's size at each fsync
    real = os.fsync

    def fsync(fd: int) -> None:
        real(fd)
        fsyncs.append((Path(os.readlink(f"/proc/self/fd/{fd}")).name, os.fstat(fd).st_size))
        ledger_then.append(ledger.path.stat().st_size)

    monkeypatch.setattr(os, "fsync", fsync)
    session = Watched(fsyncs)
    calls = [planned(i) for i in range(3)]
    stop = collect(calls, {c.seq: Decimal(1) for c in calls}, session, concurrent_backend(1),
                   journal, book)
    assert stop is None
    during = len(fsyncs)
    for call, seen in zip(calls, session.at_send, strict=True):
        ledger_size = max((size for name, size in seen if name == "b.jsonl"), default=0)
        reserved = [r for r in synced_lines(ledger.path, ledger_size)
                    if r.get("type") == "reserve" and r["call_id"] == call.id]
        assert reserved, f"call {call.seq} was sent before its reservation was fsync'ed"
    journal_path = tmp_path / "journal.jsonl"
    for call in calls:
        # The journal's fsync that first holds the outcome comes before the ledger holds it.
        first = next(i for i, (name, size) in enumerate(fsyncs)
                     if name == "journal.jsonl" and any(
                         r.get("type") == "outcome" and r["call_id"] == call.id
                         for r in synced_lines(journal_path, size)))
        assert not [r for r in synced_lines(ledger.path, ledger_then[first])
                    if r.get("type") == "outcome" and r["call_id"] == call.id]
        assert [r for r in synced_lines(ledger.path, ledger.path.stat().st_size)
                if r.get("type") == "outcome" and r["call_id"] == call.id]
    # Five fsyncs a call (ledger and journal: reservation, outcome; journal: body), one for
    # the end.
    assert during == 5 * len(calls) + 1, fsyncs
    journal.close()
    ledger.close()
    assert fsyncs[during:] == []  # nothing was left for closing to make durable
