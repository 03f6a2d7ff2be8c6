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
`license` (default `unspecified`) and `lang` are optional; any other key is refused.
A line's `lang` is its case's language; a line without one gets `--lang CODE` when given,
else the language detected from its question and sentences
(`fragbench.corpus.importers.language`; a line the detector is unsure of is refused, naming
it, unless `--fallback-lang` is given). There is no silent `en`: what each case got is
counted in `import.json` and on the summary line. A case's sentences are one passage, in the
given order: the format has no paragraphs.
Variant A is the given order; variant B the sentences sorted by the sha256 of
`CASE_ID + "\\0" + SENTENCE_ID` (a fixed shuffle that depends on the IDs alone). A fault is
refused in one line naming the file, the line and the value; nothing is written. Lines end
at "\\n" only (a "\\r" before it is dropped): U+2028 and the other characters
`str.splitlines` breaks at may stand raw in a JSON string. The file is read a line at a time
and written a batch of cases at a time (`fragbench.corpus.importers.write`), its sha256
computed as it is read: memory does not grow with the file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import attrs

from fragbench.corpus.columnar import NotUtf8, group_key_problem
from fragbench.corpus.ids import CASE_ID, CASE_ID_RULE, FACT_ID, FACT_ID_RULE, shown
from fragbench.corpus.importers.language import Languages
from fragbench.corpus.importers.reading import Input, lines
from fragbench.corpus.importers.write import CorpusWriter, check_out
from fragbench.errors import CorpusError

REQUIRED = ("id", "question", "sentences", "conditions")
OPTIONAL = {"groups": None, "source": "the document", "license": "unspecified", "lang": None}
FORMAT_HELP = ("one JSON object a line with id, question, sentences ([{\"id\", \"text\"}]), "
               "conditions and optionally groups, source, license, lang (docs/corpus.md)")


def b_order(case_id: str, ids: list[str]) -> list[str]:
    """Variant B of a generic import (module docstring)."""
    def key(fid: str) -> str:
        return hashlib.sha256(f"{case_id}\0{fid}".encode()).hexdigest()
    return sorted(ids, key=key)


@attrs.frozen
class Imported:
    out: Path
    cases: int
    sentences: int
    languages: Languages


def _parse(source: Input, writer: CorpusWriter, languages: Languages) -> None:
    """Each line checked and added to `writer` (module docstring)."""
    path = source.path
    seen: dict[str, int] = {}
    keys: list[str] | None = None
    for number, line in enumerate(lines(source), 1):
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
            if key == "lang" and key not in record:
                continue  # given (--lang) or detected below
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
        texts = [item["text"] for item in items]
        lang = languages.of(case_id, values["question"], texts, fail, own=values["lang"])
        writer.add(case_id, lang, values["license"], values["source"], values["question"],
                   [(item["id"], item["text"]) for item in items], conditions,
                   {"A": ids, "B": b_order(case_id, ids)}, groups)


def import_jsonl(path: Path, out: Path, fmt: str = "parquet",
                 languages: Languages | None = None,
                 progress: Callable[[str], None] | None = None) -> Imported:
    """Import `path` into the new corpus folder `out`. Refused, writing nothing, when `out`
    exists or a line is not the format above. `languages`: the language of a line without
    `lang` (default: detected)."""
    check_out(out)
    languages = languages or Languages()
    languages.check()
    with Input(path) as source, CorpusWriter(out, fmt, progress) as writer:
        try:
            _parse(source, writer, languages)
        except NotUtf8 as exc:
            raise CorpusError(f"{path}: {exc}; {FORMAT_HELP}. Nothing was written.") from None
        digest = source.sha256()
        writer.flush()
        if not writer.cases:
            raise CorpusError(f"{path}: holds no case; {FORMAT_HELP}.")
        manifest = {"importer": "jsonl", "input": path.name, "input_sha256": digest,
                    "cases": writer.cases, "sentences": writer.sentences,
                    "rules": "fragbench.corpus.importers.jsonl (docs/corpus.md): variant A as "
                             "given, B sorted by sha256(case id NUL sentence id)",
                    "languages": languages.manifest(),
                    "paragraphs": "none: a line's sentences are one passage, in the given "
                                  "order"}
        writer.finish(manifest)
    return Imported(out=out, cases=writer.cases, sentences=writer.sentences,
                    languages=languages)
