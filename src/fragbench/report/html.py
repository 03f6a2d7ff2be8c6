"""report.html: the evidence of a recorded series, call by call, in one self-contained file.

Written beside report.md by `fragbench report`, `fragbench measure` and `fragbench run`. It shows
what was run, the availability matrix, a `section.measure[data-measure]` per primary measure
other than the built-ins (its `table.measure-table`s, as report.md shows them), and for every
planned call the fragments the model was shown with each located extract highlighted in place,
the answer, every citation with its reason, usage, cost and the raw response. Like report.md it
publishes no score and no ranking: everything is per call, and a null or adverse result is
shown as plainly as a valid one.

The page must open from disk, offline, and be committed with the results: no external URL (no
CDN, font or script to load); the figures are embedded as data URIs; CSS and the script are
inline; the calls' detail is in the page's data folder beside it, `report-data/<digest>/`
(`fragbench.report.pagedata`, which says why: a page of any size opens in the time its index
takes), the only thing the page loads.

At scale (issues 16, 26): the page opens with what was run and a summary of counts (calls
planned, sent, answered, parsed; citations valid and other) per case group when the series has
cases.parquet (`case`, then one String column per group), then per mode, language and variant.
The calls are not markup but data. The page holds their index, one `<script
type="application/json" id="fragbench-calls">` element (`_call_index`: for each call what the
filters compare and what names it, a few bytes a call); each call's detail (fragments, answer,
citations, usage, raw response; `_call_views`) is in the data files `calls-NNNN.js`, their
search texts in `search-NNNN.js` (`_write_calls`). page.js draws a page of calls at a time (50
by default) with textContent and attribute values only, to the DOM contract below, loading the
data files that page needs (the list is aria-busy meanwhile). The filters (case, language,
variant, mode, each group as `filter-group-KEY`, reason) read the index; the search (answer,
unparsed text, extracts, call ID; case ignored) loads the search files on its first use,
saying so; both select among every call, and their state is the URL's fragment
`#?KEY=VALUE&q=…&page=N&per=N`; `#call-ID` draws that call's page. Without JavaScript the
summary, the availability table (its first AVAILABILITY_SHOWN passages and totals) and the
measures read as before; the calls, the filters and the search are not shown, and a note says
so.

Every byte from a response is hostile (an answer may hold markup, escapes, a key). So every
value a template prints is first redacted, then escaped by Jinja2's autoescape, one value at a
time (`environment`), and every value of the calls' index and data files is redacted one at a
time before it is written as JSON whose `<`, `>`, `&` and U+2028/U+2029 are escapes
(`pagedata.island`); a rendered page or data file is never transformed afterwards (decoding or
redacting a whole page could turn an answer's text into markup). The one script is
`templates/page.js`, inserted whole, and the page's Content-Security-Policy allows it by its
sha256, computed from that file (`page_script`), never read back from a page, and with
'strict-dynamic' the data files it adds itself: markup that ever slipped past escaping still
could not run, nor load a script. The DOM (classes and data attributes) is a contract the
browser tests and the compare page share; `docs/tables.md` documents the tables it reads.
Beyond the contract: `<html data-model>`; each filter select names the call field it compares
(`data-field`, `data-match` exact or word) and its URL state name (`data-state`); a call never
sent keeps its `ol.fragments` (what it would have been shown) inside a closed
`details.unsent-fragments`; `ol.citations` exists only for a parsed answer; `li.citation` also
carries `r-REASON` and an id (`call-ID-cN`), and a misattributed one names the fragment that
holds its extract; `#call-list` is `aria-busy` while the page waits for a data file,
`data-drawn` counts the pages drawn, and `data-error="missing"` (with a `p.list-status.error`
naming the folder) says a data file could not be read.

Jinja2 is imported inside the functions, so that `fragbench --help` never pays for it.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import itertools
import re
from collections.abc import Callable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from fragbench.files import plan_sha256
from fragbench.report import pagedata

if TYPE_CHECKING:
    import jinja2
    import polars as pl

    from fragbench.report.pagedata import DataFolder

REPORT_HTML = "report.html"
REPORT_DATA = "report" + pagedata.DATA_SUFFIX
"""The folder beside report.html holding its data folder (pagedata.data_root)."""
TEMPLATES = Path(__file__).parent / "templates"
PAGE_SCRIPT_FILE = TEMPLATES / "page.js"
"""The pages' one script (the filters and the header's scroll padding)."""

Redact = Callable[[str], str]
"""What every value of a page goes through before it is escaped: a `Redactor`'s `text`."""

# Exact-level reasons in the order a reader meets them: what holds first, then each way a
# citation fails. Words, symbols and line styles differ per reason, so that a reader who cannot
# tell the colours apart still can (the symbol and the underline or border style say it too).
REASON_WORDS = {
    "valid": "valid",
    "misattributed": "misattributed",
    "not_verbatim": "not verbatim",
    "not_supplied": "not supplied",
    "unknown_id": "unknown ID",
    "empty_extract": "empty",
}
REASON_HELP = {
    "valid": "the extract is word for word in the text shown under the cited ID",
    "misattributed": "word for word in another fragment shown, not in the cited one",
    "not_verbatim": "word for word in no fragment shown",
    "not_supplied": "the ID is a fact of the case that this call was not shown",
    "unknown_id": "the ID is no fact of the case",
    "empty_extract": "the extract is empty or only whitespace",
}
REASON_SYMBOLS = {
    "valid": "✓",
    "misattributed": "⇄",
    "not_verbatim": "≠",
    "not_supplied": "∉",
    "unknown_id": "?",
    "empty_extract": "∅",
}
LOCATED = ("valid", "misattributed")
"""The reasons whose extract is in a supplied fragment, and so is highlighted there."""

STATUS_WORDS = {"not_sent": "never sent", "in_progress": "in progress"}


# -- Highlighting: where each extract is, and the text cut where extracts overlap -------------

@attrs.frozen
class Segment:
    """A stretch of a fragment's text, and the citations (0-based numbers) whose extract
    covers all of it: none for plain text."""

    text: str
    citations: tuple[int, ...]


def locate(fragments: Sequence[tuple[str, str]], cited_id: str, extract: str,
           reason: str) -> tuple[int, int] | None:
    """Where a citation's extract is highlighted: (index of the fragment, offset in its text),
    or None when it is highlighted nowhere.

    `fragments` are the (fact ID, text) pairs the call showed, in order. A valid extract goes
    in the first text shown under the cited ID that holds it; a misattributed one in the first
    text shown under another ID that holds it; each at its first occurrence. Any other reason
    (not verbatim, not supplied, unknown ID, empty) has no place in what was shown."""
    if not extract or reason not in LOCATED:
        return None
    for index, (fact_id, text) in enumerate(fragments):
        if (fact_id == cited_id) == (reason == "valid"):
            start = text.find(extract)
            if start >= 0:
                return index, start
    return None


def segments(text: str, spans: Sequence[tuple[int, int, int]]) -> list[Segment]:
    """Cut `text` at every edge of the spans (citation number, start, end exclusive), so that
    highlights never nest: each segment lists every citation whose span covers it, in citation
    order. Joined, the segments are the text; for each citation, the segments listing it are
    contiguous and join to its span's text. An empty span marks nothing."""
    for number, start, end in spans:
        if not 0 <= start <= end <= len(text):
            raise ValueError(f"citation {number}: span {start}..{end} is outside a text of "
                             f"{len(text)} characters")
    live = [(n, s, e) for n, s, e in spans if s < e]
    if live and all((s, e) == live[0][1:] for _, s, e in live):  # one stretch (often all of it)
        _, a, b = live[0]
        numbers = tuple(sorted(n for n, _, _ in live))
        return [seg for seg in (Segment(text[:a], ()), Segment(text[a:b], numbers),
                                Segment(text[b:], ())) if seg.text]
    cuts = sorted({0, len(text), *(s for _, s, _ in live), *(e for _, _, e in live)})
    return [Segment(text[a:b], tuple(sorted(n for n, s, e in live if s <= a and b <= e)))
            for a, b in itertools.pairwise(cuts)]


# -- What the template is given -----------------------------------------------------------------

def _money(value: Decimal | None) -> str:
    from fragbench.budget.money import usd

    return "—" if value is None else usd(value)


def _count(value: int | None) -> str:
    return "—" if value is None else str(value)


def _fragments(row: dict[str, Any], cites: list[dict[str, Any]]
               ) -> list[tuple[str, str, list[Segment] | None]]:
    """The call's fragments as (fact ID, text, its segments where an extract is highlighted in
    it, else None). Each located citation gets `found_in`, the fact ID of the fragment that
    holds it."""
    ids = row["supplied_ids"] or []
    texts = row["supplied_texts"] if row["supplied_texts"] is not None else [""] * len(ids)
    shown = list(zip(ids, texts, strict=True))
    spans: dict[int, list[tuple[int, int, int]]] = {}
    for cite in cites:
        where = locate(shown, cite["id"], cite["extract"], cite["reason"])
        cite["found_in"] = None if where is None else shown[where[0]][0]
        if where is not None and cite["extract"]:
            index, start = where
            spans.setdefault(index, []).append(
                (cite["citation"], start, start + len(cite["extract"])))
    return [(fact_id, text, segments(text, spans[index]) if index in spans else None)
            for index, (fact_id, text) in enumerate(shown)]


def _usage(row: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(field, label, value) of the call's usage and money, as recorded."""
    cost = _money(row["cost_usd"])
    if row["cost_unknown"]:
        cost = f"unknown: {row['cost_unknown']}"
    return [
        ("model", "model as returned", row["model"] or "—"),
        ("service_tier", "service tier", row["service_tier"] or "—"),
        ("input_tokens", "input tokens", _count(row["input_tokens"])),
        ("cached_tokens", "cached", _count(row["cached_tokens"])),
        ("cache_write_tokens", "cache writes", _count(row["cache_write_tokens"])),
        ("output_tokens", "output tokens", _count(row["output_tokens"])),
        ("reasoning_tokens", "of which reasoning", _count(row["reasoning_tokens"])),
        ("cost_usd", "cost (USD)", cost),
        ("reserved_usd", "reserved (USD)", _money(row["reserved_usd"])),
        ("counted_usd", "counted by the budget (USD)", _money(row["counted_usd"])),
    ]


PAGE_SIZES = (25, 50, 100, 200)
"""The page sizes a reader can pick; the first page shows PAGE_SIZE calls."""
PAGE_SIZE = 50
AVAILABILITY_SHOWN = 60
"""Passages (case x language x variant) the availability table shows whole; a larger series
shows the first ones and each setting's totals over all (availability.parquet has every row)."""
CALL_TEXT = ("answer", "text", "parse_error", "error", "failure", "refusal",
             "incomplete_reason", "stop_reason", "stop_detail", "raw_response")
"""calls.parquet text columns the page shows, as they are (each redacted)."""


def memoized(redact: Redact) -> Callable[[Any], Any]:
    """`redact` applied to each string value, once per distinct value (a page repeats the same
    fragment and extract many times); anything that is not a string is returned as it is."""
    memo: dict[str, str] = {}

    def red(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        found = memo.get(value)
        if found is None:
            found = memo[value] = redact(value)
        return found
    return red


UNSENT_LISTED = 200
"""Calls never sent that the page lists one by one (the first, in the plan's order), each with
what it would have been shown; beyond, they are counted on the page, and every one is in
calls.parquet. So a page's size and cost follow the calls sent: a series stopped after 8
calls of 100,000 planned costs what 208 calls cost, not 100,000."""


def listed_calls(calls: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """The calls the page lists (every call sent, and the first UNSENT_LISTED never sent),
    in the plan's order, and how many never sent are left out."""
    import polars as pl

    never = pl.col("status") == "not_sent"
    # A sort or a filter copies every column, the bodies too (gigabytes at 100,000 calls):
    # skipped where it would change nothing (calls.parquet is in plan order, and a series
    # that sent its calls has no unsent call to leave out).
    ordered = calls if calls["seq"].is_sorted() else calls.sort("seq")
    if (ordered["status"] == "not_sent").sum() <= UNSENT_LISTED:
        return ordered, 0
    listed = ordered.filter(~never | (never.cum_sum() <= UNSENT_LISTED))
    return listed, ordered.height - listed.height


def _utf16(text: str) -> int:
    """`text`'s length in UTF-16 code units (what JavaScript's slice counts)."""
    return len(text) if text.isascii() else len(text.encode("utf-16-le")) // 2


def coded(values: pl.Series, red: Callable[[Any], Any]) -> list[Any]:
    """A column of the index, dictionary-coded: [its distinct values, each redacted; each
    call's value as its position in that list] (a few bytes a call whatever the value)."""
    import polars as pl

    column = values.cast(pl.String).fill_null("")
    distinct = column.unique(maintain_order=True).to_list()
    return [[red(v) for v in distinct],
            column.cast(pl.Enum(distinct)).to_physical().to_list()]


def _call_index(listed: pl.DataFrame, citations: pl.DataFrame | None,
                group_frame: pl.DataFrame | None, keys: list[str], red: Callable[[Any], Any]
                ) -> tuple[dict[str, Any], list[str]]:
    """What the page itself holds of every listed call: what the filters compare and what the
    URL names, each column dictionary-coded (`coded`), every value redacted here. A call's ID
    is not stored where it is what page.js derives from the others (CASE-LANG-VARIANT-MODE-rREP,
    as the plan names calls); `ids` holds the others by position. `fields` names each column
    by a filter's data-field (`reasons`: the call's citation reasons, space-separated;
    `group:KEY`: its case's group value). Also returns each call's ID, redacted, in order."""
    import polars as pl

    frame = listed.select("call_id", "case", "lang", "variant", "mode",
                          pl.col("rep").cast(pl.String))
    if citations is not None and citations.height:
        reasons = (citations.sort("call_id", "citation").group_by("call_id")
                   .agg(pl.col("reason").str.join(" ").alias("reasons")))
        frame = frame.join(reasons, on="call_id", how="left", maintain_order="left")
    else:
        frame = frame.with_columns(pl.lit("").alias("reasons"))
    if group_frame is not None and keys:
        named = group_frame.unique("case").select(
            "case", *(pl.col(k).alias(f"group:{k}") for k in keys))
        frame = frame.join(named, on="case", how="left", maintain_order="left")
    fields = {name: coded(frame[name], red)
              for name in ("case", "lang", "variant", "mode", "rep", "reasons",
                           *(f"group:{k}" for k in keys))}
    ids = [red(i) for i in frame["call_id"].to_list()]
    parts = [[values[code] for code in codes] for values, codes in
             (fields[n] for n in ("case", "lang", "variant", "mode", "rep"))]
    odd = {str(n): call_id for n, (call_id, *cell) in enumerate(zip(ids, *parts, strict=True))
           if call_id != "{}-{}-{}-{}-r{}".format(*cell)}
    return {"count": listed.height, "fields": fields, "ids": odd}, ids


def _call_views(rows: list[dict[str, Any]], ids: list[str], cites_of: dict[str, list[Any]],
                groups: dict[str, dict[str, str]], red: Callable[[Any], Any],
                questions: dict[tuple[str, str], str]) -> tuple[dict[str, Any], list[str]]:
    """One data file of calls (page.js draws each call's card from it) and each call's search
    text: every value redacted here, one value at a time (the file's JSON is escaped by
    `pagedata.island`; the page's script puts each value in as text, never as markup).

    `texts` holds each distinct fragment text of the file once (the same passage is shown to
    many calls, and a case's calls are neighbours in plan order); each call's fragment is
    [fact ID, index in `texts`] or, where extracts are highlighted, [fact ID, index, pieces], a
    piece being [length in UTF-16 code units, citation numbers] (or [text, numbers] where the
    redactor changed the text). A citation is [number, cited ID, extract, reason, reason at the
    typographic level, fact ID of the fragment holding it (a located extract) or null]; a
    located extract is null where the pieces of a fragment mark it (the same characters, shown
    there already: each passage is stored once, and page.js reads the extract from it). `q` is
    the index in `texts` of the call's question (none for a series recorded before
    questions.parquet). Empty values are left out, and so is the answer text as it came where
    an answer parsed (the card never shows it; the raw response holds it).

    A call's search text is its answer, its unparsed text and each extract that neither holds
    (page.js searches the call ID, then this, case ignored: an extract inside the answer would
    find nothing the answer does not)."""
    texts: list[str] = []
    text_index: dict[str, int] = {}

    def stored(text: str) -> int:
        """`text`'s index in `texts`, stored (redacted) the first time it is met."""
        index = text_index.get(text)
        if index is None:
            index = text_index[text] = len(texts)
            texts.append(red(text))
        return index

    views, searched = [], []
    for row, call_id in zip(rows, ids, strict=True):
        cites = cites_of.get(row["call_id"], [])
        frags = []
        marked: set[int] = set()  # citations whose extract the page reads from a fragment
        for fact_id, whole, cut in _fragments(row, cites):
            index = stored(whole)
            entry: list[Any] = [red(fact_id), index]
            if cut is not None and texts[index] == whole:
                # A piece by its length in UTF-16 code units (what JavaScript's slice
                # counts), as the text is already in `texts`.
                entry.append([[_utf16(seg.text), list(seg.citations)] for seg in cut])
                marked.update(n for seg in cut for n in seg.citations)
            elif cut is not None:
                # The redactor changed the text: each piece redacted on its own, as text.
                entry.append([[red(seg.text), list(seg.citations)] for seg in cut])
            frags.append(entry)
        view: dict[str, Any] = {
            "id": call_id, "seq": row["seq"], "case": red(row["case"]),
            "lang": red(row["lang"]), "variant": red(row["variant"]), "mode": red(row["mode"]),
            "rep": row["rep"], "status": red(row["status"]),
            "words": red(STATUS_WORDS.get(row["status"], row["status"])),
            "frags": frags,
            # A located extract is the text its pieces mark, in a fragment stored as it was
            # (the redactor changed nothing there): null here, read from there by page.js.
            "cites": [[c["citation"], red(c["id"]),
                       None if c["citation"] in marked else red(c["extract"]), red(c["reason"]),
                       red(c["reason_folded"]), red(c.get("found_in"))] for c in cites],
            "usage": [red(value) for _, _, value in _usage(row)],
        }
        asked = questions.get((row["case"], row["lang"]))
        if asked is not None:
            view["q"] = stored(asked)
        for column in CALL_TEXT:
            if column == "text" and row["parsed"]:
                continue
            if row[column] is not None and row[column] != "":
                view[column] = red(row[column])
        if row["parsed"]:
            view["parsed"] = True
        if row["http_status"] is not None:
            view["http_status"] = row["http_status"]
        if row["redacted"]:
            view["redacted"] = True
        if row["case"] in groups:
            view["groups"] = {key: red(value) for key, value in groups[row["case"]].items()}
        views.append(view)
        parts = [p for p in (view.get("answer", ""), view.get("text", "")) if p]
        for cite, raw in zip(view["cites"], cites, strict=True):
            extract = raw["extract"] if cite[2] is None else cite[2]  # as the page shows it
            if extract and not any(extract in p for p in parts):
                parts.append(extract)
        searched.append("\n".join(parts))
    return {"texts": texts, "calls": views}, searched


def _write_calls(folder: DataFolder, listed: pl.DataFrame, citations: pl.DataFrame | None,
                 ids: list[str], groups: dict[str, dict[str, str]], redact: Redact,
                 questions: dict[tuple[str, str], str], series_dir: Path) -> None:
    """The listed calls' data files into `folder`: `calls-NNNN` of SHARD_CALLS calls each, in
    plan order (`_call_views`), then `search-NNNN` of SEARCH_CALLS calls' search texts each.
    One file's calls at a time become Python records (only the columns a card reads), and
    each file redacts through its own memo, so that memory follows a file, not the series;
    the bodies, when `listed` lacks them, are read BODY_BLOCK calls at a time
    (`_with_bodies`)."""
    import polars as pl

    cites = None
    if citations is not None and citations.height:
        at = listed.select("call_id", pl.int_range(pl.len()).alias("_at"))
        cites = citations.join(at, on="call_id").sort("_at", "citation")
    searched: list[str] = []
    block = listed
    for number, start in enumerate(range(0, listed.height, pagedata.SHARD_CALLS), start=1):
        end = min(start + pagedata.SHARD_CALLS, listed.height)
        if start % BODY_BLOCK == 0:  # the next block's columns, its bodies with them
            block = _with_bodies(listed.slice(start, BODY_BLOCK), series_dir).select(
                *_SHOWN_COLUMNS)
        cites_of: dict[str, list[dict[str, Any]]] = {}
        if cites is not None:
            lo, hi = (int(cites["_at"].search_sorted(start)),
                      int(cites["_at"].search_sorted(end)))
            for cite in cites.slice(lo, hi - lo).to_dicts():
                cites_of.setdefault(cite["call_id"], []).append(cite)
        data, texts = _call_views(block.slice(start % BODY_BLOCK, end - start).to_dicts(),
                                  ids[start:end],
                                  cites_of, groups, memoized(redact), questions)
        folder.add(pagedata.shard_name("calls", number), data)
        searched += texts
    size = pagedata.SEARCH_CALLS
    for number, start in enumerate(range(0, len(searched), size), start=1):
        folder.add(pagedata.shard_name("search", number), searched[start:start + size])


BODY_BLOCK = 100 * pagedata.SHARD_CALLS
"""Listed calls whose bodies are read from calls.parquet together (`_with_bodies`): some 100
MiB of bodies at a time, the file read about once over (a smaller block reads more of it)."""
FILE_ROW = "_file_row"
"""The column `render` adds to a calls table without its bodies: each call's row in
calls.parquet, where `_with_bodies` reads them."""


def _with_bodies(part: pl.DataFrame, series_dir: Path) -> pl.DataFrame:
    """`part` (listed calls, in their order) with the calls table's bodies (`BODY_COLUMNS`):
    as it is when it holds them; else read from the series' calls.parquet at each call's
    `FILE_ROW`, the rows from the first to the last of `part` at once. The file's call IDs
    must be `part`'s: a calls.parquet rewritten since the table was read is refused."""
    import polars as pl

    from fragbench.errors import SeriesError
    from fragbench.series.folder import BODY_COLUMNS, unreadable_table
    from fragbench.tables import PARQUET_ERRORS

    missing = [c for c in BODY_COLUMNS if c not in part.columns]
    if not missing:
        return part
    if not part.height:
        return part.with_columns(pl.lit(None, pl.String).alias(c) for c in missing)
    rows = part.get_column(FILE_ROW)
    first, last = int(rows.min()), int(rows.max())  # type: ignore[arg-type]
    path = series_dir / "calls.parquet"
    try:
        read = (pl.scan_parquet(path).select("call_id", *missing)
                .slice(first, last - first + 1).collect())
    except PARQUET_ERRORS as exc:
        raise unreadable_table(series_dir, "calls", "calls.parquet", exc) from None
    if read.height == last - first + 1:
        bodies = read.select(pl.all().gather(rows - first))
        if bodies.get_column("call_id").equals(part.get_column("call_id")):
            return part.hstack(bodies.drop("call_id"))
    raise SeriesError(f"{path}: its calls are not those of the calls table the report was "
                      "given (the file changed since it was read, or the table was filtered or "
                      f"sorted without its bodies); run `fragbench report {series_dir}` again.")


_SHOWN_COLUMNS = ("call_id", "seq", "case", "lang", "variant", "mode", "rep", "status",
                  "supplied_ids", "supplied_texts", "parsed", "http_status", "redacted",
                  "model", "service_tier", "input_tokens", "cached_tokens",
                  "cache_write_tokens", "output_tokens", "reasoning_tokens", "cost_usd",
                  "cost_unknown", "reserved_usd", "counted_usd", *CALL_TEXT)
"""The calls.parquet columns a call's card reads (`_call_views`, `_usage`)."""


def _groups(series_dir: Path, tables: dict[str, pl.DataFrame]
            ) -> tuple[list[str], pl.DataFrame | None, list[str]]:
    """The series' case groups (cases.parquet: `case`, then one String column per group), as
    (group keys in the table's order, a frame of `case` and those keys as strings, columns
    left out); none when the series has no such table. A value left null is shown as an
    empty group value.

    A column whose name breaks the corpus's group-key rule (`[a-z][a-z0-9_]*`,
    corpus_columnar.GROUP_KEY) is left out, and the page names it: fragbench never records
    one, but a cases.parquet written by hand may hold any name, and a group key becomes an
    attribute name (`data-group-KEY`) and a filter's id. Leaving it out (rather than refusing)
    keeps the rest of the page, which the column does not touch, readable."""
    import polars as pl

    from fragbench.corpus.columnar import GROUP_KEY
    from fragbench.series.folder import read_table

    cases = tables.get("cases")
    if cases is None and (series_dir / "cases.parquet").is_file():
        cases = read_table(series_dir, "cases", "cases.parquet")  # one line if damaged
    if cases is None or "case" not in cases.columns:
        return [], None, []
    keys = [c for c in cases.columns if c != "case" and GROUP_KEY.fullmatch(c)]
    skipped = [c for c in cases.columns if c != "case" and c not in keys]
    return keys, cases.select(pl.col("case").cast(pl.String),
                              *(pl.col(k).cast(pl.String).fill_null("") for k in keys)), skipped


def _questions(series_dir: Path, listed: pl.DataFrame) -> dict[tuple[str, str], str]:
    """(case, lang) -> the question, for the calls the page lists; none when the series
    recorded no questions.parquet (before issue 26)."""
    from fragbench.series.folder import read_table

    if not (series_dir / "questions.parquet").is_file():
        return {}
    table = read_table(series_dir, "questions", "questions.parquet")  # one line if damaged
    if not {"case", "lang", "question"} <= set(table.columns):
        return {}
    shown = table.join(listed.select("case", "lang").unique(), on=["case", "lang"],
                       how="semi")
    return {(c, lang): q for c, lang, q in shown.select("case", "lang", "question").rows()
            if isinstance(q, str)}


def _listed_groups(frame: pl.DataFrame | None, keys: list[str], listed: pl.DataFrame
                   ) -> dict[str, dict[str, str]]:
    """case -> group key -> value, for the cases of the calls the page lists only (a plan of
    100,000 calls holds tens of thousands of cases; the page's data names those it shows)."""
    if frame is None:
        return {}
    shown = frame.join(listed.select("case").unique(), on="case", how="semi")
    return {row["case"]: {k: row[k] for k in keys} for row in shown.to_dicts()}


SUMMARY_COUNTS = (("calls", "planned"), ("sent", "sent"), ("answered", "answered"),
                  ("parsed", "parsed"), ("citations", "citations"),
                  ("valid", "valid citations"), ("not_valid", "other citations"))
"""The summary's columns: counts of calls and citations, never a rate or a score."""


def _summary(calls: pl.DataFrame, citations: pl.DataFrame | None, keys: list[str],
             groups: pl.DataFrame | None) -> list[dict[str, Any]]:
    """Counts per value of each group key (when the series has groups), then per mode,
    language and variant: planned, sent, answered (completed or incomplete), parsed, and the
    citations by reason at the exact level (valid, other). Counts only, no score."""
    import polars as pl

    from fragbench.columns import ANSWERED

    per_call = calls.select("call_id", "case", "lang", "variant", "mode", "status", "parsed")
    if citations is not None and citations.height:
        counted = citations.group_by("call_id").agg(
            pl.len().alias("citations"), (pl.col("reason") == "valid").sum().alias("valid"))
        per_call = per_call.join(counted, on="call_id", how="left")
    else:
        per_call = per_call.with_columns(pl.lit(0).alias("citations"), pl.lit(0).alias("valid"))
    per_call = per_call.with_columns(pl.col("citations", "valid").fill_null(0))
    if groups is not None and keys:
        named = groups.select("case", *(pl.col(k).alias(f"group:{k}") for k in keys))
        per_call = (per_call.join(named.unique("case"), on="case", how="left",
                                  maintain_order="left")
                    .with_columns(pl.col(f"group:{k}").fill_null("") for k in keys))
    tables = []
    for column, label in [*((f"group:{k}", f"group {k}") for k in keys),
                          ("mode", "mode"), ("lang", "language"), ("variant", "variant")]:
        agg = per_call.group_by(column).agg(
            pl.len().alias("calls"),
            (pl.col("status") != "not_sent").sum().alias("sent"),
            pl.col("status").is_in(ANSWERED).sum().alias("answered"),
            pl.col("parsed").fill_null(False).sum().alias("parsed"),
            pl.col("citations").sum().alias("citations"),
            pl.col("valid").sum().alias("valid"),
        ).with_columns((pl.col("citations") - pl.col("valid")).alias("not_valid")
                       ).sort(column)
        tables.append({"by": label, "group": column.startswith("group:"),
                       "key": column.removeprefix("group:"),
                       "rows": [[str(r[column]), *(r[c] for c, _ in SUMMARY_COUNTS)]
                                for r in agg.to_dicts()]})
    return tables


def _availability(availability: pl.DataFrame) -> dict[str, Any]:
    """The sensitivity matrix: settings (chunk size / top-k, then the full passage) as columns,
    one row per case x language x variant (the first AVAILABILITY_SHOWN of them); each cell
    the record of that passage and setting; and per setting, totals over every passage
    (conditions supplied whole / conditions, passages with all of them supplied). The totals
    are whole-column sums and only the rows shown become Python records, so that the matrix
    of a large plan costs its columns, not a loop over its passages."""
    import polars as pl

    retrieval = pl.col("mode") == "retrieval"
    keyed = availability.with_columns(
        pl.when(retrieval).then(pl.col("chunk_size")).alias("_size"),
        pl.when(retrieval).then(pl.col("top_k")).alias("_top"))
    per_setting = (keyed.group_by("_size", "_top")
                   .agg(pl.col("main_setting").any().alias("main"),
                        pl.col("n_conditions_supplied").sum().alias("supplied"),
                        pl.col("n_conditions").sum().alias("conditions"),
                        (pl.col("n_conditions_supplied") == pl.col("n_conditions")).sum()
                        .alias("whole"), pl.len().alias("passages"))
                   .sort("_size", "_top", nulls_last=True))
    # One column per setting, the full passage last (null sorts last), always shown: a
    # series planned without full calls has its column empty, with zero totals.
    settings = per_setting.to_dicts()
    if not settings or settings[-1]["_size"] is not None:
        settings.append({"_size": None, "_top": None, "main": False, "supplied": 0,
                         "conditions": 0, "whole": 0, "passages": 0})
    columns = [{"key": (r["_size"], r["_top"]),
                "label": "full passage" if r["_size"] is None else f"{r['_size']}/{r['_top']}",
                "main": r["_size"] is not None and r["main"]} for r in settings]
    totals = [{k: r[k] for k in ("supplied", "conditions", "whole", "passages")}
              for r in settings]
    passages = keyed.select("case", "lang", "variant").unique()
    shown = passages.sort("case", "lang", "variant").head(AVAILABILITY_SHOWN)
    cells: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in keyed.join(shown, on=["case", "lang", "variant"], how="semi").to_dicts():
        size, top = r.pop("_size"), r.pop("_top")
        cells[(r["case"], r["lang"], r["variant"], size, top)] = {
            **r, "conditions_cut": r.get("conditions_cut") or []}
    return {"columns": columns, "passages": passages.height, "totals": totals,
            "rows": [{"passage": p, "cells": [cells.get((*p, *c["key"])) for c in columns]}
                     for p in shown.rows()]}


def _measure_view(section: Any) -> dict[str, Any]:
    """A primary measure's section (`fragbench.report.data.measure_sections`) as the template draws
    it: each value already formatted as report.md shows it, a plain string that the
    environment then redacts and escapes like any other."""
    from fragbench.report.data import SHOWN_ROWS, plain_cell, rows_said

    return {"name": section.measure, "tables": section.tables, "own": section.own,
            "shown_rows": SHOWN_ROWS,
            "parts": [{"title": shown.title, "rows_said": rows_said(shown),
                       "columns": shown.frame.columns,
                       "rows": [[plain_cell(v) for v in row] for row in shown.frame.iter_rows()]}
                      for shown in section.parts]}


def _figure_words(tables: dict[str, pl.DataFrame]) -> dict[str, str]:
    from fragbench.report.figures import figure_words  # matplotlib is not imported by it

    return figure_words(tables)


def _figure(path: Path) -> str | None:
    """A PNG as a data URI (so the page needs no file beside it), or None if absent."""
    if not path.is_file():
        return None
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _options(calls: pl.DataFrame, column: str) -> list[str]:
    """A filter's options: the values the calls hold, sorted."""
    return sorted(v for v in calls[column].unique().to_list() if v is not None)


@attrs.frozen
class PageScript:
    """The pages' one script as inserted, and the Content-Security-Policy source allowing it."""

    source: str
    """page.js as read: exactly the text between the page's `<script>` and `</script>`."""
    csp: str
    """`'sha256-…'` of `source` (UTF-8), the only script the policy allows."""


@functools.cache
def page_script() -> PageScript:
    """page.js and its hash, both from the file: the policy allows exactly the script the
    template inserts, whatever else a page holds. A source that could end or comment out its
    own `<script>` element is refused (our bug, not a user's)."""
    source = PAGE_SCRIPT_FILE.read_text(encoding="utf-8")
    if re.search(r"</script|<!--|<script", source, re.IGNORECASE):
        raise RuntimeError(f"{PAGE_SCRIPT_FILE}: the page script may not hold '<script', "
                           "'</script' or '<!--': it is inserted inline as it is")
    digest = base64.b64encode(hashlib.sha256(source.encode("utf-8")).digest()).decode("ascii")
    return PageScript(source, f"'sha256-{digest}'")


def environment(redact: Redact) -> jinja2.Environment:
    """The Jinja2 environment of fragbench's HTML pages: the templates folder, autoescape on,
    strict undefined (a misspelt field fails the render instead of printing nothing), and the
    reason words, help and symbols as globals, so that every page draws reasons alike.

    Every value a template prints (`{{ … }}`, in text or in an attribute) goes through `redact`
    and then through the escape, one value at a time: a secret never reaches the page, and
    what the redactor gives back (which may decode escapes) is still escaped. Only the
    templates' own output (a macro's, the page script) is inserted as it is; nothing from a
    series is ever marked safe. `PAGE_SCRIPT` and `PAGE_SCRIPT_SOURCE` are `page_script()`."""
    import jinja2
    from markupsafe import Markup

    def finalize(value: Any) -> Any:
        # Markup here is template output whose values were finalized when it was rendered.
        return value if isinstance(value, Markup) else redact(str(value))

    script = page_script()
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
        keep_trailing_newline=True, finalize=finalize)
    env.globals.update(REASON_WORDS=REASON_WORDS, REASON_HELP=REASON_HELP,
                       REASON_SYMBOLS=REASON_SYMBOLS, PAGE_SCRIPT=Markup(script.source),
                       PAGE_SCRIPT_SOURCE=Markup(script.csp))
    env.filters["usd"] = _money
    return env


def render(series_dir: Path, tables: dict[str, pl.DataFrame] | None = None,
           redact: Redact | None = None, records: list[dict[str, Any]] | None = None,
           folder: DataFolder | None = None, plan: dict[str, Any] | None = None) -> str:
    """The page's text, from the series folder's tables (or those given, already loaded) and
    its journal's `records` (else read here) and its `plan` (plan.json, else read here); each
    value redacted by `redact` (by default a
    `Redactor` of the environment's secrets). The calls' data files go into `folder`
    (`write_html_report`); without one they are only hashed, so that the text is the page's
    as `write_html_report` would write it, its data folder's name included."""
    import polars as pl
    from markupsafe import Markup

    from fragbench.redact import Redactor
    from fragbench.report.data import limits, load_tables, measure_sections, repetitions_phrase
    from fragbench.series.folder import BODY_COLUMNS, FIGURES_DIR, read_json, read_plan
    from fragbench.series.journal import JOURNAL_FILE, read_journal

    if redact is None:
        redact = Redactor.from_env().text
    info = read_json(series_dir / "series.json")
    status = read_json(series_dir / "status.json")
    plan = read_plan(series_dir) if plan is None else plan
    if tables is None:
        tables = load_tables(series_dir)
    calls = tables["calls"]
    citations = tables.get("citations")
    if records is None:
        journal = series_dir / JOURNAL_FILE
        records = read_journal(journal) if journal.exists() else []
    times = [r["at"] for r in records
             if r.get("type") in ("reserve", "outcome") and r.get("at")]
    keys, group_frame, skipped_groups = _groups(series_dir, tables)
    # A calls table without its bodies (`load_tables`, `derive_tables`) says where each call
    # is in calls.parquet, which the cards read them from (`_with_bodies`).
    bodiless = any(c not in calls.columns for c in BODY_COLUMNS)
    listed, unlisted = listed_calls(calls.with_row_index(FILE_ROW) if bodiless else calls)
    groups = _listed_groups(group_frame, keys, listed)
    data, ids = _call_index(listed, citations, group_frame, keys, memoized(redact))
    if folder is None:
        folder = pagedata.DataFolder(None)
    _write_calls(folder, listed, citations, ids, groups, redact,
                 _questions(series_dir, listed), series_dir)
    data["files"] = {"dir": folder.name, "calls": pagedata.SHARD_CALLS,
                     "search": pagedata.SEARCH_CALLS}
    data["reasons"] = {r: [REASON_WORDS[r], REASON_HELP[r], REASON_SYMBOLS[r]]
                       for r in REASON_WORDS}
    data["usage"] = ([[field, label] for field, label, _ in _usage(listed.row(0, named=True))]
                     if listed.height else [])
    manifest = read_json(series_dir / "measures.json")
    occurring = set(citations["reason"].to_list()) if citations is not None else set()
    stop = status.get("stop") or {}
    figures = series_dir / FIGURES_DIR
    context = {
        "info": info,
        "status": status,
        "stop": stop,
        "plan_sha256": plan_sha256(plan, series_dir / "plan.json"),
        "retrieval": plan["parameters"]["retrieval"],
        "models": sorted(m for m in calls["model"].drop_nulls().unique().to_list() if m),
        "times": (times[0], times[-1]) if times else None,
        "status_counts": calls.group_by("status").len().sort("status").rows(),
        # The one value inserted as it is: JSON of values each redacted in _call_index, its
        # <, >, & and line separators escaped for a script element (pagedata.island), where
        # Jinja's HTML escape would be wrong (a script element decodes no entity).
        "island": Markup(pagedata.island(data)),
        "data_dir": folder.name,
        "planned": calls.height,
        "page_sizes": PAGE_SIZES,
        "page_size": PAGE_SIZE,
        "group_keys": keys,
        "skipped_groups": skipped_groups,
        "summary": _summary(calls, citations, keys, group_frame),
        "summary_counts": SUMMARY_COUNTS,
        "availability": (_availability(tables["availability"])
                         if "availability" in tables else None),
        "availability_shown": AVAILABILITY_SHOWN,
        "figures": {name: _figure(figures / f"{name}.png")
                    for name in ("availability", "citations")},
        "figure_words": _figure_words(tables),
        # (key, label, options, field of a call in the island, match): the select is
        # filter-KEY; the URL state names it KEY.
        "filters": [("case", "case", _options(listed, "case"), "case", "exact"),
                    ("lang", "language", _options(listed, "lang"), "lang", "exact"),
                    ("variant", "variant", _options(listed, "variant"), "variant", "exact"),
                    ("mode", "mode", _options(listed, "mode"), "mode", "exact"),
                    *((f"group-{k}", f"group {k}",
                       sorted({v[k] for v in groups.values()}), f"group:{k}", "exact")
                      for k in keys),
                    ("reason", "reason",
                     [(r, REASON_WORDS[r]) for r in REASON_WORDS if r in occurring],
                     "reasons", "word")],
        "reasons": [r for r in REASON_WORDS if r in occurring],
        "limits": limits(plan),
        "repetitions": repetitions_phrase(plan),
        "diagnostics": [e for e in manifest if e["kind"] == "diagnostic"],
        "measures": [_measure_view(section) for section in measure_sections(manifest, tables)],
        "not_sent": calls.filter(pl.col("status") == "not_sent").height,
        "unlisted": unlisted,
        "unsent_listed": UNSENT_LISTED,
    }
    return environment(redact).get_template("report.html.j2").render(context)


def write_html_report(series_dir: Path, tables: dict[str, pl.DataFrame] | None = None,
                      redact: Redact | None = None,
                      records: list[dict[str, Any]] | None = None,
                      plan: dict[str, Any] | None = None) -> Path:
    """Write report.html beside report.md (`render`) with its data folder, all or nothing
    (`pagedata.writing`: a failed write leaves the old page and its folder, never half of
    either, nor a page naming a folder that is not there)."""
    path = series_dir / REPORT_HTML
    with pagedata.writing(path) as folder:
        folder.publish(render(series_dir, tables, redact, records, folder, plan))
    return path
