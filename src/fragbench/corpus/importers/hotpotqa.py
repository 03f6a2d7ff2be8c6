"""`fragbench import hotpotqa FILE --out DIR`: HotpotQA's distractor setting, as published.

The input is one JSON list of question objects, each with `_id`, `question`, `answer`
(optional here, unused), `type`, `level`, `supporting_facts` ([title, sentence index] pairs)
and `context` ([title, sentences] pairs). Anything else is refused in one line naming the file,
the question (its position and `_id`) and the value; nothing is written.

One case per question, in the file's order, source `Wikipedia`, license `CC-BY-SA-4.0`
(HotpotQA's):

- language: `--lang CODE` for every question, else detected from the question and its
  passage (`fragbench.corpus.importers.language`: py3langid among 31 languages by default; a
  question it is unsure of is refused, naming it, unless `--fallback-lang` is given; the
  counts and the lowest confidence in `import.json`). English data comes out `en`;

- facts: every sentence of every context paragraph, its text stripped of surrounding white
  space (HotpotQA's sentences keep the space that joined them); a sentence left blank is
  skipped and counted;
- fact ID (`fact_id`): `SLUG-HASH-INDEX`, where SLUG is the title in ASCII (accents dropped,
  every run of other characters an underscore, at most 40 characters, `p` if nothing is left),
  HASH the first 6 hex digits of the sha256 of the title's UTF-8 bytes (two titles that give
  one SLUG still differ) and INDEX the sentence's 0-based index in its paragraph, as
  `supporting_facts` counts: `Scott_Derrickson-a6f7cf-0`. Stable: it depends on the title and
  the index alone, never on the paragraph's position;
- conditions: the supporting facts, each once, in their order. One that names no sentence of
  the context (an index past its paragraph's end, a title not in the context, a blank
  sentence) is skipped and counted, not refused: the published files hold a few. A question
  left with no condition is skipped and counted;
- variant A: the given order (paragraphs as in `context`, sentences in order); variant B: the
  paragraphs in reverse order, each paragraph's sentences still in order (the same facts, the
  supporting paragraphs elsewhere in the passage);
- groups: `type` (bridge, comparison) and `level` (easy, medium, hard);
- paragraphs: not kept apart. A case's passage is its sentences in the variant's order, and
  the built-in chunkers group consecutive sentences, so a chunk may hold the end of one
  paragraph and the start of the next. Keeping them apart would change how every existing
  corpus is chunked (the chunker sees sentences, not paragraphs, and protocol 1.0's plan
  fixes that); it is said instead: `paragraphs.parquet` (or `.jsonl`) beside the corpus
  files gives each sentence's paragraph (case, fact_id, paragraph title, paragraph index in
  `context`, sentence index), to join on `case` and `fact_id`; `import.json` and the summary
  line say that chunks may cross paragraphs.

The file is read once, as a stream (`fragbench.corpus.importers.reading`: ijson, one question
in memory at a time, nesting deeper than 64 refused) and written a batch of cases at a time
(`fragbench.corpus.importers.write`): memory stays under 1 GiB for HotpotQA's 540 MB training
set (benchmarks/RESULTS.md), and the input's sha256 is computed as it is read.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from fragbench.corpus.columnar import NotUtf8
from fragbench.corpus.ids import CASE_ID, CASE_ID_RULE, shown
from fragbench.corpus.importers.language import Languages
from fragbench.corpus.importers.reading import Input, NotAList, NotJson, json_items
from fragbench.corpus.importers.write import PARAGRAPHS, CorpusWriter, check_out
from fragbench.errors import CorpusError

SOURCE = "Wikipedia"
LICENSE = "CC-BY-SA-4.0"
FORMAT_HELP = ("HotpotQA's distractor format is a JSON list of objects with _id, question, "
               "type, level, supporting_facts ([title, index] pairs) and context ([title, "
               "sentences] pairs) (docs/corpus.md)")


@attrs.frozen
class Imported:
    out: Path
    cases: int
    sentences: int
    skipped_questions: list[str]
    skipped_facts: list[dict[str, Any]]
    """Supporting facts that name no sentence: question _id, title, index."""
    blank_sentences: int
    languages: Languages
    paragraphs: Path
    """The file of each sentence's paragraph (module docstring)."""


def slug(title: str) -> str:
    ascii_title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    return re.sub(r"[^A-Za-z0-9]+", "_", ascii_title).strip("_")[:40].strip("_") or "p"


def fact_id(title: str, index: int) -> str:
    """The fact ID of sentence `index` (0-based) of the paragraph `title` (module docstring).

    >>> fact_id("Scott Derrickson", 0)
    'Scott_Derrickson-a6f7cf-0'
    """
    digest = hashlib.sha256(title.encode("utf-8")).hexdigest()[:6]
    return f"{slug(title)}-{digest}-{index}"


class _Question:
    """One question object, checked field by field; `fail` names it."""

    def __init__(self, path: Path, number: int, raw: Any) -> None:
        self.path, self.number = path, number
        self.where = f"question {number}"
        if not isinstance(raw, dict):
            raise self.fail(f"is {shown(raw)}, not a JSON object")
        self.raw = raw
        self.id = self.text("_id")
        self.where = f"question {number} ({self.id})"
        if not CASE_ID.fullmatch(self.id):
            raise self.fail(f"_id {shown(self.id)} {CASE_ID_RULE}")

    def fail(self, message: str) -> CorpusError:
        return CorpusError(f"{self.path}: {self.where}: {message}; {FORMAT_HELP}. Nothing was "
                           "written.")

    def get(self, key: str) -> Any:
        if key not in self.raw:
            raise self.fail(f"lacks {key}")
        return self.raw[key]

    def text(self, key: str) -> str:
        value = self.get(key)
        if not isinstance(value, str) or not value.strip():
            raise self.fail(f"{key} is {shown(value)}, not a non-empty string")
        return value

    def pairs(self, key: str) -> list[list[Any]]:
        value = self.get(key)
        if not isinstance(value, list) or not all(isinstance(p, list) and len(p) == 2
                                                  for p in value):
            bad = value if not isinstance(value, list) else next(
                p for p in value if not (isinstance(p, list) and len(p) == 2))
            raise self.fail(f"{key} holds {shown(bad)}, not a [title, ...] pair")
        return value


PARAGRAPHS_SAID = ("not kept apart: a passage is its sentences in the variant's order and "
                   "chunks of consecutive sentences may cross paragraph boundaries; each "
                   "sentence's paragraph (title, index in context, sentence index) is in {file}")


def _parse(source: Input, writer: CorpusWriter, languages: Languages) -> dict[str, Any]:
    """Each question checked and added to `writer`; what was skipped (module docstring)."""
    path = source.path
    seen: dict[str, int] = {}
    skipped_questions: list[str] = []
    skipped_facts: list[dict[str, Any]] = []
    blank = 0
    try:
        for number, item in enumerate(json_items(source), 1):
            q = _Question(path, number, item)
            if q.id in seen:
                raise q.fail(f"_id is also question {seen[q.id]}'s")
            seen[q.id] = number
            question, kind, level = q.text("question"), q.text("type"), q.text("level")
            if "answer" in q.raw and not isinstance(q.raw["answer"], str):
                raise q.fail(f"answer is {shown(q.raw['answer'])}, not a string")
            paragraphs: list[tuple[str, list[str]]] = []  # title, its fact IDs in order
            ids: dict[tuple[str, int], str] = {}
            texts: list[str] = []
            where: list[tuple[str, int, int]] = []  # each fact's title, paragraph, index
            titles: set[str] = set()
            for place, (title, lines) in enumerate(q.pairs("context")):
                if not isinstance(title, str) or not title.strip():
                    raise q.fail(f"context holds the title {shown(title)}, not a non-empty "
                                 "string")
                if title in titles:
                    raise q.fail(f"context holds the paragraph {shown(title)} twice")
                titles.add(title)
                if not isinstance(lines, list) or not all(isinstance(s, str) for s in lines):
                    raise q.fail(f"context paragraph {shown(title)} holds {shown(lines)}, not "
                                 "a list of sentences")
                order = []
                for index, sentence in enumerate(lines):
                    text = sentence.strip()
                    if not text:
                        blank += 1
                        continue
                    fid = fact_id(title, index)
                    ids[(title, index)] = fid
                    order.append(fid)
                    texts.append(text)
                    where.append((title, place, index))
                paragraphs.append((title, order))
            conditions: list[str] = []
            for title, index in q.pairs("supporting_facts"):
                if not isinstance(title, str) or not isinstance(index, int) \
                        or isinstance(index, bool):
                    raise q.fail(f"supporting_facts holds {shown([title, index])}, not a "
                                 "[title, sentence index] pair")
                fid = ids.get((title, index))
                if fid is None:
                    skipped_facts.append({"question": q.id, "title": title, "index": index})
                elif fid not in conditions:
                    conditions.append(fid)
            if not conditions:
                skipped_questions.append(q.id)
                continue
            if len(set(ids.values())) != len(ids):
                raise q.fail("two of its paragraphs' titles give one fact ID; rename one")
            variants = {"A": [f for _, order in paragraphs for f in order],
                        "B": [f for _, order in reversed(paragraphs) for f in order]}
            lang = languages.of(q.id, question, texts, q.fail)
            for fid, (title, place, index) in zip(ids.values(), where, strict=True):
                writer.add_paragraph(q.id, fid, title, place, index)
            writer.add(q.id, lang, LICENSE, SOURCE, question,
                       list(zip(ids.values(), texts, strict=True)), conditions, variants,
                       {"type": kind, "level": level})
    except NotUtf8:
        raise CorpusError(f"{path}: is not UTF-8 text; {FORMAT_HELP}. Nothing was "
                          "written.") from None
    except NotJson as exc:
        raise CorpusError(f"{path}: is not JSON ({exc}); {FORMAT_HELP}. Nothing was "
                          "written.") from None
    except NotAList as exc:
        raise CorpusError(f"{path}: holds {exc.kind}, not a non-empty list of questions; "
                          f"{FORMAT_HELP}. Nothing was written.") from None
    return {"skipped_questions": skipped_questions, "skipped_supporting_facts": skipped_facts,
            "blank_sentences": blank}


def import_hotpotqa(path: Path, out: Path, fmt: str = "parquet",
                    languages: Languages | None = None,
                    progress: Callable[[str], None] | None = None) -> Imported:
    """Import `path` into the new corpus folder `out` (module docstring); refuse, writing
    nothing, when `out` exists or the file is not HotpotQA's format. `languages`: how each
    question gets its language (default: detected)."""
    check_out(out)
    languages = languages or Languages()
    languages.check()
    with Input(path) as source, CorpusWriter(out, fmt, progress) as writer:
        report = _parse(source, writer, languages)
        digest = source.sha256()
        writer.flush()
        if not writer.cases:
            raise CorpusError(f"{path}: no question has a supporting fact that names a "
                              "sentence of its context; nothing to import. Nothing was "
                              "written.")
        paragraphs = out / f"{PARAGRAPHS}.{writer.names[0].rsplit('.', 1)[1]}"
        manifest = {
            "importer": "hotpotqa", "input": path.name,
            "cases": writer.cases, "sentences": writer.sentences,
            "rules": "fragbench.corpus.importers.hotpotqa (docs/corpus.md): fact ID "
                     "SLUG-HASH6-INDEX; conditions the supporting facts that name a sentence; "
                     "variant A as given, B paragraphs reversed; groups type and level",
            "input_sha256": digest, **report,
            "languages": languages.manifest(),
            "paragraphs": PARAGRAPHS_SAID.format(file=paragraphs.name),
        }
        writer.finish(manifest)
    return Imported(out=out, cases=writer.cases, sentences=writer.sentences,
                    skipped_questions=report["skipped_questions"],
                    skipped_facts=report["skipped_supporting_facts"],
                    blank_sentences=report["blank_sentences"], languages=languages,
                    paragraphs=paragraphs)
