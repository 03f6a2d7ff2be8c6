"""The calls report.html lists (`listed_calls`): every call sent and the first UNSENT_LISTED
never sent, in plan order, whatever order the table is in; a table already in plan order with
nothing to leave out is listed as it is (no copy of its columns)."""

from __future__ import annotations

import random

import polars as pl
import pytest

from fragbench.report.html import UNSENT_LISTED, listed_calls


def reference(calls: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    never = pl.col("status") == "not_sent"
    ordered = calls.sort("seq")
    listed = ordered.filter(~never | (never.cum_sum() <= UNSENT_LISTED))
    return listed, ordered.height - listed.height


@pytest.mark.parametrize("unsent", [0, 5, UNSENT_LISTED, UNSENT_LISTED + 1, 3 * UNSENT_LISTED])
@pytest.mark.parametrize("shuffled", [False, True])
def test_the_listed_calls_are_the_sent_and_the_first_unsent(unsent: int, shuffled: bool) -> None:
    sent = 50
    status = ["completed"] * sent + ["not_sent"] * unsent
    random.Random(unsent).shuffle(status)
    calls = pl.DataFrame({"seq": range(1, len(status) + 1), "status": status,
                          "answer": [f"a{n}" for n in range(len(status))]})
    if shuffled:
        calls = calls.sample(fraction=1.0, shuffle=True, seed=7)
    listed, left_out = listed_calls(calls)
    expected, expected_left = reference(calls)
    assert listed.equals(expected) and left_out == expected_left
    assert left_out == max(0, unsent - UNSENT_LISTED)
    if not shuffled and unsent <= UNSENT_LISTED:
        assert listed is calls  # nothing to sort or leave out: the table itself
