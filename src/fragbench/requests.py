"""The exact text each planned call sends, built from the prompt files and the selection.

`retrieval` mode supplies only the sentences of the selected chunks (main setting), in passage
order; `full` mode supplies every sentence in variant order. Both use the same prompt.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from fragbench.config import Experiment
from fragbench.corpus import Case
from fragbench.interfaces import Request


def canonical_json(value: Any) -> str:
    """Compact, key-sorted, UTF-8 JSON: the form that is hashed and byte-counted."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def build_request(experiment: Experiment, case: Case, lang: str, call_id: str,
                  supplied_ids: list[str]) -> Request:
    prompt = experiment.prompts[lang]
    passage = case.langs[lang]
    supplied = tuple((fid, passage.facts[fid]) for fid in supplied_ids)
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
