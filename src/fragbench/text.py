"""Normalization, tokenization and stopwords of the `sqrt-lexical` scorer.

One implementation, as Polars expressions, so that scoring runs on whole columns. The rule, in
words (frozen into experiment.json as `tokenization`):

1. Unicode NFKD;
2. combining marks (general category M) removed;
3. lowercased;
4. terms are the maximal runs of Unicode letters and numbers (`[\\p{L}\\p{N}]+`), so `l’offre`
   gives `l`, `offre` and `12,50` gives `12`, `50`;
5. the language's stopwords, already in normalized form, are removed.

The stopword lists hold function words only. No negation or condition word (not, no, only, if,
unless, before, after, until, without, except, sans, sauf, si, ne, pas, avant, après, jusqu,
seulement, moins, plus, …) may be in them, so that the words carrying conditions can score; no
word that is a content word in the list's language (French `an` is a year). The French list holds
the elided fragments (l, d, j, m, n, s, t, c, qu), as the spec fixes it; `n` is the elided `ne`, but
the negation survives in `pas`, `jamais`, `sans`, which stay. Homographs of content words are left
out even when their function-word sense is the frequent one: English `can`, `will`; French `est`
(east), `son` (sound), `ete` (été, summer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl
else:
    from fragbench.lazy import polars as pl


TOKEN_PATTERN = r"[\p{L}\p{N}]+"
MARK_PATTERN = r"\p{M}"

TOKENIZATION_RULE = (
    "Unicode NFKD; combining marks (general category M) removed; lowercased; terms are the "
    f"maximal runs matching {TOKEN_PATTERN} (Unicode letters and numbers); the language's "
    "stopwords, in the same normalized form, removed. Score = distinct question terms present in "
    "the chunk / sqrt(number of chunk terms, repeats counted); 0 for a chunk with no terms."
)

# Function words only; see the module docstring for what may never be here. Normalized form
# (no accents, lowercase), checked by the tests.
STOPWORDS: dict[str, tuple[str, ...]] = {
    "en": (
        "a", "an", "the", "and", "or", "of", "to", "in", "on", "at", "by", "for", "from",
        "with", "as", "is", "are", "was", "were", "be", "been", "being", "it", "its", "this",
        "that", "these", "those", "there", "their", "they", "them", "we", "our", "you", "your",
        "i", "my", "he", "she", "his", "her", "do", "does", "did", "would",
        "which", "who", "what", "how", "when", "where", "s", "into", "per",
    ),
    "fr": (
        "le", "la", "les", "l", "un", "une", "des", "de", "du", "d", "et", "ou", "a", "au",
        "aux", "en", "dans", "par", "pour", "sur", "avec", "ce", "cet", "cette", "ces", "c",
        "qu", "que", "qui", "quoi", "dont", "sont", "etre", "il", "ils", "elle",
        "elles", "on", "nous", "vous", "je", "j", "me", "m", "n", "se", "s", "te", "t", "leur",
        "leurs", "sa", "ses", "votre", "vos", "notre", "nos", "y", "quel", "quelle",
        "quels", "quelles", "comment", "combien",
    ),
}


_STOPWORD_SETS = {lang: frozenset(words) for lang, words in STOPWORDS.items()}


def normalized(expr: pl.Expr) -> pl.Expr:
    """Steps 1-3 of the rule on a string column."""
    return expr.str.normalize("NFKD").str.replace_all(MARK_PATTERN, "").str.to_lowercase()


def all_terms(expr: pl.Expr) -> pl.Expr:
    """Steps 1-4: every term of a string column, stopwords still in, as a list column."""
    return normalized(expr).str.extract_all(TOKEN_PATTERN)


def stopword_frame() -> pl.DataFrame:
    """One row per (lang, term) stopword, for anti-joins."""
    return pl.DataFrame(
        [(lang, word) for lang, words in STOPWORDS.items() for word in words],
        schema={"lang": pl.String, "term": pl.String},
        orient="row",
    )


def explode_terms(frame: pl.DataFrame, text: str, keys: list[str]) -> pl.DataFrame:
    """Long frame `keys + [lang, pos, term]`: the terms of column `text`, stopwords removed.

    `pos` keeps the order of terms within a row so that callers can rebuild lists. Rows with no
    term at all drop out; callers left-join back onto their own keys.
    """
    long = (
        frame.select([*keys, "lang", all_terms(pl.col(text)).alias("term")])
        .explode("term")
        .drop_nulls("term")
        .with_columns(pl.int_range(pl.len()).over([*keys, "lang"]).alias("pos"))
    )
    return long.join(stopword_frame(), on=["lang", "term"], how="anti")


def terms(texts: list[str], lang: str) -> list[list[str]]:
    """The terms of each text (stopwords removed), in order: a convenience for small inputs
    (the extractive baseline calls it once per call). Steps 1-4 are the same expressions as
    `explode_terms`; step 5 is a set lookup here, which removes exactly what its anti-join on
    (lang, term) removes, without the join, sort and group-by that cost about a millisecond
    a call at any size."""
    stop = _STOPWORD_SETS.get(lang, frozenset())
    found = pl.DataFrame({"text": texts}, schema={"text": pl.String}).select(
        all_terms(pl.col("text"))).to_series().to_list()
    return [[t for t in words if t not in stop] for words in found]
