"""The ID rules every corpus format shares (TOML cases, columnar folders, the importers), and
how a refusal quotes a value read from a corpus file.

- A **case ID** becomes part of every call ID (`CASE-LANG-VARIANT-MODE-rN`), of the report
  page's `#call-ID` anchors and of file names: 1 to 128 ASCII letters, digits, `.`, `_` and
  `-`, the first a letter or digit (`CASE_ID`; HotpotQA's `_id` is 24 hex digits).
- A **fact ID** is shown to the model as `[ID] sentence`, one sentence a line, and cited back
  verbatim: 1 to 128 characters with no control character (C0, DEL, C1, U+2028, U+2029), no
  `[` or `]`, and no white space at either end (`FACT_ID`). Spaces inside are allowed.

Each rule is one regular expression that Python's `re` and Polars' (Rust's) engine read alike
(no `\\s`, whose meaning differs between them), so that a TOML case, a columnar folder and an
import accept exactly the same IDs.
"""

from __future__ import annotations

import json
import re
from typing import Any

CASE_ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
CASE_ID = re.compile(CASE_ID_PATTERN)
CASE_ID_RULE = "must be 1 to 128 letters, digits, '.', '_' and '-', the first a letter or digit"
LANG_CODE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,34}")
"""A language code that can name a prompt file (`prompts/LANG.toml`) and be a bare TOML key:
what an import assigns and `fragbench new experiment` accepts."""

_CONTROL = r"\x00-\x1f\x7f-\x9f\u2028\u2029"
# Unicode's White_Space characters that are not controls (those are refused everywhere).
_SPACE = r" \u00a0\u1680\u2000-\u200a\u202f\u205f\u3000"
_INSIDE = rf"[^{_CONTROL}\[\]]"
_EDGE = rf"[^{_CONTROL}{_SPACE}\[\]]"
FACT_ID_PATTERN = rf"{_EDGE}(?:{_INSIDE}{{0,126}}{_EDGE})?"
FACT_ID = re.compile(FACT_ID_PATTERN)
FACT_ID_RULE = ("must be 1 to 128 characters without control characters, '[' or ']', and no "
                "space at either end")

_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029]")


def shown(value: Any) -> str:
    """`value` as JSON on one line, at most 80 characters: how a refusal quotes a value read
    from a corpus file or an import's input. JSON escapes C0 controls; DEL, C1 controls and
    the Unicode line and paragraph separators are escaped here too, so that the quote never
    breaks the one-line message."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    text = _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text if len(text) <= 80 else text[:77] + "..."
