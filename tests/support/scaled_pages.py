"""A large series for the page tests and benchmarks/bench_pages.py, written directly as tables.

`scale_series(demo, out, copies)` copies the offline demo series (72 calls over 3 cases) and
replaces its calls.parquet, citations.parquet and citations_per_call.parquet with `copies`
copies of its 72 calls, copy k's
cases renamed `CASE-kkkk`, its calls renumbered after the previous copy's, and every supplied
text and answer given the suffix ` (copy kkkk)` (so the texts are distinct, as in a real
corpus; each extract stays word for word in its fragment). It writes cases.parquet
with two groups, as a corpus with groups records it: `type` (bridge on even copies, comparison
on odd) and `level` (easy, medium, hard in turn), and questions.parquet with each copy's
questions (the suffix again). Nothing is collected: the tables are built
with Polars in a second or two, so 140 copies (10,080 calls) stay cheap.

`NEEDLE` is in the answer of one call only, the last one (on the last page whatever the page
size), and `EXTRACT_NEEDLE` the extract of one citation only, a not-verbatim one added to the
middle call (`middle_call`): what the search tests look for.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl

NEEDLE = "zebra-needle-4471"
EXTRACT_NEEDLE = "okapi words found in no sentence"


def middle_call(copies: int, per_copy: int = 72) -> int:
    """The 0-based plan index of the call holding EXTRACT_NEEDLE."""
    return copies * per_copy // 2
GROUP_TYPES = ("bridge", "comparison")
GROUP_LEVELS = ("easy", "medium", "hard")


def scale_series(demo: Path, out: Path, copies: int) -> Path:
    """`out`: the demo series with `copies` x 72 calls and groups (see the module)."""
    shutil.copytree(demo, out)
    (out / "report.html").unlink(missing_ok=True)
    calls = pl.read_parquet(demo / "calls.parquet").sort("seq")
    citations = pl.read_parquet(demo / "citations.parquet")
    per_copy = calls.height
    call_rows, cite_rows, case_rows = [], [], []
    cites_of: dict[str, list[dict[str, object]]] = {}
    for cite in citations.sort("call_id", "citation").to_dicts():
        cites_of.setdefault(str(cite["call_id"]), []).append(cite)
    for k in range(copies):
        tag = f"{k:04d}"
        suffix = f" (copy {tag})"
        for case in calls["case"].unique().sort().to_list():
            case_rows.append({"case": f"{case}-{tag}", "type": GROUP_TYPES[k % 2],
                              "level": GROUP_LEVELS[k % 3]})
        for row in calls.to_dicts():
            old_id = row["call_id"]
            new = dict(row)
            new["case"] = f"{row['case']}-{tag}"
            new["call_id"] = old_id.replace(row["case"], new["case"], 1)
            new["seq"] = k * per_copy + row["seq"]
            if row["supplied_texts"] is not None:
                new["supplied_texts"] = [t + suffix for t in row["supplied_texts"]]
            if row["answer"] is not None:
                new["answer"] = row["answer"] + suffix
            call_rows.append(new)
            for cite in cites_of.get(old_id, []):
                cite_rows.append({**cite, "call_id": new["call_id"], "case": new["case"]})
    last = call_rows[-1]
    last["answer"] = (last["answer"] or "") + " " + NEEDLE
    middle = call_rows[middle_call(copies, per_copy)]
    numbers = [int(str(c["citation"])) for c in cite_rows if c["call_id"] == middle["call_id"]]
    cite_rows.append({"call_id": middle["call_id"], "case": middle["case"],
                      "lang": middle["lang"], "variant": middle["variant"],
                      "mode": middle["mode"], "rep": middle["rep"],
                      "citation": max(numbers, default=-1) + 1, "id": "F1",
                      "extract": EXTRACT_NEEDLE, "valid": False, "reason": "not_verbatim",
                      "valid_folded": False, "reason_folded": "not_verbatim"})
    per_call = pl.read_parquet(demo / "citations_per_call.parquet")
    per_call_rows = []
    by_call = {str(r["call_id"]): r for r in per_call.to_dicts()}
    for row in call_rows:
        # the copied call's counts, under its new ID and case (the extract needle added to
        # the middle call is not counted: it changes no comparison the tests make)
        old_id = str(row["call_id"]).replace(str(row["case"]), str(row["case"]).rsplit("-", 1)[0],
                                              1)
        if old_id in by_call:
            per_call_rows.append({**by_call[old_id], "call_id": row["call_id"],
                                  "case": row["case"]})
    pl.DataFrame(per_call_rows, schema=per_call.schema).write_parquet(
        out / "citations_per_call.parquet")
    pl.DataFrame(call_rows, schema=calls.schema).write_parquet(out / "calls.parquet")
    pl.DataFrame(cite_rows, schema=citations.schema).write_parquet(out / "citations.parquet")
    pl.DataFrame(case_rows, schema={"case": pl.String, "type": pl.String, "level": pl.String}
                 ).write_parquet(out / "cases.parquet")
    questions = pl.read_parquet(demo / "questions.parquet")
    pl.concat([questions.with_columns(pl.col("case") + f"-{k:04d}",
                                      pl.col("question") + f" (copy {k:04d})")
               for k in range(copies)]).write_parquet(out / "questions.parquet")
    return out


def scaled_trio(demo: Path, root: Path, copies: int) -> list[Path]:
    """Three scaled series (`scale_series`) named s1, s2, s3 for the compare pages; s3 counts
    one valid citation less in every `price … full r2` cell (en/fr x A/B: four per copy), so
    4 x `copies` cells differ and the rest are the same."""
    import json

    made = []
    for name in ("s1", "s2", "s3"):
        series = scale_series(demo, root / name, copies)
        for file in ("series.json", "status.json"):
            info = json.loads((series / file).read_text(encoding="utf-8"))
            (series / file).write_text(json.dumps({**info, "series": name}), encoding="utf-8")
        made.append(series)
    path = made[2] / "citations_per_call.parquet"
    per_call = pl.read_parquet(path)
    hit = pl.col("case").str.starts_with("price-") & pl.col("call_id").str.ends_with("-full-r2")
    per_call.with_columns(pl.when(hit).then(pl.col("n_valid") - 1).otherwise(pl.col("n_valid"))
                          .alias("n_valid")).write_parquet(path)
    return made
