"""The kit's check of measures: `check_measure`, failing with an AssertionError that names the
promise that broke (`fragbench.testing.promises.fail`).

    from fragbench.testing import check_measure

    def test_my_measure_keeps_the_contract():
        check_measure(MyMeasure())

What `fragbench measure` and `fragbench run` refuse
(`fragbench.series.measure_tables.output_problem`,
summary included) fails here in the same words, before a series is spent; and more, which the
core does not hold a measure to: every table keyed by case and language (no global score), the
same tables twice, the input left as it was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fragbench.columns import KEY_COLUMNS
from fragbench.series.measure_tables import KEYED as _KEYED
from fragbench.series.measure_tables import SUMMARY as _SUMMARY
from fragbench.testing.promises import API_PROMISE, declared_api, fail

if TYPE_CHECKING:
    import polars as pl

    from fragbench.interfaces import MeasureInput

API = API_PROMISE
"""The promise named when `api_version` is missing or not supported (`fragbench.api`)."""
IDENTITY = "declares its name and kind (primary or diagnostic)"
"""The promise named when `name` is not a non-empty string or `kind` is neither kind."""
COMPUTES = "computes its tables from any recorded series"
"""The promise named when `compute` raises, or returns no dict of named frames."""
KEYED = _KEYED
"""The promise named when a table, or a frame of its summary, lacks a `case` or `lang`
column."""
SUMMARY = _SUMMARY
"""The promise named when `summary(tables)` raises or returns anything but titled frames."""
DETERMINISTIC = "returns the same tables twice (deterministic)"
"""The promise named when two runs on the same input give different tables."""
READ_ONLY = "never changes its input"
"""The promise named when a frame of the `MeasureInput` differs after `compute`."""


def _frames(data: MeasureInput) -> dict[str, pl.DataFrame]:
    return {name: frame for name in ("facts", "retrieval", "calls")
            if (frame := getattr(data, name)) is not None}


def _same(a: pl.DataFrame, b: pl.DataFrame) -> bool:
    """Same columns, types and values, nulls included (a float NaN equals itself here)."""
    return a.schema == b.schema and a.equals(b, null_equal=True)


def _computed(measure: Any, who: str, data: MeasureInput, what: str) -> dict[str, pl.DataFrame]:
    """compute(data), checked as the core checks it (`output_problem`: its summary too), then
    every table keyed by case and language."""
    from fragbench.series.measure_tables import given_input, output_problem, read_hint

    try:
        # Given only the columns it declares it reads (`reads`), as the core gives them.
        tables = measure.compute(given_input(measure, data))
    except Exception as exc:
        raise fail(who, COMPUTES, f"compute() on {what} raised {type(exc).__name__}: "
                                  f"{exc}{read_hint(measure, exc)}") from exc

    def call(method: str, arg: Any) -> Any:
        try:
            return getattr(measure, method)(arg)
        except Exception as exc:
            raise fail(who, SUMMARY, f"{method}() of the tables computed on {what} raised "
                                     f"{type(exc).__name__}: {exc}") from exc

    problem = output_problem(measure, tables, call)
    if problem is not None:
        raise fail(who, problem[0], f"compute() on {what}: {problem[1]}")
    for name, frame in tables.items():
        missing = [c for c in KEY_COLUMNS if c not in frame.columns]
        if missing:
            raise fail(who, KEYED, f"compute() on {what}: table {name} has no "
                                   f"{' or '.join(missing)} column; publish results per case "
                                   "and language, never one number over everything")
    return tables


def _check_on(measure: Any, who: str, data: MeasureInput, what: str) -> None:
    before = {name: frame.clone() for name, frame in _frames(data).items()}
    main_setting = data.main_setting
    first = _computed(measure, who, data, what)
    after = _frames(data)
    changed = [name for name, frame in before.items()
               if name not in after or not _same(frame, after[name])]
    if changed or data.main_setting != main_setting:
        raise fail(who, READ_ONLY, f"compute() on {what} changed its input "
                                   f"({', '.join(changed) or 'main_setting'}); build new frames "
                                   "instead (Polars expressions never change their input)")
    second = _computed(measure, who, data, what)
    if list(first) != list(second):
        raise fail(who, DETERMINISTIC, f"compute() on {what} returned tables "
                                       f"{', '.join(first) or 'none'}, then "
                                       f"{', '.join(second) or 'none'}")
    for name, frame in first.items():
        if not _same(frame, second[name]):
            raise fail(who, DETERMINISTIC, f"compute() on {what}: table {name} differs from "
                                           "one run to the next; sort it, and pass "
                                           "maintain_order=True to group_by")


def check_measure(measure: Any, data: MeasureInput | None = None) -> None:
    """Fail, naming the promise, unless `measure` keeps the measure contract:

    - it declares `api_version` (one this fragbench supports), a `name`, a `kind` that is
      "primary" or "diagnostic", and its `tables` (table -> column -> type name, money
      columns `*_usd` as "Decimal(38, 18)", no table named as the core's own, `calls`,
      `facts` or `retrieval`, column names on one line without `|` or control characters);
    - run on `data` (default: the kit's sample series, `fragbench.testing.measure_samples`,
      once with a calls table of answered, unparsed, failed and never-sent calls, and once
      with `calls=None`), `compute` returns a dict of valid table names -> Polars DataFrames,
      only tables it declares, each with exactly the declared columns in order and of the
      declared types, money as exact decimals;
    - when it has `summary(tables)` and returned a table, the summary is a list of (title,
      DataFrame) pairs, each title one line, each frame's money exact and its rows keyed by
      `case` and `lang`, as the core checks it before writing;
    - every table has the key columns `case` and `lang` (no global score);
    - a second run returns the same tables (names, types, values, row order);
    - the input frames are left as they were.
    """
    from fragbench.series.measure_tables import declaration_problem

    who = declared_api("measure", measure)
    name = getattr(measure, "name", None)
    if not isinstance(name, str) or not name.strip():
        raise fail(who, IDENTITY, f"its name is {name!r}; give it `name = \"my-measure\"`")
    kind = getattr(measure, "kind", None)
    if kind not in ("primary", "diagnostic"):
        raise fail(who, IDENTITY, f"its kind is {kind!r}; a measure is \"primary\" "
                                  "(pre-registered: listed in the experiment's `measures`) or "
                                  "\"diagnostic\"")
    if not callable(getattr(measure, "compute", None)):
        raise fail(who, COMPUTES, "it has no compute(data) method")
    problem = declaration_problem(measure)
    if problem is not None:
        raise fail(who, problem[0], f"it {problem[1]}")
    if data is not None:
        _check_on(measure, who, data, "the data given")
        return
    from fragbench.testing.measure_samples import measure_input

    _check_on(measure, who, measure_input(), "the kit's sample series")
    _check_on(measure, who, measure_input(calls=False), "the kit's sample series before any "
                                                        "call (calls=None)")
