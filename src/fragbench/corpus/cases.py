"""Corpus files: one TOML file per case, or a columnar folder of thousands
(`fragbench.corpus.columnar`), validated at the boundary (corpus/README.md, docs/corpus.md).

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

from fragbench.corpus import columnar as corpus_columnar
from fragbench.corpus.ids import CASE_ID, CASE_ID_RULE, FACT_ID, FACT_ID_RULE, shown
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
    """The case's TOML file, or the columnar corpus folder that holds it."""
    sha256: str
    """Of the TOML file's bytes, as read; for a columnar case, of its folder's `files` (the
    sha256 of the lines `NAME SHA256`, one a file)."""
    files: tuple[tuple[Path, str], ...] = ()
    """The files read for this case with their sha256 (the frozen plan hashes each once);
    empty means `((path, sha256),)`, a TOML case's."""
    groups: dict[str, str] = attrs.field(factory=dict)
    """Group key -> value (columnar corpora only, such as HotpotQA's type and level)."""
    frames: corpus_columnar.Frames | None = attrs.field(default=None, eq=False, repr=False)
    """A columnar case's folder's tables, shared by all its cases: the frame paths below
    read them instead of looping over the sentences in Python."""

    @property
    def fact_ids(self) -> tuple[str, ...]:
        return tuple(next(iter(self.langs.values())).facts)

    @property
    def read_files(self) -> tuple[tuple[Path, str], ...]:
        return self.files or ((self.path, self.sha256),)


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
    if not CASE_ID.fullmatch(case_id):  # the rules of every corpus format (corpus_ids)
        raise _fail(path, f"id {shown(case_id)} {CASE_ID_RULE}")
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
        bad = next((fid for fid in facts if not FACT_ID.fullmatch(fid)), None)
        if bad is not None:
            raise _fail(path, f"[{lang}] fact ID {shown(bad)} {FACT_ID_RULE}")
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
                raise CorpusError(f"{path}: holds no .toml case file and no columnar corpus "
                                  "(cases.parquet and sentences.parquet, or the same as .jsonl); "
                                  "point to a corpus folder (docs/corpus.md).")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise CorpusError(f"{path}: no such file or folder; check the corpus path.")
    return files


def load_columnar(folder: Path, fmt: str) -> list[Case]:
    """Every case of a columnar corpus folder, validated (`fragbench.corpus.columnar`), in the
    order of its cases file."""
    frames, first, files = corpus_columnar.load_folder(folder, fmt)
    manifest = "".join(f"{p.name} {digest}\n" for p, digest in files)
    digest = hashlib.sha256(manifest.encode("utf-8")).hexdigest()
    facts = (frames.facts.group_by("case", "lang", maintain_order=True)
             .agg("fact_id", "text"))
    texts: dict[str, dict[str, dict[str, str]]] = {}
    for case_id, lang, ids, sentences in facts.iter_rows():
        texts.setdefault(case_id, {})[lang] = dict(zip(ids, sentences, strict=True))
    langs: dict[str, dict[str, Passage]] = {}
    for case_id, lang, question, source, _ in frames.questions.iter_rows():
        langs.setdefault(case_id, {})[lang] = Passage(source=source, question=question,
                                                      facts=texts[case_id][lang])
    groups = {row[0]: dict(zip(frames.groups.columns[1:], row[1:], strict=True))
              for row in frames.groups.iter_rows()}
    return [
        Case(id=case_id, license=license_, conditions=tuple(conditions),
             variants={name: tuple(order) for name, order in variants.items()
                       if order is not None},
             langs=langs[case_id], path=folder, sha256=digest, files=files,
             groups=groups[case_id], frames=frames)
        for case_id, license_, conditions, variants in first.iter_rows()
    ]


def load_corpus(paths: list[Path]) -> list[Case]:
    """Every case of the given files or folders, validated, in file order; IDs must be unique.
    A folder holding a columnar corpus (docs/corpus.md) gives its cases; any other folder its
    .toml files."""
    cases: list[Case] = []
    for path in paths:
        fmt = corpus_columnar.corpus_format(path) if path.is_dir() else None
        if fmt is not None:
            if any(path.glob("*.toml")):
                raise CorpusError(f"{path}: holds both .toml case files and a columnar corpus; "
                                  "keep them in separate folders.")
            cases.extend(load_columnar(path, fmt))
        else:
            cases.extend(load_case(f) for f in case_files([path]))
    seen: dict[str, Path] = {}
    for case in cases:
        if case.id in seen:
            raise _fail(case.path, f"case id {case.id!r} is also used by {seen[case.id]}")
        seen[case.id] = case.path
    return cases


PASSAGE_SEPARATOR = " "
"""A passage's text is its sentences in passage order joined by this: the text that span
chunkers cut and that character offsets (`start`, `end`) count in."""


_FACT_TYPES = {"case": pl.String, "lang": pl.String, "fact_id": pl.String, "text": pl.String,
               "is_condition": pl.Boolean, "_ci": pl.Int64, "_li": pl.Int64, "_fi": pl.Int64}
_ORDER_TYPES = {"case": pl.String, "variant": pl.String, "position": pl.Int32,
                "fact_id": pl.String, "_ci": pl.Int64, "_vi": pl.Int32}
_QUESTION_TYPES = {"case": pl.String, "lang": pl.String, "question": pl.String,
                   "_ci": pl.Int64, "_li": pl.Int64}


def _long_frames(cases: list[Case], langs: list[str] | None
                 ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The facts, variant orders and questions of `cases`, with sort keys: _ci (the case's
    index in `cases`), _li (the language's in the case), _fi (the fact's in the language), _vi
    (the variant's in the case). A TOML case's rows are built here; a columnar case's come
    from its folder's frames by one join per folder, never a loop over its sentences."""
    fact_rows, order_rows, question_rows = [], [], []
    folders: dict[int, tuple[corpus_columnar.Frames, list[tuple[str, int]]]] = {}
    for ci, case in enumerate(cases):
        if case.frames is not None:
            folders.setdefault(id(case.frames), (case.frames, []))[1].append((case.id, ci))
            continue
        conditions = set(case.conditions)
        for li, (lang, passage) in enumerate(case.langs.items()):
            question_rows.append((case.id, lang, passage.question, ci, li))
            fact_rows.extend((case.id, lang, fid, text, fid in conditions, ci, li, fi)
                             for fi, (fid, text) in enumerate(passage.facts.items()))
        for vi, (variant, order) in enumerate(case.variants.items()):
            order_rows.extend((case.id, variant, pos, fid, ci, vi)
                              for pos, fid in enumerate(order))
    facts = [pl.DataFrame(fact_rows, schema=_FACT_TYPES, orient="row")]
    orders = [pl.DataFrame(order_rows, schema=_ORDER_TYPES, orient="row")]
    questions = [pl.DataFrame(question_rows, schema=_QUESTION_TYPES, orient="row")]
    for frames, members in folders.values():
        index = pl.DataFrame(members, schema={"case": pl.String, "_ci": pl.Int64},
                             orient="row")
        facts.append(frames.facts.join(index, on="case").select(list(_FACT_TYPES))
                     .cast(_FACT_TYPES))  # type: ignore[arg-type]
        orders.append(frames.orders.join(index, on="case").select(list(_ORDER_TYPES))
                      .cast(_ORDER_TYPES))  # type: ignore[arg-type]
        questions.append(frames.questions.join(index, on="case").select(list(_QUESTION_TYPES))
                         .cast(_QUESTION_TYPES))  # type: ignore[arg-type]
    wanted = pl.lit(True) if langs is None else pl.col("lang").is_in(langs)
    return (pl.concat(facts).filter(wanted), pl.concat(orders),
            pl.concat(questions).filter(wanted))


def sentences_frame(cases: list[Case], langs: list[str] | None = None) -> pl.DataFrame:
    """One row per sentence of every case x language x variant, in passage order.

    Columns: case, lang, variant, position (0-based), fact_id, text, start, end. `start` and
    `end` (end exclusive) are the sentence's character offsets (Unicode code points, as Python
    and Polars count them) in the passage's text, its sentences joined by PASSAGE_SEPARATOR:
    the coordinates a span chunker returns its chunks in. A chunker that groups whole
    sentences may ignore them. Rows come case by case (in the order of `cases`), then language
    (the case's order), variant (the case's order) and position.
    """
    facts, orders, _ = _long_frames(cases, langs)
    step = pl.col("text").str.len_chars().cast(pl.Int32) + len(PASSAGE_SEPARATOR)
    return (
        orders.join(facts.drop("_ci"), on=["case", "fact_id"])
        .sort("_ci", "_li", "_vi", "position")
        .with_columns((step.cum_sum().over("case", "lang", "variant") - step).alias("start"))
        .with_columns((pl.col("start") + pl.col("text").str.len_chars()).cast(pl.Int32)
                      .alias("end"), pl.col("start").cast(pl.Int32))
        .select("case", "lang", "variant", "position", "fact_id", "text", "start", "end")
    )


def questions_frame(cases: list[Case], langs: list[str] | None = None) -> pl.DataFrame:
    """One row per case x language: case, lang, question."""
    _, _, questions = _long_frames(cases, langs)
    return questions.sort("_ci", "_li").select("case", "lang", "question")


def facts_frame(cases: list[Case], langs: list[str] | None = None) -> pl.DataFrame:
    """One row per fact of every case x language: case, lang, fact_id, text, is_condition."""
    facts, _, _ = _long_frames(cases, langs)
    return facts.sort("_ci", "_li", "_fi").select("case", "lang", "fact_id", "text",
                                                  "is_condition")


def cases_frame(cases: list[Case]) -> pl.DataFrame | None:
    """The cases' groups: `case`, then one String column per group key; None when no case has
    a group. What a series records as cases.parquet, for measures and pages that split by
    group to join on `case`.

    Corpora with different group keys are merged, never dropped: the columns are every key
    of any case, in the order first seen (case by case, each case's keys in its order), and a
    case without a key (a TOML case, or a folder that has other keys) holds null there."""
    keys = list(dict.fromkeys(k for c in cases for k in c.groups))
    if not keys:
        return None
    return pl.DataFrame([(c.id, *(c.groups.get(k) for k in keys)) for c in cases],
                        schema={"case": pl.String, **dict.fromkeys(keys, pl.String)},
                        orient="row")
