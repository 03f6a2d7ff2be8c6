"""JSON from outside, read the careful way: a response body is parsed only after it was
recorded, and only if it is a document with one meaning.

`loads(text)` refuses, with BodyError (its `kind` a BackendFailure kind, its message one
sentence):

- nesting deeper than MAX_DEPTH (`bad_body`), found by a linear scan before any parsing, so
  that nothing recursive (the JSON parser, a reader, the redactor) ever meets deep data;
- a key repeated in any object (`repeated_key`): two `usage` objects or two `model` keys give
  two readers two different answers (Python's json keeps the last, another keeps the first),
  so such a body is no response, whichever one would be priced;
- anything that is not strict JSON (`bad_body`): NaN and Infinity included, and integers too
  long for Python to convert.

`clean(text)` makes what a JSON escape left in a parsed string writable (a lone surrogate
becomes U+FFFD); backends use it as `fragbench.transport.clean`. This module imports nothing of
fragbench: the wire and the kit both read it.
"""

from __future__ import annotations

import json
import operator
import re
from itertools import accumulate
from typing import Any

MAX_DEPTH = 64
"""Deeper than any API's response (a Responses body nests about 6 levels): refused unread."""

_STRINGS = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"?', re.DOTALL)
"""A JSON string (or an unterminated one, to the end): possessive, so linear in its length."""
_NOT_BRACKETS = re.compile(r"[^\[\]{}]++")
_STEPS = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")


class BodyError(ValueError):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.message = kind, message


def depth(text: str) -> int:
    """How deep the arrays and objects of `text` nest, brackets inside strings not counted; in
    time linear in its length, with no recursion (C loops only)."""
    brackets = _NOT_BRACKETS.sub("", _STRINGS.sub("", text)).encode("ascii")
    # Each opening bracket is +1 and each closing one -1: the depth after bracket i is the
    # running sum of (step - 1), step 2 for an opening bracket and 0 for a closing one.
    levels = map(operator.sub, accumulate(brackets.translate(_STEPS)),
                 range(1, len(brackets) + 1))
    return max(levels, default=0)


def clean(text: str) -> str:
    """Lone surrogates (from JSON escapes such as \\ud83d) become U+FFFD in the parsed text,
    so that it can be written as UTF-8; the raw body keeps them as sent."""
    return re.sub("[\ud800-\udfff]", "\ufffd", text)


def _shown(key: str) -> str:
    return clean(key if len(key) <= 60 else key[:57] + "...")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise BodyError("repeated_key", f"the body repeats the key {_shown(key)!r}, so "
                                "it has no single reading (which one would be priced?): no "
                                "response")
            seen.add(key)
    return found


def _constant(name: str) -> Any:
    raise BodyError("bad_body", f"the body is not strict JSON ({name})")


def loads(text: str) -> Any:
    """The JSON value of `text`, or BodyError (module docstring)."""
    deepest = depth(text)
    if deepest > MAX_DEPTH:
        raise BodyError("bad_body", f"the body nests {deepest} levels deep, more than the "
                        f"{MAX_DEPTH} fragbench reads: it is kept as received, not parsed")
    try:
        return json.loads(text, object_pairs_hook=_object, parse_constant=_constant)
    except BodyError:
        raise
    except (ValueError, RecursionError):
        raise BodyError("bad_body", "the body is not JSON") from None
