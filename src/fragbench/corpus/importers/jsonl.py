"""`fragbench import jsonl FILE --out DIR`: a generic import, one JSON object a line, one case
an object:

    {"id": "q1", "question": "...", "sentences": [{"id": "s1", "text": "..."}, ...],
     "conditions": ["s1"], "groups": {"topic": "prices"},
     "source": "...", "license": "...", "lang": "en"}

`id` (a case ID: 1 to 128 letters, digits, `.`, `_`, `-`, the first a letter or digit),
`question`, `sentences` (non-empty; each `text` a non-empty string, each `id` a fact ID: 1 to
128 characters, no control character, `[` or `]`, no space at either end; unique in the case;
`fragbench.corpus.ids`) and `conditions` (non-empty, among the sentences' IDs) are required;
`groups` (group key -> string; every case the same keys), `source` (default `the document`),
`license` (default `unspecified`) and `lang` (default `en`) are optional; any other key is
refused.
Variant A is the given order; variant B the sentences sorted by the sha256 of
`CASE_ID + "\\0" + SENTENCE_ID` (a fixed shuffle that depends on the IDs alone). A fault is
refused in one line naming the file, the line and the value; nothing is written. Lines end
at "\\n" only (a "\\r" before it is dropped): U+2028 and the other characters
`str.splitlines` breaks at may stand raw in a JSON string.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from fragbench.corpus.columnar import NotUtf8, group_key_problem, jsonl_lines
from fragbench.corpus.ids import CASE_ID, CASE_ID_RULE, FACT_ID, FACT_ID_RULE, shown
from fragbench.corpus.importers.write import Tables, check_out, frames, write_corpus
from fragbench.errors import CorpusError

REQUIRED = ("id", "question", "sentences", "conditions")
OPTIONAL = {"groups": None, "source": "the document", "license": "unspecified", "lang": "en"}
FORMAT_HELP = ("one JSON object a line with id, question, sentences ([{\"id\", \"text\"}]), "
               "conditions and optionally groups, source, license, lang (docs/corpus.md)")


def b_order(case_id: str, ids: list[str]) -> list[str]:
    """Variant B of a generic import (module docstring)."""
    def key(fid: str) -> str:
        return hashlib.sha256(f"{case_id}\0{fid}".encode()).hexdigest()
    return sorted(ids, key=key)


def parse(path: Path) -> tuple[Tables, str]:
    """The file's cases as the corpus's tables, and the sha256 of its bytes (module
    docstring)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise CorpusError(f"{path}: cannot be read ({exc.strerror}); check the path.") from None
    digest = hashlib.sha256(raw).hexdigest()
    try:
        texts = jsonl_lines(raw)  # split at "\n" only: U+2028 may stand raw in a string
    except NotUtf8 as exc:
        raise CorpusError(f"{path}: {exc}; {FORMAT_HELP}. Nothing was written.") from None
    del raw
    tables = Tables()
    seen: dict[str, int] = {}
    keys: list[str] | None = None
    for number, line in enumerate(texts, 1):
        def fail(message: str, number: int = number) -> CorpusError:
            return CorpusError(f"{path}: line {number}: {message}; {FORMAT_HELP}. Nothing was "
                               "written.")
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            raise fail("is not one JSON value") from None
        if not isinstance(record, dict):
            raise fail(f"is {shown(record)}, not a JSON object")
        missing = [k for k in REQUIRED if k not in record]
        extra = [k for k in record if k not in REQUIRED and k not in OPTIONAL]
        if missing or extra:
            raise fail(f"lacks {', '.join(missing)}" if missing else f"has the unknown key "
                       f"{extra[0]!r}")
        values = {**OPTIONAL, **record}
        for key in ("id", "question", "source", "license", "lang"):
            if not isinstance(values[key], str) or not values[key].strip():
                raise fail(f"{key} is {shown(values[key])}, not a non-empty string")
        case_id = values["id"]
        if not CASE_ID.fullmatch(case_id):
            raise fail(f"id {shown(case_id)} {CASE_ID_RULE}")
        if case_id in seen:
            raise fail(f"id {shown(case_id)} is also line {seen[case_id]}'s")
        seen[case_id] = number
        items = values["sentences"]
        if not isinstance(items, list) or not items:
            raise fail(f"sentences is {shown(items)}, not a non-empty list")
        ids: list[str] = []
        for item in items:
            if not isinstance(item, dict) or set(item) != {"id", "text"} or not all(
                    isinstance(item[k], str) and item[k].strip() for k in ("id", "text")):
                raise fail(f"sentences holds {shown(item)}, not {{\"id\": string, \"text\": "
                           "string}} with both non-empty")
            if not FACT_ID.fullmatch(item["id"]):
                raise fail(f"sentence id {shown(item['id'])} {FACT_ID_RULE}")
            if item["id"] in ids:
                raise fail(f"sentence id {shown(item['id'])} is repeated")
            ids.append(item["id"])
        conditions = values["conditions"]
        if not isinstance(conditions, list) or not conditions or not all(
                isinstance(c, str) for c in conditions):
            raise fail(f"conditions is {shown(conditions)}, not a non-empty list of sentence "
                       "ids")
        unknown = [c for c in conditions if c not in ids]
        if unknown:
            raise fail(f"conditions names {shown(unknown[0])}, which is no sentence id of the "
                       "case")
        if len(set(conditions)) != len(conditions):
            raise fail("conditions repeats an id")
        groups = values["groups"] if values["groups"] is not None else {}
        if not isinstance(groups, dict) or not all(isinstance(v, str) and v.strip()
                                                   for v in groups.values()):
            raise fail(f"groups is {shown(groups)}, not an object of group key -> string")
        for key in groups:  # here, where the line is known (the tables are checked later)
            if (problem := group_key_problem(key)) is not None:
                raise fail(f"group key {shown(key)} {problem}")
        if keys is None:
            keys = list(groups)
        elif set(groups) != set(keys):
            raise fail(f"groups has the keys {shown(sorted(groups))}; every case needs the "
                       f"same keys ({shown(sorted(keys))})")
        tables.add(case_id, values["lang"], values["license"], values["source"],
                   values["question"], [(item["id"], item["text"]) for item in items],
                   conditions, {"A": ids, "B": b_order(case_id, ids)}, groups)
    if not tables:
        raise CorpusError(f"{path}: holds no case; {FORMAT_HELP}.")
    return tables, digest


def import_jsonl(path: Path, out: Path, fmt: str = "parquet") -> int:
    """Import `path` into the new corpus folder `out`; the number of cases. Refused, writing
    nothing, when `out` exists or a line is not the format above."""
    check_out(out)
    tables, digest = parse(path)
    case_frame, sentence_frame = frames(tables)
    manifest = {"importer": "jsonl", "input": path.name, "input_sha256": digest,
                "cases": case_frame.height, "sentences": sentence_frame.height,
                "rules": "fragbench.corpus.importers.jsonl (docs/corpus.md): variant A as given, B "
                         "sorted by sha256(case id NUL sentence id)"}
    write_corpus(out, case_frame, sentence_frame, fmt, manifest)
    return case_frame.height
