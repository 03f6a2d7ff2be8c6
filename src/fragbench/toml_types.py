"""How a TOML value's type is named in a message, and how the value would be written in the type
asked for: shared by the config reader (`fragbench.experiment.config`) and the backend kit's
parameter
check (`fragbench.transport.check_types`), which config imports, so it lives in neither."""

from __future__ import annotations

import datetime
import json
import re
from typing import Any

_TOML_TYPES: tuple[tuple[type, str, str, str], ...] = (
    (bool, "a boolean", "true or false", "{key} = true"),
    (int, "a whole number", "a whole number", "{key} = 3"),
    (float, "a number with a point", "a number", "{key} = 1.5"),
    (str, "a string", "a string", '{key} = "text"'),
    (datetime.datetime, "a date and time", "a date and time", "{key} = 2026-10-08T09:00:00"),
    (datetime.date, "a date", "a date", "{key} = 2026-10-08"),
    (list, "a list", "a list", '{key} = ["a", "b"]'),
    (dict, "a table", "a table", "[{key}] on a line of its own, its keys below it"),
)
"""TOML's types as the config's messages name them: (Python type, what a value is, what is
asked for, how one is written). bool before int, datetime before date: each is a subclass of
the next."""


def _toml_type(kind: type) -> tuple[str, str, str]:
    """(what a value is, what is asked for, an example) for one Python type of a TOML value."""
    for python_type, noun, wanted, example in _TOML_TYPES:
        if issubclass(kind, python_type):
            return noun, wanted, example
    return kind.__name__, kind.__name__, "{key} = ..."


def _shown(value: Any) -> str:
    """A scalar value as TOML spells it, in brackets, cut to one short line (a value may be a
    long paste); nothing for a list or a table."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = json.dumps(value)  # TOML's basic string: quotes, escapes, ASCII only
    elif isinstance(value, datetime.date):
        text = value.isoformat()
    elif isinstance(value, int | float):
        text = repr(value)
    else:
        return ""
    return f" ({text[:40]}...)" if len(text) > 40 else f" ({text})"


def _rewritten(key: str, value: Any, kinds: tuple[type, ...]) -> str | None:
    """The value rewritten in the expected type when that is plain (`"3"` or 3.0 where a whole
    number belongs: 3; a number where a string belongs: "3"; one short string where a list
    belongs: ["it"]), else None."""
    if int in kinds and isinstance(value, str) and re.fullmatch(r"[0-9]{1,18}", value.strip(),
                                                                re.ASCII):
        return f"{key} = {int(value)}"
    if int in kinds and isinstance(value, float) and value.is_integer() and abs(value) < 1e18:
        return f"{key} = {int(value)}"
    if str in kinds and isinstance(value, int | float) and not isinstance(value, bool):
        return f"{key} = {json.dumps(str(value))}"
    if list in kinds and isinstance(value, str) and len(value) <= 40:
        return f"{key} = [{json.dumps(value)}]"
    return None


def type_mismatch(key: str, value: Any, kind: type | tuple[type, ...]) -> str:
    """Words for a config value of the wrong type, after its key: what it is, what belongs
    there, and how to write it: `is a string ("3"); write a whole number: repetitions = 3`."""
    name = key.rsplit(".", 1)[-1]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    found = _toml_type(type(value))[0]
    asked = [_toml_type(k) for k in kinds]
    words = [w for _, w, _ in asked]
    if "a whole number" in words and "a number" in words:
        words.remove("a whole number")
    # The example of the first type that is not a string (a date, a number): the likelier one.
    example = next((e for k, (_, _, e) in zip(kinds, asked, strict=True) if k is not str),
                   asked[0][2])
    rewritten = _rewritten(name, value, kinds)
    how = (f": {rewritten}" if rewritten else
           f", for example {example.format(key=key if dict in kinds else name)}")
    return f"is {found}{_shown(value)}; write {' or '.join(dict.fromkeys(words))}{how}"
