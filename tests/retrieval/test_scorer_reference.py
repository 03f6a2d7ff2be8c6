"""`sqrt-lexical`'s per-passage `score`, and selection, give to the bit what their first
implementations gave.

The scores are frozen into protocol 1.0's expected tables, so the faster `score` (a list of
terms per chunk, a slice of chunks at a time) is held to the implementation it replaced, kept
here verbatim as `reference_score` (a row per term, joins on strings): the same frame (columns,
types, order, `n_terms`, `matched_terms`) and the same score bits, on 300 HotpotQA-format
questions imported and chunked as `retrieve` does, on the test kit's chunks (spans that cut
sentences included), and on generated multilingual text that takes the Unicode path (accents
composed and decomposed, ligatures, full-width digits, a final sigma, stopwords of each
language, texts with no term, a passage whose question is missing). Selection (which places
each top-k's rows by arithmetic instead of sorting the whole table) is held to the sort it
replaced, `reference_select`, the same way.
"""

from __future__ import annotations

import random

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal
from support.cli import run_cli
from support.hotpotqa_data import generate, write

from fragbench.builtin import scorers
from fragbench.builtin.chunkers import SentenceGroups
from fragbench.builtin.scorers import SqrtLexical
from fragbench.corpus.cases import Case, load_corpus, questions_frame, sentences_frame
from fragbench.retrieval.passages import PASSAGE, TIE_DECIMALS, chunk_passages, retrieve, select
from fragbench.testing import samples
from fragbench.text import explode_terms

pytestmark = pytest.mark.slow

QUERY = ["case", "lang"]


def reference_score(chunks: pl.DataFrame, questions: pl.DataFrame) -> pl.DataFrame:
    """`SqrtLexical.score` as protocol 1.0 was frozen with it (commit 247802c), verbatim."""
    indexed = chunks.with_row_index("_row")
    question_terms = explode_terms(questions, "question", ["case"]).select(
        [*QUERY, "term"]
    ).unique()
    chunk_terms = explode_terms(indexed, "text", ["_row", "case"])
    counts = chunk_terms.group_by("_row").agg(pl.len().cast(pl.Int64).alias("n_terms"))
    matched = (
        chunk_terms.join(question_terms, on=[*QUERY, "term"], how="semi")
        .group_by("_row")
        .agg(pl.col("term").unique().sort().alias("matched_terms"))
    )
    return (
        indexed.join(counts, on="_row", how="left")
        .join(matched, on="_row", how="left")
        .with_columns(
            pl.col("n_terms").fill_null(0),
            pl.col("matched_terms").fill_null(pl.lit([], dtype=pl.List(pl.String))),
        )
        .with_columns(
            pl.when(pl.col("n_terms") > 0)
            .then(
                pl.col("matched_terms").list.len()
                / pl.col("n_terms").cast(pl.Float64).sqrt()
            )
            .otherwise(0.0)
            .alias("score")
        )
        .sort("_row")
        .drop("_row")
    )


def assert_same_as_reference(chunks: pl.DataFrame, questions: pl.DataFrame) -> pl.DataFrame:
    new = SqrtLexical().score(chunks, questions)
    old = reference_score(chunks, questions)
    assert_frame_equal(new, old, check_exact=True)
    # assert_frame_equal calls -0.0 and 0.0 equal; the bits may not differ either.
    assert np.array_equal(new["score"].to_numpy().view(np.uint64),
                          old["score"].to_numpy().view(np.uint64))
    return new


@pytest.fixture(scope="module")
def hotpot_cases(tmp_path_factory: pytest.TempPathFactory) -> list[Case]:
    """300 generated questions imported by the CLI."""
    tmp = tmp_path_factory.mktemp("hotpot")
    source = write(tmp / "hotpot.json", generate(300))
    out = tmp / "corpus"
    ran = run_cli("import", "hotpotqa", str(source), "--out", str(out))
    assert ran.returncode == 0, ran.stderr
    return load_corpus([out])


@pytest.fixture(scope="module")
def hotpot(hotpot_cases: list[Case]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Those questions chunked at sizes 1, 2 and 3 with the core's derived columns and
    `chunk_size`, as `score_chunks` hands them to the scorer."""
    cases = hotpot_cases
    sentences = sentences_frame(cases)
    chunks = pl.concat([chunk_passages(SentenceGroups(), sentences, size)
                        .with_columns(pl.lit(size, pl.Int32).alias("chunk_size"))
                        for size in (1, 2, 3)], how="vertical_relaxed")
    return chunks, questions_frame(cases)


def test_generated_hotpotqa_questions_score_as_the_reference(
        hotpot: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    chunks, questions = hotpot
    scored = assert_same_as_reference(chunks, questions)
    assert scored.height > 20_000 and scored["score"].n_unique() > 100


@pytest.mark.parametrize("size", [1, 7, 1_000])
def test_slices_of_any_size_score_as_the_reference(
        hotpot: tuple[pl.DataFrame, pl.DataFrame], size: int,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Scored a slice at a time: where the slices fall changes nothing (and the last slice is
    partial)."""
    chunks, questions = hotpot
    monkeypatch.setattr(scorers, "SCORE_SLICE", size)
    assert_same_as_reference(chunks.head(2_003) if size < 1_000 else chunks, questions)


def test_the_kit_s_chunks_score_as_the_reference() -> None:
    """Whole sentences and the kit's spans that cut them, with the kit's bites (no term
    matched, questions with no term, one-sentence passages)."""
    questions = samples.questions()
    for chunks in (samples.chunks((1, 2, 3)), samples.chunks((2, 3), samples.CharacterWindows())):
        assert_same_as_reference(chunks, questions)


PIECES = [
    "Café", "Cafe\u0301", "CAFÉ", "ﬁnal", "２０２６", "12,50", "l’offre", "L'OFFRE", "ΟΔΟΣ",
    "ὈΔΌΣ", "Straße", "İstanbul", "naïve", "Ǆemal", "x²", "Ⅻ", "œuvre", "the", "The", "and",
    "le", "les", "qu", "pas", "sans", "not", "only", "river", "City", "museum", "2026", "a",
    "de", "und", "der", "Fluss", "—", "...", "«", "»", "\t", "  ", "", "_", "e\u0301t\u00e9",
]


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(PIECES) + rng.choice([" ", "", ", ", "-", "\u00a0"])
                   for _ in range(rng.randint(0, 14)))


def test_generated_multilingual_text_scores_as_the_reference(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """English and French (stopword lists) and German (none), ASCII and not interleaved,
    texts with no term at all, and passages whose question is missing or repeated."""
    rng = random.Random(16)
    langs = ["en", "fr", "de"]
    rows = [(f"c{rng.randrange(40)}", rng.choice(langs), _text(rng)) for _ in range(600)]
    rows += [("c1", "en", "river city"), ("c1", "en", ""), ("c1", "en", "the a an , ."),
             ("nobody", "en", "river museum"), ("c2", "fr", "PAS SANS l’offre")]
    chunks = pl.DataFrame(rows, schema={"case": pl.String, "lang": pl.String,
                                        "text": pl.String}, orient="row")
    chunks = chunks.with_row_index("chunk").with_columns(pl.col("chunk").cast(pl.Int32))
    questions = pl.DataFrame(
        [(f"c{i}", lang, _text(rng)) for i in range(38) for lang in langs]
        + [("c1", "en", "River the CITY?"), ("c1", "en", "museum"), ("c2", "fr", "le la les")],
        schema={"case": pl.String, "lang": pl.String, "question": pl.String}, orient="row")
    monkeypatch.setattr(scorers, "SCORE_SLICE", 64)
    scored = assert_same_as_reference(chunks, questions)
    assert scored.filter(pl.col("text").str.contains(r"[^\x00-\x7F]"))["score"].max() > 0
    assert scored.filter(pl.col("case") == "nobody")["matched_terms"].to_list() == [[]]
    assert assert_same_as_reference(chunks.head(0), questions).height == 0
    german = assert_same_as_reference(chunks.filter(pl.col("lang") == "de"), questions)
    assert german.height > 100 and german["score"].max() > 0  # no stopword list: none dropped


def test_the_reference_is_what_protocol_1_0_froze() -> None:
    """The reference itself, on a hand-checked chunk: 2 of the question's distinct terms in
    a chunk of 8 terms, stopwords out, repeats counted."""
    chunks = pl.DataFrame({"case": ["q"], "lang": ["en"],
                           "text": ["The river, the city and the river: café CITY museum x y"]})
    questions = pl.DataFrame({"case": ["q"], "lang": ["en"], "question": ["Which river city?"]})
    row = assert_same_as_reference(chunks, questions).row(0, named=True)
    assert (row["n_terms"], row["matched_terms"]) == (8, ["city", "river"])
    assert row["score"] == 2 / 8 ** 0.5


def reference_select(scored: pl.DataFrame, top_ks: list[int]) -> pl.DataFrame:
    """`fragbench.retrieval.passages.select` before issue 16 (commit 247802c), verbatim: the table
    of
    every top-k sorted on its string keys."""
    group = [*PASSAGE, "chunk_size"]
    ranked = scored.with_columns(
        pl.col("score").round(TIE_DECIMALS).alias("_key"),
    ).with_columns(
        (pl.len().over([*group, "_key"]) > 1).alias("tied"),
        pl.struct(-pl.col("_key"), pl.col("chunk"))
        .rank("ordinal")
        .over(group)
        .cast(pl.Int32)
        .alias("_order"),
    )
    frames = [
        ranked.with_columns(
            pl.lit(k, pl.Int32).alias("top_k"),
            pl.when(pl.col("_order") <= k).then(pl.col("_order")).alias("rank"),
        )
        for k in top_ks
    ]
    table = pl.concat(frames).with_columns(pl.col("rank").is_not_null().alias("selected"))
    first = ["case", "lang", "variant", "chunk_size", "top_k", "chunk", "fact_ids",
             "whole_fact_ids", "cut_fact_ids", "score", "rank", "selected", "tied"]
    rest = [c for c in table.columns if c not in first and not c.startswith("_")]
    return table.select(first + rest).sort(["case", "lang", "variant", "chunk_size", "top_k",
                                            "chunk"])


@pytest.mark.parametrize("top_ks", [[1], [1, 2], [3, 1, 2], [50]])
def test_selection_orders_and_ranks_as_the_reference(
        hotpot: tuple[pl.DataFrame, pl.DataFrame], top_ks: list[int]) -> None:
    """The retrieval table, its rows in reading order, from chunks in another order than
    reading order (sizes 1, 2, 3 one after the other, then shuffled); ties included."""
    chunks, questions = hotpot
    scored = score_chunks_frame(chunks, questions)
    for frame in (scored, scored.sample(fraction=1.0, shuffle=True, seed=16)):
        new = select(frame, top_ks)
        assert_frame_equal(new, reference_select(frame, top_ks), check_exact=True)
    assert new["tied"].any() and new.height == len(top_ks) * chunks.height
    assert_frame_equal(select(scored.head(0), [1, 2]), reference_select(scored.head(0), [1, 2]))


def score_chunks_frame(chunks: pl.DataFrame, questions: pl.DataFrame) -> pl.DataFrame:
    """The scores as `score_chunks` hands them to selection (Float64)."""
    return SqrtLexical().score(chunks, questions).with_columns(pl.col("score").cast(pl.Float64))


def test_retrieve_keeps_only_the_settings_asked_for(
        hotpot_cases: list[Case], hotpot: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    """Every (chunk_size, top_k) pair asked for: the whole table as selection made it (no
    filtering copy); some pairs only: those pairs' rows, in the same order."""
    grid = [(size, k) for size in (1, 2, 3) for k in (1, 2)]
    full = retrieve(hotpot_cases, SentenceGroups(), SqrtLexical(), [*reversed(grid), (1, 1)])
    assert_frame_equal(full, reference_select(score_chunks_frame(*hotpot), [1, 2]),
                       check_exact=True)
    some = [(1, 1), (3, 2), (3, 1)]
    part = retrieve(hotpot_cases, SentenceGroups(), SqrtLexical(), some)
    assert sorted(set(zip(part["chunk_size"], part["top_k"], strict=True))) == sorted(some)
    asked = pl.DataFrame(some, schema={"chunk_size": pl.Int32, "top_k": pl.Int32}, orient="row")
    assert_frame_equal(part, full.join(asked, on=["chunk_size", "top_k"], how="semi",
                                       maintain_order="left"), check_exact=True)
