"""What a chunker or scorer returns is held to the kit's promises by the core too: `freeze`,
`plan`, `run` and `retrieve` refuse NaN, inf or null scores and undeclared overlap in one line
naming the plugin, the chunk and the promise, before anything is written or spent; and the
retrieval table's `chunk`, `start` and `end` are Int32 whatever integer type a chunker returns.

Each plugin is installed for the test as a third-party one is: a module and a dist-info folder
(distribution `dist` 0.1, a `fragbench` entry point) on sys.path, found by the real registry, and
the real CLI run in process. The registry is loaded afresh before and after each test, so no
other test sees these plugins.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import polars as pl
import pytest
from support.cli import error_lines, run_cli

from fragbench.plugins import registry

Install = Callable[[str], None]

PLUGINS = '''
import polars as pl

from fragbench.builtin.chunkers import SentenceGroups
from fragbench.builtin.scorers import SqrtLexical
from fragbench.hookspecs import hookimpl
from fragbench.testing.samples import CharacterWindows
from fragbench_sliding_window import SlidingWindow

PASSAGE = ["case", "lang", "variant", "chunk_size"]


class PassageMax(SqrtLexical):
    """Each score divided by its passage's best: 0/0 = NaN where no chunk holds a term."""

    name = "passage-max"
    api_version = "1.0"

    def score(self, chunks, questions):
        scored = super().score(chunks, questions)
        return scored.with_columns(pl.col("score") / pl.col("score").max().over(PASSAGE))


class LogScore(SqrtLexical):
    """log(score): -inf for a chunk that holds no term of the question."""

    name = "log-score"
    api_version = "1.0"

    def score(self, chunks, questions):
        return super().score(chunks, questions).with_columns(pl.col("score").log())


class NullScore(SqrtLexical):
    name = "null-score"
    api_version = "1.0"

    def score(self, chunks, questions):
        scored = super().score(chunks, questions)
        return scored.with_columns(pl.when(pl.col("chunk") > 0).then(pl.col("score"))
                                   .alias("score"))


class Overlapping(SlidingWindow):
    """Sliding windows that forget to say so."""

    name = "overlapping"
    api_version = "1.0"
    overlap = False


class Wide(SentenceGroups):
    """Sentence groups numbered as Int64, as a chunker built with Python ints often is."""

    name = "wide"
    api_version = "1.0"

    def chunk(self, sentences, size):
        return super().chunk(sentences, size).with_columns(pl.col("chunk").cast(pl.Int64))


class WideSpans(CharacterWindows):
    """The kit's character windows, every integer Int64 (what int_ranges gives)."""

    name = "wide-spans"

    def chunk(self, sentences, size):
        return super().chunk(sentences, size).with_columns(
            pl.col("chunk", "start", "end").cast(pl.Int64))


class WholeWindows(SlidingWindow):
    """Sliding windows of exactly `size` sentences: a passage shorter than the window gets no
    chunk at all (SlidingWindow gives it one chunk of all its sentences)."""

    name = "whole-windows"
    api_version = "1.0"

    def chunk(self, sentences, size):
        return super().chunk(sentences, size).filter(pl.col("fact_ids").list.len() == size)


class LosesTheLast(SentenceGroups):
    """Declares overlap, then drops each passage's last group: its sentences are in no chunk."""

    name = "loses-the-last"
    api_version = "1.0"
    overlap = True

    def chunk(self, sentences, size):
        chunks = super().chunk(sentences, size)
        last = pl.col("chunk").max().over("case", "lang", "variant")
        return chunks.filter((pl.col("chunk") < last) | (last == 0))


class AllZero(SentenceGroups):
    """Numbers every chunk 0."""

    name = "all-zero"
    api_version = "1.0"

    def chunk(self, sentences, size):
        return super().chunk(sentences, size).with_columns(pl.lit(0, pl.Int32).alias("chunk"))


class Huge(Wide):
    """Numbers its chunks from 2**31: beyond the table's Int32."""

    name = "huge"

    def chunk(self, sentences, size):
        return super().chunk(sentences, size).with_columns(pl.col("chunk") + 2**31)


@hookimpl
def register_chunkers(register):
    for chunker in (Overlapping(), Wide(), WideSpans(), Huge(), WholeWindows(), LosesTheLast(),
                    AllZero()):
        register(chunker)


@hookimpl
def register_scorers(register):
    for scorer in (PassageMax(), LogScore(), NullScore()):
        register(scorer)
'''

PARKING = '''id = "parking"
license = "CC-BY-4.0"
conditions = ["P1"]
variants = { A = ["P1", "P2", "P3"], B = ["P3", "P1", "P2"] }

[en]
source = "Ravelle Print — Deliveries"
question = "Is there parking for bicycles?"
facts.P1 = "Deliveries arrive on Mondays."
facts.P2 = "Invoices are sent by email."
facts.P3 = "Boxes are collected within a week."

[fr]
source = "Imprimerie Ravelle — Livraisons"
question = "Y a-t-il un parking pour les vélos ?"
facts.P1 = "Les livraisons arrivent le lundi."
facts.P2 = "Les factures sont envoyées par courriel."
facts.P3 = "Les cartons sont repris sous une semaine."
'''
"""A case in which no sentence holds a term of its question: every chunk scores zero, and a
scorer that divides by its passage's best score gives 0/0 (what the issue saw written)."""

LOBBY = '''id = "lobby"
license = "CC-BY-4.0"
conditions = ["L1"]
variants = { A = ["L1"], B = ["L1"] }

[en]
source = "Ravelle Print — Lobby"
question = "When is the lobby open?"
facts.L1 = "The lobby is open from eight."

[fr]
source = "Imprimerie Ravelle — Accueil"
question = "Quand l'accueil est-il ouvert ?"
facts.L1 = "L'accueil est ouvert dès huit heures."
'''
"""A case of one sentence: a passage shorter than the experiment's chunk sizes (2 and 3)."""


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The plugins above, installed as distribution `dist` 0.1 and found by the registry."""
    site = tmp_path / "site"
    dist = site / "dist-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: dist\nVersion: 0.1\n",
                                   encoding="utf-8")
    (dist / "entry_points.txt").write_text("[fragbench]\noutputs = fragbench_outputs_kit\n",
                                           encoding="utf-8")
    (site / "fragbench_outputs_kit.py").write_text(PLUGINS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv("FRAGBENCH_LOAD_PLUGINS", raising=False)
    registry.cache_clear()
    yield
    registry.cache_clear()
    sys.modules.pop("fragbench_outputs_kit", None)


def use(experiment: Path, *, scorer: str | None = None, chunker: str | None = None,
        parking: bool = False, lobby: bool = False) -> bytes:
    """Edit the copy's config as a user would; returns its frozen plan's bytes as they are."""
    config = experiment / "config.toml"
    text = config.read_text(encoding="utf-8")
    if scorer:
        text = text.replace('scorer = "sqrt-lexical"', f'scorer = "{scorer}"')
    if chunker:
        text = text.replace('chunker = "sentence-groups"', f'chunker = "{chunker}"')
    for wanted, name, case in ((parking, "parking", PARKING), (lobby, "lobby", LOBBY)):
        if wanted:
            (experiment.parent.parent / "corpus" / "0.2" / f"{name}.toml").write_text(
                case, encoding="utf-8")
            text = text.replace('"../../corpus/0.2/hosting.toml"',
                                f'"../../corpus/0.2/hosting.toml", "../../corpus/0.2/{name}.toml"')
    config.write_text(text, encoding="utf-8")
    return (experiment / "experiment.json").read_bytes()


def refused_everywhere(experiment: Path, workspace: Path, plan_bytes: bytes, *said: str) -> None:
    """freeze, plan and run each refuse with one line (exit 4) saying `said`; the frozen plan
    is unchanged and no series folder, ledger or output exists."""
    for args in (("freeze", str(experiment)), ("plan", str(experiment)),
                 ("run", str(experiment), "--series", "extractive", "--out",
                  str(workspace / "outputs"))):
        result = run_cli(*args)
        assert result.returncode == 4, (args, result.stdout, result.stderr)
        [line] = error_lines(result.stderr)
        for words in said:
            assert words in line, (args, line)
        assert (experiment / "experiment.json").read_bytes() == plan_bytes
        assert not (workspace / "outputs").exists()


@pytest.mark.usefixtures("installed")
def test_a_nan_score_is_refused_before_freeze_plan_or_run_writes(experiment: Path,
                                                                  workspace: Path) -> None:
    frozen = use(experiment, scorer="passage-max", parking=True)
    refused_everywhere(
        experiment, workspace, frozen,
        "fragbench: scorer 'passage-max' (plugin dist 0.1) gave chunk parking/en/A size 2 #0 "
        "the score NaN (12 of 72 chunks score so); a score is a finite number (not NaN, inf or "
        "null), which selection can rank; a division by zero gives NaN or inf (such as by the "
        "best score of a passage in which no chunk holds a term of its question) "
        "(docs/plugins.md). Fix or uninstall that plugin.")


@pytest.mark.usefixtures("installed")
@pytest.mark.parametrize(("scorer", "shown"), [("log-score", "the score -inf"),
                                               ("null-score", "size 2 #0 the score null")])
def test_an_infinite_or_null_score_is_refused(experiment: Path, workspace: Path, scorer: str,
                                              shown: str) -> None:
    frozen = use(experiment, scorer=scorer)
    refused_everywhere(experiment, workspace, frozen, f"scorer '{scorer}' (plugin dist 0.1) "
                       "gave chunk ", shown, "a score is a finite number")


@pytest.mark.usefixtures("installed")
def test_undeclared_overlap_is_refused_before_freeze_plan_or_run_writes(
        experiment: Path, workspace: Path) -> None:
    frozen = use(experiment, chunker="overlapping")
    refused_everywhere(
        experiment, workspace, frozen,
        "fragbench: chunker 'overlapping' (plugin dist 0.1) declares no overlap = True, so it "
        "promises every sentence once and in order, but at size 2 delay en A: the chunks hold "
        "F1 F2 F2 F3 F3 F4 F4 F5 F5 F6, not each sentence once in passage order (F1 F2 F3 F4 "
        "F5 F6) (and 11 more passages); declare overlap = True if its chunks are meant to "
        "share them (docs/plugins.md), or fix or uninstall that plugin.")


CHUNK_PROMISES = {
    "whole-windows": "fragbench: chunker 'whole-windows' (plugin dist 0.1) promises every passage "
                     "it was given, and no other, but at size 2 lobby en A: no chunk (and 3 more "
                     "passages) (docs/plugins.md). Fix or uninstall that plugin.",
    "loses-the-last": "fragbench: chunker 'loses-the-last' (plugin dist 0.1) promises every "
                      "sentence at least once (overlap = True), but at size 2 delay en A: F5 F6 "
                      "in no chunk (and 11 more passages) (docs/plugins.md). Fix or uninstall "
                      "that plugin.",
    "all-zero": "fragbench: chunker 'all-zero' (plugin dist 0.1) promises chunks numbered 0.. in "
                "passage order, but at size 2 delay en A: its 3 chunks are numbered 0, 0, 0, not "
                "0 to 2 (and 11 more passages) (docs/plugins.md). Fix or uninstall that plugin.",
}
"""What the core says of each chunker that breaks a promise the kit checks (issue 15, item 4:
the same checks as the kit), on the experiment's corpus with the one-sentence `lobby` case."""


@pytest.mark.usefixtures("installed")
@pytest.mark.parametrize("chunker", sorted(CHUNK_PROMISES))
def test_a_chunker_breaking_a_kit_promise_is_refused_before_anything_is_written(
        experiment: Path, workspace: Path, chunker: str) -> None:
    frozen = use(experiment, chunker=chunker, lobby=True)
    refused_everywhere(experiment, workspace, frozen, CHUNK_PROMISES[chunker])


@pytest.mark.usefixtures("installed")
@pytest.mark.parametrize("args", [("--scorer", "passage-max"), ("--chunker", "overlapping"),
                                  *[("--chunker", c) for c in sorted(CHUNK_PROMISES)]])
def test_retrieve_refuses_them_and_writes_nothing(workspace: Path, tmp_path: Path,
                                                  args: tuple[str, str]) -> None:
    for name, case in (("parking", PARKING), ("lobby", LOBBY)):
        (workspace / "corpus" / "0.2" / f"{name}.toml").write_text(case, encoding="utf-8")
    out = tmp_path / "r.parquet"
    result = run_cli("retrieve", str(workspace / "corpus" / "0.2"), "--chunk-size", "2",
                     *args, "--out", str(out))
    assert result.returncode == 4
    [line] = error_lines(result.stderr)
    assert f"'{args[1]}' (plugin dist 0.1)" in line
    if args[1] in CHUNK_PROMISES:
        promise = CHUNK_PROMISES[args[1]].split(" but ")[0]
        assert line.startswith(promise), line
    assert not out.exists()


@pytest.mark.usefixtures("installed")
def test_a_collection_scorer_giving_nan_is_refused_naming_query_and_chunk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The collection path scores through its own methods (`collection_scores`); the same
    promise holds there, checked on each batch's score matrix."""
    import numpy as np

    from fragbench.builtin.scorers import SqrtLexical

    real = SqrtLexical.collection_scores

    def poisoned(self: SqrtLexical, index: object, queries: object, rows: slice) -> object:
        scores = real(self, index, queries, rows)
        # A sparse product's stored entries come in no set order: sorted, the last is the
        # row's last chunk (p1 #1), whichever order this run's product gave.
        scores.sort_indices()
        scores.data[-1] = np.nan
        return scores

    monkeypatch.setattr(SqrtLexical, "collection_scores", poisoned)
    # Scored the plugin protocol's way (its optional compiled top-k left out).
    monkeypatch.delattr(SqrtLexical, "collection_top_k")
    sentences = tmp_path / "s.jsonl"
    sentences.write_text(
        '{"passage": "p1", "position": 0, "lang": "en", "text": "Delivery takes two days."}\n'
        '{"passage": "p1", "position": 1, "lang": "en", "text": "Returns take a week."}\n',
        encoding="utf-8")
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"query": "q1", "lang": "en", "text": "How long does delivery '
                       'take?"}\n', encoding="utf-8")
    out = tmp_path / "r.parquet"
    result = run_cli("retrieve", "--collection", str(sentences), "--queries", str(queries),
                     "--chunk-size", "1", "--top-k", "1", "--out", str(out))
    assert result.returncode == 4
    [line] = error_lines(result.stderr)
    assert line.startswith("fragbench: scorer 'sqrt-lexical' (built-in) gave query q1 and chunk "
                           "p1 #1 the score NaN; a score is a finite number")
    assert not out.exists()


@pytest.mark.usefixtures("installed")
@pytest.mark.parametrize("chunker", ["wide", "wide-spans"])
def test_an_int64_chunkers_table_is_written_int32(workspace: Path, tmp_path: Path,
                                                   chunker: str) -> None:
    """docs/tables.md: retrieval.parquet's chunk (and start, end) are Int32."""
    out = tmp_path / "r.parquet"
    result = run_cli("retrieve", str(workspace / "corpus" / "0.2"), "--chunker", chunker,
                     "--chunk-size", "2", "--out", str(out))
    assert result.returncode == 0, result.stderr
    table = pl.read_parquet(out)
    assert {c: str(table.schema[c]) for c in ("chunk", "start", "end")} == {
        "chunk": "Int32", "start": "Int32", "end": "Int32"}
    assert table["chunk"].min() == 0 and table.height > 12


@pytest.mark.usefixtures("installed")
def test_a_chunk_number_beyond_int32_is_refused(workspace: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.parquet"
    result = run_cli("retrieve", str(workspace / "corpus" / "0.2"), "--chunker", "huge",
                     "--out", str(out))
    assert result.returncode == 4
    [line] = error_lines(result.stderr)
    assert line == ("fragbench: chunker 'huge' (plugin dist 0.1) numbered a chunk of delay/en/A "
                    "2147483648, beyond what the retrieval table's Int32 chunk column holds "
                    "(2147483647); chunks are numbered 0, 1, 2, ... in passage order "
                    "(docs/plugins.md). Fix or uninstall that plugin.")
    assert not out.exists()
