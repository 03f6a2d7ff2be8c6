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


def _schema_texts(requests: Sequence[Request]) -> list[str]:
    """Each request's schema as `canonical_json` writes it, each distinct schema object written
    once (a plan's calls share their experiment's schema: at 100,000 calls its JSON, written
    again for every call, was about a second each time the texts were needed). Exact: the
    requests, and so their schemas, are alive for the whole loop, so no two schemas share an
    id, and nothing runs between two of them that could change one."""
    memo: dict[int, str] = {}
    out = []
    for r in requests:
        schema = memo.get(id(r.schema))
        if schema is None:
            schema = memo[id(r.schema)] = canonical_json(r.schema)
        out.append(schema)
    return out


def request_texts(requests: Sequence[Request]) -> list[str]:
    """`request_text` of each request (`_schema_texts`: each schema's JSON written once)."""
    return [r.instructions + r.input + r.schema_name + schema
            for r, schema in zip(requests, _schema_texts(requests), strict=True)]


def request_sha256s(requests: Sequence[Request]) -> list[str]:
    """`request_sha256` of each request, written as `canonical_json` writes its object (keys
    in sorted order: input, instructions, schema, schema_name), each distinct schema's JSON
    once (`_schema_texts`) and each distinct instructions once."""
    words: dict[str, str] = {}
    out = []
    for r, schema in zip(requests, _schema_texts(requests), strict=True):
        instructions = words.get(r.instructions)
        if instructions is None:
            instructions = words[r.instructions] = canonical_json(r.instructions)
        text = (f'{{"input":{canonical_json(r.input)},"instructions":{instructions},'
                f'"schema":{schema},"schema_name":{canonical_json(r.schema_name)}}}')
        out.append(hashlib.sha256(text.encode("utf-8")).hexdigest())
    return out
