"""The exact text each planned call sends, built from the prompt files and the selection.

`retrieval` mode supplies only the sentences of the selected chunks (main setting), in passage
order; `full` mode supplies every sentence in variant order. Both use the same prompt. Under a
span chunker a retrieval call shows each fact the selected spans touch with only the characters
inside the span (`fragbench.retrieval.spans.supplied`): a cut fact is shown as its fragment, under
its ID.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from fragbench.corpus.cases import Case
from fragbench.experiment.config import Experiment
from fragbench.interfaces import Request


def canonical_json(value: Any) -> str:
    """Compact, key-sorted, UTF-8 JSON: the form that is hashed and byte-counted."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def build_request(experiment: Experiment, case: Case, lang: str, call_id: str,
                  supplied_ids: Sequence[str], texts: Sequence[str] | None = None) -> Request:
    """The call's request. `texts`, one per supplied ID, is what is shown for it; None shows
    each fact's whole sentence (a sentence chunker's selection, and the full passage)."""
    prompt = experiment.prompts[lang]
    passage = case.langs[lang]
    shown = [passage.facts[fid] for fid in supplied_ids] if texts is None else list(texts)
    supplied = tuple(zip(supplied_ids, shown, strict=True))
    sentences = "\n".join(prompt.sentence_template.format(id=fid, text=text)
                          for fid, text in supplied)
    return Request(
        call_id=call_id,
        lang=lang,
        instructions=prompt.instructions,
        input=prompt.input_template.format(source=passage.source, question=passage.question,
                                           sentences=sentences),
        schema_name=experiment.schema_name,
        schema=experiment.schema,
        question=passage.question,
        supplied=supplied,
    )


def request_text(request: Request) -> str:
    """Everything the request sends as text: instructions, input, schema name and schema."""
    return request.instructions + request.input + request.schema_name + canonical_json(
        request.schema
    )


def request_sha256(request: Request) -> str:
    return hashlib.sha256(
        canonical_json(
            {
                "instructions": request.instructions,
                "input": request.input,
                "schema_name": request.schema_name,
                "schema": request.schema,
            }
        ).encode("utf-8")
    ).hexdigest()
