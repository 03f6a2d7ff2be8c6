"""Corpus files: one TOML file per case, validated at the boundary (corpus/README.md).

Everything after `load_corpus` trusts the records: a malformed file stops here with one sentence
naming the file and the fault, before anything runs or is written.
"""

from __future__ import annotations

import codecs
import hashlib
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import polars as pl

from fragbench.errors import CorpusError

_TOP_KEYS = {"id", "license", "conditions", "variants"}


@attrs.frozen
class Passage:
    """One language of a case."""

    source: str
    """The source name given to the model."""
    question: str
    facts: dict[str, str]
    """Fact ID -> its one sentence."""


@attrs.frozen
class Case:
    """One teaching case: the same facts in every language, shown in several orders."""

    id: str
    license: str
    conditions: tuple[str, ...]
    """Fact IDs that carry the case's conditions."""
    variants: dict[str, tuple[str, ...]]
    """Variant name -> a permutation of all fact IDs (passage order)."""
    langs: dict[str, Passage]
    path: Path
    sha256: str
    """Of the file's bytes, as read."""

    @property
    def fact_ids(self) -> tuple[str, ...]:
        return tuple(next(iter(self.langs.values())).facts)


def _fail(path: Path, message: str) -> CorpusError:
    return CorpusError(f"{path}: {message}; fix the corpus file and run again.")


def _string(path: Path, where: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _fail(path, f"{where} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise _fail(path, f"{where} is empty")
    return value


def _id_list(path: Path, where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise _fail(path, f"{where} must be a non-empty list of fact IDs")
    ids = tuple(_string(path, where, item) for item in value)
    repeated = sorted(i for i, n in Counter(ids).items() if n > 1)
    if repeated:
        raise _fail(path, f"{where} repeats {', '.join(repeated)}")
    return ids


def load_case(path: Path) -> Case:
    """Read and validate one case file."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise _fail(path, f"cannot be read ({exc.strerror})") from None
    if raw.startswith(codecs.BOM_UTF8):
        # tomllib reads a BOM as a stray character ("Invalid statement (line 1, col 1)"); the
        # frozen hash is of the bytes, so the file is not silently read another way either.
        raise _fail(path, "starts with a UTF-8 byte-order mark (BOM); save it as UTF-8 without "
                    "BOM")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise _fail(path, "is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise _fail(path, f"is not valid TOML ({exc})") from None

    missing = sorted(_TOP_KEYS - data.keys())
    if missing:
        raise _fail(path, f"lacks the key(s) {', '.join(missing)}")
    case_id = _string(path, "id", data["id"])
    license_ = _string(path, "license", data["license"])

    langs: dict[str, Passage] = {}
    for lang, table in data.items():
        if lang in _TOP_KEYS or not isinstance(table, dict):
            continue
        for key in ("source", "question", "facts"):
            if key not in table:
                raise _fail(path, f"[{lang}] lacks the key {key}")
        facts = table["facts"]
        if not isinstance(facts, dict) or not facts:
            raise _fail(path, f"[{lang}] facts must be a table of fact ID = sentence")
        langs[lang] = Passage(
            source=_string(path, f"[{lang}] source", table["source"]),
            question=_string(path, f"[{lang}] question", table["question"]),
            facts={fid: _string(path, f"[{lang}] facts.{fid}", s) for fid, s in facts.items()},
        )
    if not langs:
        raise _fail(path, "has no language table such as [en] with source, question and facts")

    first_lang, first = next(iter(langs.items()))
    fact_ids = set(first.facts)
    for lang, passage in langs.items():
        if set(passage.facts) != fact_ids:
            absent = sorted(fact_ids - set(passage.facts))
            extra = sorted(set(passage.facts) - fact_ids)
            detail = (
                f"lacks {', '.join(absent)} that [{first_lang}] has"
                if absent
                else f"has {', '.join(extra)} that [{first_lang}] lacks"
            )
            raise _fail(path, f"[{lang}] {detail}")

    conditions = _id_list(path, "conditions", data["conditions"])
    unknown = sorted(set(conditions) - fact_ids)
    if unknown:
        raise _fail(path, f"conditions names {', '.join(unknown)}, which is no fact of the case")

    variants_raw = data["variants"]
    if not isinstance(variants_raw, dict) or not variants_raw:
        raise _fail(path, "variants must be a table such as { A = [...], B = [...] }")
    variants: dict[str, tuple[str, ...]] = {}
    for name, order in variants_raw.items():
        ids = _id_list(path, f"variant {name}", order)
        if set(ids) != fact_ids or len(ids) != len(fact_ids):
            raise _fail(
                path,
                f"variant {name} is not a permutation of the fact IDs "
                f"{', '.join(sorted(fact_ids))}",
            )
        variants[name] = ids

    return Case(
        id=case_id,
        license=license_,
        conditions=conditions,
        variants=variants,
        langs=langs,
        path=path,
        sha256=hashlib.sha256(raw).hexdigest(),
    )


def case_files(paths: list[Path]) -> list[Path]:
    """The case files named or contained (non-recursively, sorted) in `paths`."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(path.glob("*.toml"))
            if not found:
                raise CorpusError(f"{path}: holds no .toml case file; point to a corpus folder.")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise CorpusError(f"{path}: no such file or folder; check the corpus path.")
    return files


def load_corpus(paths: list[Path]) -> list[Case]:
    """Every case of the given files or folders, validated, in file order; IDs must be unique."""
    cases = [load_case(f) for f in case_files(paths)]
    seen: dict[str, Path] = {}
    for case in cases:
        if case.id in seen:
            raise _fail(case.path, f"case id {case.id!r} is also used by {seen[case.id]}")
        seen[case.id] = case.path
    return cases


PASSAGE_SEPARATOR = " "
"""A passage's text is its sentences in passage order joined by this: the text that span
chunkers cut and that character offsets (`start`, `end`) count in."""


def sentences_frame(cases: list[Case], langs: list[str] | None = None) -> pl.DataFrame:
    """One row per sentence of every case x language x variant, in passage order.

    Columns: case, lang, variant, position (0-based), fact_id, text, start, end. `start` and
    `end` (end exclusive) are the sentence's character offsets (Unicode code points, as Python
    and Polars count them) in the passage's text, its sentences joined by PASSAGE_SEPARATOR:
    the coordinates a span chunker returns its chunks in. A chunker that groups whole
    sentences may ignore them.
    """
    rows = []
    for case in cases:
        for lang, passage in case.langs.items():
            if langs is not None and lang not in langs:
                continue
            for variant, order in case.variants.items():
                start = 0
                for pos, fid in enumerate(order):
                    text = passage.facts[fid]
                    rows.append((case.id, lang, variant, pos, fid, text, start,
                                 start + len(text)))
                    start += len(text) + len(PASSAGE_SEPARATOR)
    return pl.DataFrame(
        rows,
        schema={
            "case": pl.String,
            "lang": pl.String,
            "variant": pl.String,
            "position": pl.Int32,
            "fact_id": pl.String,
            "text": pl.String,
            "start": pl.Int32,
            "end": pl.Int32,
        },
        orient="row",
    )


def questions_frame(cases: list[Case], langs: list[str] | None = None) -> pl.DataFrame:
    """One row per case x language: case, lang, question."""
    rows = [
        (case.id, lang, passage.question)
        for case in cases
        for lang, passage in case.langs.items()
        if langs is None or lang in langs
    ]
    return pl.DataFrame(
        rows, schema={"case": pl.String, "lang": pl.String, "question": pl.String}, orient="row"
    )


def facts_frame(cases: list[Case], langs: list[str] | None = None) -> pl.DataFrame:
    """One row per fact of every case x language: case, lang, fact_id, text, is_condition."""
    rows = [
        (case.id, lang, fid, text, fid in case.conditions)
        for case in cases
        for lang, passage in case.langs.items()
        if langs is None or lang in langs
        for fid, text in passage.facts.items()
    ]
    return pl.DataFrame(
        rows,
        schema={"case": pl.String, "lang": pl.String, "fact_id": pl.String, "text": pl.String,
                "is_condition": pl.Boolean},
        orient="row",
    )
