"""The `MeasureInput`s `check_measure` feeds a measure: the kit's bilingual sample corpus
(`fragbench.testing.samples`), its retrieval table at three settings, and a calls table built
by the core's own `calls_table` from a plan and a journal, so that a measure sees exactly the
columns and types a real series gives it.

The four planned calls (case kit-fees, full passage) end four ways: one completed with a parsed
answer citing two IDs, at a known cost with 18 decimals; one completed whose answer does not
parse; one failed (HTTP 500, its cost unknown, counted at its reservation); one never sent. The
second input is the same series before any call: `calls` is None, as `fragbench retrieve`-only
measures see it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from fragbench.testing import samples

if TYPE_CHECKING:
    from fragbench.interfaces import MeasureInput

SETTINGS = [(2, 1), (2, 2), (3, 1)]
"""(chunk_size, top_k) of the sample retrieval table; the first is the main setting."""
RESERVED = "0.012"
"""What each sample call reserved (USD, exact decimal text): the failed call is counted at it."""
COST = "0.000123456789012345"
"""The answered call's cost: 18 decimals, which a float cannot hold exactly."""


def _answer(citations: list[tuple[str, str]]) -> str:
    return json.dumps({"answer": "It costs €250 with the urgent surcharge.",
                       "citations": [{"id": i, "extract": e} for i, e in citations]},
                      ensure_ascii=False)


def _records(call_ids: list[str]) -> list[dict[str, Any]]:
    """A journal: answered (parsed), answered (unparsed), failed; the last call never sent."""
    answered, unparsed, failed = call_ids[:3]
    usage = {"input_tokens": 412, "cached_tokens": 128, "cache_write_tokens": 0,
             "output_tokens": 61, "reasoning_tokens": 0}
    records: list[dict[str, Any]] = []
    for seq, cid in enumerate(call_ids[:3], start=1):
        records.append({"type": "reserve", "call_id": cid, "seq": seq,
                        "reserved_usd": RESERVED})
    records.append({
        "type": "outcome", "call_id": answered, "seq": 1, "status": "completed",
        "model": "kit-model", "service_tier": "default", "request_id": "req_1", "usage": usage,
        "cost_usd": COST, "counted_usd": COST, "cost_unknown": None,
        "text": _answer([("K2", "Urgent jobs, due within 24 hours"),
                         ("K4", "at least €30"), ("K5", "VAT is included")]),
        "refusal": None, "incomplete_reason": None, "error": None, "raw": "{}"})
    records.append({
        "type": "outcome", "call_id": unparsed, "seq": 2, "status": "completed",
        "model": "kit-model", "service_tier": "default", "request_id": "req_2", "usage": usage,
        "cost_usd": COST, "counted_usd": COST, "cost_unknown": None,
        "text": "It costs €250.", "refusal": None, "incomplete_reason": None, "error": None,
        "raw": "{}"})
    records.append({
        "type": "outcome", "call_id": failed, "seq": 3, "status": "failed",
        "failure": "http_error", "http_status": 500, "error": "server error",
        "request_id": None, "cost_usd": None, "counted_usd": RESERVED,
        "cost_unknown": "no usable response: counted at its reservation", "never_sent": False,
        "raw": None})
    records.append({"type": "stop", "reason": "technical_failure", "detail": "server error",
                    "call_id": failed, "seq": 3})
    return records


def measure_input(calls: bool = True) -> MeasureInput:
    """The sample series as a measure receives it: with its calls table (answered, unparsed,
    failed, never sent), or with `calls=False` the same before any call (calls None)."""
    from decimal import Decimal

    from fragbench.builtin.chunkers import SentenceGroups
    from fragbench.builtin.scorers import SqrtLexical
    from fragbench.corpus.cases import facts_frame
    from fragbench.experiment.plan import schedule_entry
    from fragbench.interfaces import MeasureInput
    from fragbench.retrieval.passages import retrieve
    from fragbench.series.folder import calls_table

    cases = samples.cases()
    facts = facts_frame(cases)
    retrieval = retrieve(cases, SentenceGroups(), SqrtLexical(), SETTINGS)
    if not calls:
        return MeasureInput(facts=facts, retrieval=retrieval, calls=None,
                            main_setting=SETTINGS[0])
    planned = samples.calls()
    plan = {"schedule": [schedule_entry(c, Decimal(RESERVED), spans=False) for c in planned]}
    table = calls_table(plan, {"backend": "kit", "is_model": True},
                        _records([c.id for c in planned]), facts)
    return MeasureInput(facts=facts, retrieval=retrieval, calls=table,
                        main_setting=SETTINGS[0])
