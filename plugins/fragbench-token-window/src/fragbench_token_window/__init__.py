"""Chunker `token-window`: fixed windows of `size` word tokens that cut sentences, as spans.

The most common chunking in practice: the passage's text (its sentences joined by one space)
is cut into consecutive, non-overlapping windows of `size` tokens from its first token, whatever
the sentence boundaries; the last window may be shorter. A token is a maximal run of
non-whitespace characters (the regular expression `\\S+`, whitespace in Unicode's sense, so a
no-break space separates tokens too): no tokenizer, no model, nothing language-specific, so a
window's size is a count anyone can redo by hand. A window is returned as its span of the
passage: from its first token's first character to its last token's last one, so the
whitespace between two windows is in neither (the core's coverage check allows that, never a
word left out). The core derives each window's text and its whole and cut facts.

Vectorised in Polars over every passage at once: each sentence is split into pieces of
(leading whitespace, token), whose running length within the sentence, plus the sentence's own
offset, gives each token's end; tokens are then numbered through the passage and grouped by
number // size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fragbench.hookspecs import hookimpl

if TYPE_CHECKING:
    import polars as pl
else:  # imported on first use: `fragbench --help` and `fragbench plugins` never pay for it
    from fragbench.lazy import polars as pl

PASSAGE = ["case", "lang", "variant"]
TOKEN = r"\S+"
"""What a token is: a maximal run of non-whitespace characters."""


class TokenWindow:
    """Consecutive windows of `size` word tokens (TOKEN), non-overlapping, cutting sentences."""

    name = "token-window"
    api_version = "1.0"
    output = "spans"
    """Returns case, lang, variant, chunk, start, end: spans of the passage's text."""

    def chunk(self, sentences: pl.DataFrame, size: int) -> pl.DataFrame:
        if size < 1:
            raise ValueError(f"chunk size must be at least 1 token, got {size}")
        tokens = (
            sentences.select(*PASSAGE, "position", "start",
                             pl.col("text").str.extract_all(rf"\s*{TOKEN}").alias("_piece"))
            .with_row_index("_sentence")
            .explode("_piece")
            .drop_nulls("_piece")
            .with_columns(
                (pl.col("start") + pl.col("_piece").str.len_chars().cum_sum().over("_sentence"))
                .alias("_end"),
                pl.col("_piece").str.extract(f"({TOKEN})", 1).str.len_chars().alias("_len"),
            )
            # Explode keeps each sentence's tokens in text order; the sort is stable.
            .sort([*PASSAGE, "position"], maintain_order=True)
            .with_columns(
                (pl.int_range(pl.len()).over(PASSAGE) // size).cast(pl.Int32).alias("chunk"))
        )
        return (
            tokens.group_by([*PASSAGE, "chunk"], maintain_order=True)
            .agg(
                (pl.col("_end") - pl.col("_len")).first().cast(pl.Int32).alias("start"),
                pl.col("_end").last().cast(pl.Int32).alias("end"),
            )
        )


@hookimpl
def register_chunkers(register: Any) -> None:
    register(TokenWindow())
