"""What both reports of a series show, apart from how each page draws it: the limits its
report states (`limits`: the experiment's own, or the general ones) and how it counts
repetitions (`repetitions_phrase`), a table value as both show it (`plain_cell`), each other
primary measure's section (`measure_sections`: its tables' first SHOWN_ROWS rows, or its own
`summary`), and the tables measures.json lists (`load_tables`).

Read by report.md (`fragbench.report.markdown`, which re-exports these names) and report.html
(`fragbench.report.html`); here, below both, since report.md also writes report.html.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from fragbench.budget.money import usd
from fragbench.series.folder import BODY_COLUMNS, read_table, table_columns, tables_of

if TYPE_CHECKING:
    import polars as pl

LIMITS = [
    "This is a controlled lexical simulation, not a test of a provider's retrieval system or "
    "of web citation frequency.",
    "Results are reported per case, language and mode (and variant); a few repetitions do not "
    "estimate stable rates.",
    "A verbatim extract shows that the words are in the supplied evidence; it does not show "
    "that they support the whole answer. There is no overall fidelity score and no semantic "
    "\"error rate\" without an independent reference.",
    "Another provider requires a separately recorded, authorized series; its absence is never a "
    "comparison accomplished.",
]
"""What every experiment's results cannot show, stated by a report whose plan names no limits
of its own (config.toml's `limits`, frozen in the plan: protocol 1.0 names its own)."""


def limits(plan: dict[str, Any]) -> list[str]:
    """The limits a series' report states: its plan's own (`parameters.limits`), else LIMITS.
    Read from a plan on disk, so each is made a string and anything else is ignored."""
    own = plan.get("parameters", {}).get("limits") if isinstance(plan, dict) else None
    if isinstance(own, list) and own and all(isinstance(v, str) for v in own):
        return list(own)
    return list(LIMITS)


NUMBER_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                "ten")


def count_words(n: int, noun: str, plural: str | None = None) -> str:
    """`n noun` in words up to ten ("one repetition", "three repetitions"), digits beyond."""
    name = noun if n == 1 else plural or f"{noun}s"
    return f"{NUMBER_WORDS[n] if 0 <= n < len(NUMBER_WORDS) else f'{n:,}'} {name}"


def repetitions_phrase(plan: dict[str, Any]) -> str:
    """How a report says its repetitions are shown: "with the three repetitions as three",
    or "with one repetition" (nothing to keep apart); empty when the plan does not say."""
    reps = plan.get("parameters", {}).get("repetitions") if isinstance(plan, dict) else None
    if not isinstance(reps, int) or isinstance(reps, bool) or reps < 1:
        return ""
    if reps == 1:
        return "with one repetition"
    word = count_words(reps, "repetition").split(" ")[0]
    return f"with the {word} repetitions as {word}"


def plain_cell(value: Any) -> str:
    """A table value as both reports show it: null —, an empty list ∅, a list space-joined,
    yes/no, money as a plain exact decimal, a float to 6 significant digits."""
    if value is None:
        return "—"
    if isinstance(value, list):
        return " ".join(str(v) for v in value) if value else "∅"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Decimal):  # money: plain and exact, without the scale's zeros
        return usd(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


BUILTIN_SECTIONS = ("availability", "citations", "completeness", "usage")
"""Built-in measures with sections of their own; every other primary measure is shown by
`measure_sections`."""
SHOWN_ROWS = 20
"""A measure's table is shown in the reports up to this many rows, its row count said."""


@attrs.frozen
class Shown:
    """One titled frame of a measure's section: its first SHOWN_ROWS rows, and how many."""

    title: str
    frame: pl.DataFrame
    rows: int


@attrs.frozen
class MeasureSection:
    measure: str
    tables: tuple[str, ...]
    """The tables it wrote (in the series folder)."""
    parts: tuple[Shown, ...]
    own: bool
    """Drawn by the measure's own `summary`, rather than its tables as they are."""


def _installed(name: str) -> Any:
    from fragbench.plugins import registry

    return next((e.obj for e in registry().entries if e.kind == "measure" and e.name == name),
                None)


def measure_sections(manifest: list[dict[str, Any]], tables: dict[str, pl.DataFrame]
                     ) -> list[MeasureSection]:
    """A section for every primary measure other than the built-ins (`BUILTIN_SECTIONS`), in
    the order measures.json lists them. By default it shows each of the measure's tables; a
    measure may define `summary(tables) -> list[tuple[str, pl.DataFrame]]` (its own tables by
    name in, titled frames out) to show those instead. Either way the core draws them (the
    first SHOWN_ROWS rows, the row count said; each value formatted, escaped and, in
    report.html, redacted), so a measure never writes markup. A measure no longer installed
    is shown by default."""
    from fragbench.errors import PluginError
    from fragbench.plugins import call_plugin, describe
    from fragbench.series.measure_tables import summary_problem

    names: dict[str, list[str]] = {}
    for entry in manifest:
        if entry["kind"] == "primary" and entry["measure"] not in BUILTIN_SECTIONS:
            names.setdefault(entry["measure"], []).append(entry["table"])
    sections = []
    for name, owned in names.items():
        measure = _installed(name)
        mine = {t: tables[t] for t in owned}
        own = measure is not None and callable(getattr(measure, "summary", None))
        if own:
            parts = call_plugin("measure", measure, "summary", mine)
            problem = summary_problem(parts)
            if problem is not None:
                raise PluginError(f"{describe('measure', measure)}: {problem[1]}; fix or "
                                  "uninstall that plugin.")
        else:
            parts = list(mine.items())
        sections.append(MeasureSection(name, tuple(owned), tuple(
            Shown(title, frame.head(SHOWN_ROWS), frame.height) for title, frame in parts), own))
    return sections


def rows_said(shown: Shown) -> str:
    if shown.rows <= shown.frame.height:
        return f"{shown.rows} row{'s' if shown.rows != 1 else ''}"
    return f"{shown.rows} rows, the first {shown.frame.height} shown"


def load_tables(series_dir: Path) -> dict[str, pl.DataFrame]:
    """Every table measures.json lists, by name (calls and each measure's); the calls table
    without its bodies (`BODY_COLUMNS`: a gigabyte at 100,000 calls), which report.html's
    cards read from calls.parquet a block of calls at a time."""
    tables = {}
    for name, rel in tables_of(series_dir, recorded=False):
        columns = None
        if name == "calls":
            columns = [c for c in table_columns(series_dir, name, rel) if c not in BODY_COLUMNS]
        tables[name] = read_table(series_dir, name, rel, columns)
    return tables


def with_case_groups(frame: pl.DataFrame, groups: pl.DataFrame | None
                     ) -> tuple[pl.DataFrame, list[str]]:
    """`frame` with the corpus's case groups (cases.parquet) joined on `case`, when both have
    it, and the group keys it gained (those `frame` did not already have): what report.md's
    capped tables and the figures sum by, before language, variant and mode."""
    if groups is None or "case" not in frame.columns or "case" not in groups.columns:
        return frame, []
    extra = [c for c in groups.columns if c != "case" and c not in frame.columns]
    if not extra:
        return frame, []
    return frame.join(groups.select("case", *extra), on="case", how="left",
                      maintain_order="left"), extra


def reason_counts(citations: pl.DataFrame) -> pl.DataFrame:
    """`call_id`, then one count per exact-level reason that occurs (null where a call has
    none of it): what the per-call table and both citation figures stack."""
    return (citations.group_by("call_id", "reason").len()
            .pivot(on="reason", index="call_id", values="len"))
