"""Built-in measure `citations` (primary): which citations hold word for word.

Each citation of every parsed answer gets one reason, the first that applies, in this order:

- `unknown_id`: the ID is no fact of the case;
- `not_supplied`: a fact of the case that this call was not given;
- `empty_extract`: the extract is empty or only whitespace;
- `valid`: the extract is an exact substring of the cited ID's supplied sentence;
- `misattributed`: exact in another supplied sentence, not in the cited one;
- `not_verbatim`: exact in no supplied sentence.

"Supplied sentence" means the text the call showed under that ID (calls' `supplied_texts`):
the whole sentence, or under a span chunker the fragment of it inside the selected span. An
extract from the part of a cut sentence that was not shown is `not_verbatim`: the model cannot
have copied it from what it was given. When one ID was shown more than once (two selected
chunks cut one sentence), the extract is valid if it is in any of its texts.

Exact means exact: no case, space, quote or accent folding. A second level, `*_folded`, reported
beside it and never merged into it, folds only typographic variants, in the extract and the
sentences alike: Unicode NFC; every run of whitespace, non-breaking spaces included, to one
space; ’ ‘ ‛ ′ to '; “ ” „ « » ″ to "; the dashes ‐ ‑ ‒ – — ― − to -. A valid extract shows that
the words are in the supplied evidence, not that they support the whole answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fragbench.columns import CALL_COLUMNS, CALL_TYPES, IDS
from fragbench.hookspecs import hookimpl
from fragbench.interfaces import MeasureInput

if TYPE_CHECKING:
    import polars as pl
else:
    from fragbench.lazy import polars as pl

REASONS = ("unknown_id", "not_supplied", "empty_extract", "valid", "misattributed",
           "not_verbatim")
FOLDS = (
    ("[’‘‛′]", "'"),
    ("[“”„«»″]", '"'),
    ("[‐‑‒–—―−]", "-"),
    (r"\s+", " "),
)
READ_COLUMNS = ("call_id", "case", "lang", "variant", "mode", "rep", "parsed",
                "supplied_ids", "supplied_texts", "citations")
"""The calls' columns `citations` reads."""
READS = {"calls": READ_COLUMNS, "facts": ("case", "lang", "fact_id", "text", "is_condition")}
"""Its `reads`: given only these (a filter or a join copies every column it is given: the
bodies would be gigabytes at 100,000 calls), and the core holds no body for it."""
BATCH_CALLS = 5_000
"""Calls whose citations are classified together (`Citations.compute`)."""
FOLDED_LEVEL = ("NFC; whitespace runs (non-breaking spaces included) to one space; ’ ‘ ‛ ′ to '; "
                "“ ” „ « » ″ to \"; ‐ ‑ ‒ – — ― − to -")

CITATIONS_SCHEMA = {
    **CALL_COLUMNS,  # the call's cell, so that a citation is read or filtered with no join
    "citation": "0-based position of the citation in the answer",
    "id": "the fact ID as the model wrote it",
    "extract": "the extract as the model wrote it",
    "valid": "exact level: reason is valid",
    "reason": "exact level: " + ", ".join(REASONS),
    "valid_folded": "typographic level: reason_folded is valid",
    "reason_folded": "typographic level (folds only typographic variants), same reasons",
}

PER_CALL_SCHEMA = {
    **CALL_COLUMNS,
    "parsed": "whether the answer parsed; the counts below are null when it did not",
    "n_citations": "citations in the answer",
    "n_valid": "citations valid at the exact level",
    "n_invalid": "citations not valid at the exact level",
    "valid_ids": "distinct IDs cited validly (exact), in order of first citation",
    "conditions_cited_validly": "condition IDs cited validly (exact)",
    "supplied_conditions_not_cited": "supplied condition IDs that no citation names",
    "supplied_conditions_not_cited_validly": "supplied condition IDs with no valid citation",
    "n_valid_folded": "citations valid at the typographic level",
}

TABLES = {
    "citations": {**CALL_TYPES, "citation": "Int32", "id": "String", "extract": "String",
                  "valid": "Boolean", "reason": "String", "valid_folded": "Boolean",
                  "reason_folded": "String"},
    "citations_per_call": {**CALL_TYPES, "parsed": "Boolean", "n_citations": "Int32",
                           "n_valid": "Int32", "n_invalid": "Int32", "valid_ids": IDS,
                           "conditions_cited_validly": IDS,
                           "supplied_conditions_not_cited": IDS,
                           "supplied_conditions_not_cited_validly": IDS,
                           "n_valid_folded": "Int32"},
}
"""The tables `citations` writes (none for a series never collected), each column's type as
`Measure.tables` declares it."""


def fold(expr: pl.Expr) -> pl.Expr:
    expr = expr.str.normalize("NFC")
    for pattern, replacement in FOLDS:
        expr = expr.str.replace_all(pattern, replacement)
    return expr


def _classify(cites: pl.DataFrame, supplied: pl.DataFrame, facts: pl.DataFrame,
              suffix: str) -> pl.DataFrame:
    """cites: _row, call_id, case, lang, supplied_ids, id, extract (already folded or not);
    supplied: call_id, fact_id, text (one row per text shown; an ID may have several);
    facts: case, lang, fact_id, text."""
    found = pl.col("text").str.contains(pl.col("extract"), literal=True)
    # First the texts shown under the cited ID only (about one row per citation), then, for
    # the citations supplied but not found there, every other text the call showed: joining
    # each citation with every text of its call at once held tens of millions of rows (each
    # a copy of a text) for 10,000 calls of whole passages; the reasons are the same.
    cited = (
        cites.select("_row", "call_id", "id", "extract")
        .join(supplied, left_on=["call_id", "id"], right_on=["call_id", "fact_id"])
        .group_by("_row")
        .agg(pl.lit(True).alias("_supplied"), found.any().alias("_in_cited"))
    )
    unfound = cites.join(cited.filter(~pl.col("_in_cited")), on="_row", how="semi")
    elsewhere = (
        unfound.select("_row", "call_id", "id", "extract")
        .join(supplied, on="call_id")
        .filter(pl.col("fact_id") != pl.col("id"))
        .group_by("_row")
        .agg(found.any().alias("_elsewhere"))
    )
    matches = cited.join(elsewhere, on="_row", how="left")
    in_case = facts.select("case", "lang", pl.col("fact_id").alias("id"),
                           pl.lit(True).alias("_known"))
    reason = (
        pl.when(pl.col("_known").is_null()).then(pl.lit("unknown_id"))
        .when(~pl.col("_supplied").fill_null(False)).then(pl.lit("not_supplied"))
        .when(pl.col("extract").str.strip_chars() == "").then(pl.lit("empty_extract"))
        .when(pl.col("_in_cited")).then(pl.lit("valid"))
        .when(pl.col("_elsewhere")).then(pl.lit("misattributed"))
        .otherwise(pl.lit("not_verbatim"))
    )
    return (
        cites.join(in_case, on=["case", "lang", "id"], how="left")
        .join(matches, on="_row", how="left")
        .select("_row", reason.alias(f"reason{suffix}"))
    )


def _shown(calls: pl.DataFrame, facts: pl.DataFrame) -> pl.DataFrame:
    """call_id, fact_id, text: one row per text a call showed, under its ID. Where a call
    lists no supplied_texts (null, or a calls frame without the column) each supplied ID was
    shown its whole sentence."""
    if "supplied_texts" not in calls.columns:
        calls = calls.with_columns(pl.lit(None, pl.List(pl.String)).alias("supplied_texts"))
    listed = pl.col("supplied_texts").is_not_null()
    keys = ["case", "lang", "fact_id"]
    sentences = facts.select(*keys, "text")
    fragments = (
        calls.filter(listed)
        .select("call_id", "case", "lang", pl.col("supplied_ids").alias("fact_id"),
                pl.col("supplied_texts").alias("text"))
        .explode("fact_id", "text")
        .drop_nulls("fact_id")
        .join(sentences.select(keys), on=keys)  # an ID the case lacks is shown nothing known
    )
    whole = (
        calls.filter(~listed)
        .select("call_id", "case", "lang", pl.col("supplied_ids").alias("fact_id"))
        .explode("fact_id")
        .drop_nulls("fact_id")
        .join(sentences, on=keys)
    )
    return pl.concat([fragments.select("call_id", "fact_id", "text"),
                      whole.select("call_id", "fact_id", "text")])


class Citations:
    name = "citations"
    api_version = "1.0"
    kind = "primary"
    tables = TABLES
    reads = READS

    def compute(self, data: MeasureInput) -> dict[str, pl.DataFrame]:
        if data.calls is None:
            return {}
        calls = data.calls
        # A citation's reasons depend on its own call only (every join below is on the call,
        # or on its case for the facts), so the calls are classified a batch at a time and
        # the batches joined in order: the same table, with what the joins hold at once
        # bounded by a batch (at 100,000 calls, all at once held about 9 times the table).
        starts = range(0, calls.height, BATCH_CALLS) or range(1)
        table = pl.concat([self.classified(calls.slice(start, BATCH_CALLS), data.facts)
                           for start in starts])
        return {"citations": table, "citations_per_call": self.per_call(calls, table, data)}

    def classified(self, calls: pl.DataFrame, facts: pl.DataFrame) -> pl.DataFrame:
        """The citations table of `calls`, in their order and each answer's."""
        cites = (
            calls.filter(pl.col("parsed").fill_null(False))
            .select("call_id", "case", "lang", "variant", "mode", "rep", "supplied_ids",
                    pl.col("citations").list.eval(pl.element().struct.with_fields(
                        pl.int_range(pl.len()).alias("citation"))).alias("c"))
            .explode("c")
            .drop_nulls("c")
            .unnest("c")
            .with_row_index("_row")
        )
        supplied = _shown(calls, facts)
        exact = _classify(cites, supplied, facts, "")
        folded = _classify(
            cites.with_columns(fold(pl.col("extract"))),
            supplied.with_columns(fold(pl.col("text"))),
            facts, "_folded")
        return (
            cites.join(exact, on="_row").join(folded, on="_row").sort("_row")
            .with_columns(
                (pl.col("reason") == "valid").alias("valid"),
                (pl.col("reason_folded") == "valid").alias("valid_folded"),
                pl.col("citation").cast(pl.Int32),
            )
            .select(list(CITATIONS_SCHEMA))
        )

    def per_call(self, calls: pl.DataFrame, table: pl.DataFrame,
                 data: MeasureInput) -> pl.DataFrame:
        conditions = data.facts.filter(pl.col("is_condition")).select(
            "case", "lang", pl.col("fact_id").alias("id"), pl.lit(True).alias("_cond"))
        t = table.join(conditions, on=["case", "lang", "id"], how="left",
                       maintain_order="left")
        counts = t.group_by("call_id").agg(
            pl.len().cast(pl.Int32).alias("n_citations"),
            pl.col("valid").sum().cast(pl.Int32).alias("n_valid"),
            (~pl.col("valid")).sum().cast(pl.Int32).alias("n_invalid"),
            pl.col("id").filter(pl.col("valid")).unique(maintain_order=True).alias("valid_ids"),
            pl.col("id").filter(pl.col("valid") & pl.col("_cond").fill_null(False))
            .unique(maintain_order=True).alias("conditions_cited_validly"),
            pl.col("id").unique(maintain_order=True).alias("_cited"),
            pl.col("valid_folded").sum().cast(pl.Int32).alias("n_valid_folded"),
        )
        supplied_conditions = (
            calls.select("call_id", "case", "lang", pl.col("supplied_ids").alias("id"))
            .explode("id").drop_nulls("id")
            .join(conditions, on=["case", "lang", "id"], maintain_order="left")
            .group_by("call_id", maintain_order=True)
            .agg(pl.col("id").alias("_supplied_conditions"))
        )
        empty = pl.lit([], dtype=pl.List(pl.String))
        parsed = pl.col("parsed").fill_null(False)
        zero = pl.lit(0, pl.Int32)
        return (
            calls.select("call_id", "case", "lang", "variant", "mode", "rep", "parsed")
            .join(counts, on="call_id", how="left", maintain_order="left")
            .join(supplied_conditions, on="call_id", how="left", maintain_order="left")
            .with_columns(
                # A parsed answer with no citation has zero of everything; an unparsed one
                # has nothing measured: null, never zero.
                *[pl.when(parsed).then(pl.col(c).fill_null(zero)) for c in
                  ("n_citations", "n_valid", "n_invalid", "n_valid_folded")],
                *[pl.when(parsed).then(pl.col(c).fill_null(empty)) for c in
                  ("valid_ids", "conditions_cited_validly", "_cited")],
                pl.col("_supplied_conditions").fill_null(empty),
            )
            .with_columns(
                pl.when(parsed).then(pl.col("_supplied_conditions").list.set_difference(
                    pl.col("_cited"))).alias("supplied_conditions_not_cited"),
                pl.when(parsed).then(pl.col("_supplied_conditions").list.set_difference(
                    pl.col("conditions_cited_validly")))
                .alias("supplied_conditions_not_cited_validly"),
            )
            .with_columns(pl.col("supplied_conditions_not_cited",
                                 "supplied_conditions_not_cited_validly").list.sort())
            .select(list(PER_CALL_SCHEMA))
        )


@hookimpl
def register_measures(register: Any) -> None:
    register(Citations())
