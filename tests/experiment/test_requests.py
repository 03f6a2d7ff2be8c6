"""A plan's request texts and hashes computed for all its calls at once
(`request_texts`, `request_sha256s`) are the ones each call's own gives, byte for byte."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fragbench.experiment.requests import (
    request_sha256,
    request_sha256s,
    request_text,
    request_texts,
)
from fragbench.interfaces import Request

TEXT = st.text(max_size=20) | st.sampled_from(['"', "\\", "é", "\u2028", "\x00", "🙂"])
SCHEMA = st.recursive(st.none() | st.booleans() | st.integers() | TEXT,
                      lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(TEXT, inner, max_size=3), max_leaves=10)


def request(schema: Any, instructions: str, text: str, name: str) -> Request:
    return Request(call_id="c", lang="en", instructions=instructions, input=text,
                   schema_name=name, schema=schema, question="q", supplied=())


@settings(max_examples=200, deadline=None)
@given(schemas=st.lists(st.dictionaries(TEXT, SCHEMA, max_size=4), min_size=1, max_size=3),
       calls=st.lists(st.tuples(st.integers(0, 2), TEXT, TEXT, TEXT), min_size=1,
                      max_size=8))
def test_all_at_once_is_each_on_its_own(schemas: list[dict[str, Any]],
                                        calls: list[tuple[int, str, str, str]]) -> None:
    # Requests sharing a schema object (a plan's calls share their experiment's), and others
    # with equal or different schemas of their own.
    shared = [copy.deepcopy(s) for s in schemas]
    requests = [request(shared[i % len(shared)] if n % 2 else copy.deepcopy(shared[i % len(
        shared)]), instructions, text, name)
        for n, (i, instructions, text, name) in enumerate(calls)]
    assert request_texts(requests) == [request_text(r) for r in requests]
    assert request_sha256s(requests) == [request_sha256(r) for r in requests]
