"""Writing an imported corpus folder: all or nothing, in bounded memory.

`CorpusWriter` takes the cases one at a time, as the importer reads them, and every
`BATCH_CASES` cases turns what it holds into Polars frames, validates them (the checks
`load_corpus` makes, `fragbench.corpus.columnar.validate`, on whole cases: every check but a
case ID's uniqueness looks inside one case, and the writer keeps the set of case IDs for that
one) and writes them as Parquet part files into a temporary folder beside `--out`
(`.NAME.importing-RANDOM`). At the end the parts are streamed into the corpus files
(`scan_parquet(...).sink_parquet` or `sink_ndjson`: the same bytes as writing the whole frame
at once), beside `import.json`, synced, and the folder is renamed into place: a crash or a
refusal leaves no `--out` (and no folder the import created above it), and an existing
`--out` is refused before anything is read or written. Memory holds one batch, the case IDs
and what the importer counts, whatever the input's size (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import polars as pl

from fragbench.corpus import columnar as corpus_columnar
from fragbench.errors import CorpusError, UsageError
from fragbench.files import fsync_dir, make_dirs

IMPORT_MANIFEST = "import.json"
"""Beside the corpus files: what was imported (the input's name and sha256, the rules, what
was skipped, the languages). Not part of the corpus: the plan hashes only the cases and
sentences files."""
PARAGRAPHS = "paragraphs"
"""Beside the corpus files (`paragraphs.parquet` or `.jsonl`), when the input has paragraphs:
one row per sentence (case, fact_id, paragraph: its title, paragraph: its 0-based position in
the input, sentence: its index in the paragraph). Not part of the corpus, not hashed."""
PARAGRAPH_SCHEMA = {"case": pl.String, "fact_id": pl.String, "paragraph": pl.String,
                    "paragraph_index": pl.Int32, "sentence_index": pl.Int32}
CASE_ROW_GROUP = 10_000
"""Rows of cases.parquet to a row group. A case row holds every fact ID twice (variants A
and B): Polars' default row group (every row, up to 512² rows) made the sink hold the whole
cases table, 1 GiB for HotpotQA's training set; 10,000 cases are some 40 MiB. A corpus of
fewer cases is one row group either way: the same bytes as `write_parquet`."""
BATCH_CASES = 2000
"""Cases held in memory before they are validated and written as a part (about 80,000
HotpotQA sentences, some 60 MiB)."""


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


def frames(tables: Tables, variant_names: list[str] | None = None,
           group_keys: list[str] | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The two tables, in the columnar corpus's types; no `groups` column when no case has a
    group. `variant_names` and `group_keys` fix the structs' fields (and their order: every
    part of one import has the same schema); by default those the cases name."""
    cases, sentences = tables.cases, tables.sentences
    if variant_names is None:
        variant_names = list(dict.fromkeys(k for v in cases["variants"] for k in v))
    if group_keys is None:
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


class CorpusWriter:
    """A new corpus folder `out` in `fmt` (parquet or jsonl), written batch by batch (module
    docstring). Use as a context manager: leaving it without `finish` removes everything it
    wrote. `progress(line)` is told each part written."""

    def __init__(self, out: Path, fmt: str, progress: Callable[[str], None] | None = None,
                 batch: int | None = None) -> None:
        self.out, self.fmt = out, fmt
        self.names = corpus_columnar.FORMATS[fmt]
        self.batch = batch or BATCH_CASES
        self.progress = progress
        self.tables = Tables()
        self.paragraphs: dict[str, list[Any]] = {k: [] for k in PARAGRAPH_SCHEMA}
        self.cases = self.sentences = 0
        self._paragraph_rows = 0
        self._parts: dict[str, list[Path]] = {"cases": [], "sentences": [], PARAGRAPHS: []}
        self._ids: set[str] = set()
        self._variants: list[str] | None = None
        self._groups: list[str] | None = None
        self._temp: Path | None = None
        self._made: list[Path] = []
        """Folders above `out` that the import created (deepest first): removed on a
        refusal."""
        self._done = False

    def __enter__(self) -> CorpusWriter:
        check_out(self.out)
        folder = self.out.parent
        while not folder.is_dir() and not folder.exists():
            self._made.append(folder)
            folder = folder.parent
        make_dirs(self.out.parent)
        self._temp = self.out.parent / f".{self.out.name}.importing-{uuid.uuid4().hex[:12]}"
        self._temp.mkdir()
        (self._temp / "parts").mkdir()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._temp is not None and self._temp.exists():
            shutil.rmtree(self._temp)
        if not self._done:
            for folder in self._made:
                try:
                    folder.rmdir()
                except OSError:  # something else was put there meanwhile: left alone
                    break

    def add(self, case: str, lang: str, license_: str, source: str, question: str,
            facts: list[tuple[str, str]], conditions: list[str],
            variants: dict[str, list[str]], groups: dict[str, str]) -> None:
        """One whole case (`Tables.add`)."""
        if case in self._ids:  # the importers name the repeat first; this guards the corpus
            raise CorpusError(f"{self.out / self.names[0]}: case {case!r} would have two rows; "
                              "Nothing was written.")
        self._ids.add(case)
        if self._variants is None:
            self._variants, self._groups = list(variants), list(groups)
        self.tables.add(case, lang, license_, source, question, facts, conditions, variants,
                        groups)
        if len(self.tables) >= self.batch:
            self.flush()

    def add_paragraph(self, case: str, fact_id: str, title: str, paragraph: int,
                      sentence: int) -> None:
        """One sentence's paragraph (PARAGRAPHS); call it before the case's `add`."""
        for column, value in zip(PARAGRAPH_SCHEMA, (case, fact_id, title, paragraph, sentence),
                                 strict=True):
            self.paragraphs[column].append(value)

    def flush(self) -> None:
        """Validate and write what is held as one part; hold nothing."""
        if not self.tables:
            return
        assert self._temp is not None, "CorpusWriter used outside `with`"
        case_frame, sentence_frame = frames(self.tables, self._variants, self._groups)
        corpus_columnar.validate(self.out / self.names[0], self.out / self.names[1],
                                 case_frame, sentence_frame,
                                 (self.cases + 1, self.sentences + 1))
        number = len(self._parts["cases"])
        tables = [("cases", case_frame), ("sentences", sentence_frame)]
        if self.paragraphs["case"]:
            tables.append((PARAGRAPHS, pl.DataFrame(self.paragraphs, schema=PARAGRAPH_SCHEMA,
                                                    strict=True)))
        for name, frame in tables:
            path = self._temp / "parts" / f"{name}-{number:06d}.parquet"
            frame.write_parquet(path)
            self._parts[name].append(path)
        self.cases += case_frame.height
        self.sentences += sentence_frame.height
        self._paragraph_rows += len(self.paragraphs["case"])
        self.tables = Tables()
        self.paragraphs = {k: [] for k in PARAGRAPH_SCHEMA}
        if self.progress is not None:
            self.progress(f"{self.cases} cases, {self.sentences} sentences so far")

    def finish(self, manifest: dict[str, Any]) -> None:
        """The parts into the corpus files, `manifest` as import.json (with the counts), the
        folder renamed into place."""
        self.flush()
        assert self._temp is not None
        if not self.cases:
            raise CorpusError(f"{self.out / self.names[0]}: holds no case. Nothing was "
                              "written.")
        if self._paragraph_rows and self._paragraph_rows != self.sentences:
            raise AssertionError("every sentence has its paragraph, or none has")
        ext = self.names[0].rsplit(".", 1)[1]
        files = [(self._parts["cases"], self.names[0]),
                 (self._parts["sentences"], self.names[1])]
        if self._parts[PARAGRAPHS]:
            files.append((self._parts[PARAGRAPHS], f"{PARAGRAPHS}.{ext}"))
        for parts, name in files:
            scan = pl.scan_parquet(parts)
            if self.fmt == "parquet":
                scan.sink_parquet(self._temp / name, row_group_size=CASE_ROW_GROUP
                                  if name == self.names[0] else None)
            else:
                scan.sink_ndjson(self._temp / name)
        shutil.rmtree(self._temp / "parts")
        (self._temp / IMPORT_MANIFEST).write_text(
            json.dumps(manifest, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        for path in self._temp.iterdir():
            with path.open("rb") as handle:
                os.fsync(handle.fileno())
        fsync_dir(self._temp)
        check_out(self.out)  # created meanwhile: refused, not replaced
        os.rename(self._temp, self.out)
        self._done = True
        fsync_dir(self.out.parent)
