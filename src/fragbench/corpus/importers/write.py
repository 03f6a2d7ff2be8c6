"""Writing an imported corpus folder: all or nothing.

The tables are validated in memory first (the same checks `load_corpus` makes), then written
into a temporary folder beside `--out` (`.NAME.importing-RANDOM`), synced, and renamed into
place: a crash or a refusal leaves no `--out`, and an existing `--out` is refused before
anything is read or written.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import attrs
import polars as pl

from fragbench.corpus import columnar as corpus_columnar
from fragbench.errors import UsageError
from fragbench.files import fsync_dir, make_dirs

IMPORT_MANIFEST = "import.json"
"""Beside the corpus files: what was imported (the input's name and sha256, the rules, what
was skipped). Not part of the corpus: the plan hashes only the cases and sentences files."""


def check_format(fmt: str) -> str:
    if fmt not in corpus_columnar.FORMATS:
        raise UsageError(f"--format {fmt}: the formats are "
                         f"{' and '.join(corpus_columnar.FORMATS)}.")
    return fmt


def check_out(out: Path) -> None:
    """Refuse an --out that exists (a folder, a file, a dangling link): nothing is replaced."""
    if out.exists() or out.is_symlink():
        raise UsageError(f"--out {out}: already exists; an import writes a new folder, never "
                         "over one: choose another --out or remove that one first.")


def _columns(names: tuple[str, ...]) -> dict[str, list[Any]]:
    return {name: [] for name in names}


@attrs.define
class Tables:
    """An import's two tables as columns of Python values, case by case (one language a
    case: both importers write one), in the columnar corpus's column names."""

    cases: dict[str, list[Any]] = attrs.field(factory=lambda: _columns(
        (*corpus_columnar.CASE_COLUMNS, *corpus_columnar.OPTIONAL_CASE_COLUMNS)))
    sentences: dict[str, list[Any]] = attrs.field(
        factory=lambda: _columns(corpus_columnar.SENTENCE_COLUMNS))

    def add(self, case: str, lang: str, license_: str, source: str, question: str,
            facts: list[tuple[str, str]], conditions: list[str],
            variants: dict[str, list[str]], groups: dict[str, str]) -> None:
        """One case: its facts (fact ID, text) in file order."""
        self.sentences["case"].extend([case] * len(facts))
        self.sentences["lang"].extend([lang] * len(facts))
        self.sentences["fact_id"].extend(fid for fid, _ in facts)
        self.sentences["text"].extend(text for _, text in facts)
        for column, value in (("case", case), ("lang", lang), ("license", license_),
                              ("source", source), ("question", question),
                              ("conditions", conditions), ("variants", variants),
                              ("groups", groups)):
            self.cases[column].append(value)

    def __len__(self) -> int:
        return len(self.cases["case"])


def frames(tables: Tables) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The two tables, in the columnar corpus's types; no `groups` column when no case has a
    group."""
    cases, sentences = tables.cases, tables.sentences
    variant_names = list(dict.fromkeys(k for v in cases["variants"] for k in v))
    group_keys = list(dict.fromkeys(k for g in cases["groups"] for k in g))
    ids = pl.List(pl.String)
    schema: dict[str, Any] = {c: pl.String for c in ("case", "lang", "license", "source",
                                                      "question")}
    schema |= {"conditions": ids, "variants": pl.Struct({n: ids for n in variant_names})}
    if group_keys:
        schema["groups"] = pl.Struct({k: pl.String for k in group_keys})
    case_frame = pl.DataFrame({k: cases[k] for k in schema}, schema=schema, strict=True)
    sentence_frame = pl.DataFrame(sentences, schema=dict.fromkeys(
        corpus_columnar.SENTENCE_COLUMNS, pl.String), strict=True)
    return case_frame, sentence_frame


def write_corpus(out: Path, cases: pl.DataFrame, sentences: pl.DataFrame, fmt: str,
                 manifest: dict[str, Any]) -> None:
    """Validate, then write `out` as a columnar corpus folder in `fmt` (parquet or jsonl)."""
    check_out(out)
    names = corpus_columnar.FORMATS[fmt]
    corpus_columnar.validate(out / names[0], out / names[1], cases, sentences)
    make_dirs(out.parent)
    temp = out.parent / f".{out.name}.importing-{uuid.uuid4().hex[:12]}"
    temp.mkdir()
    try:
        for frame, name in ((cases, names[0]), (sentences, names[1])):
            path = temp / name
            if fmt == "parquet":
                frame.write_parquet(path)
            else:
                frame.write_ndjson(path)
        (temp / IMPORT_MANIFEST).write_text(
            json.dumps(manifest, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        for path in temp.iterdir():
            with path.open("rb") as handle:
                os.fsync(handle.fileno())
        fsync_dir(temp)
        check_out(out)  # created meanwhile: refused, not replaced
        os.rename(temp, out)
        fsync_dir(out.parent)
    finally:
        if temp.exists():
            shutil.rmtree(temp)
