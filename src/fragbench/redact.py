"""Secrets never written or printed: keys, tokens, account identifiers.

One `Redactor` serves every write (journals, ledger, tables, reports) and every line printed, so
that what reaches a terminal is held to the same rule as what reaches a disk.

What is redacted:
- the values of environment variables named like secrets (`*_API_KEY`, `*_TOKEN`, `*_SECRET`,
  `*PASSWORD`, `*_ORG_ID`, `*_PROJECT_ID`, `*ORGANIZATION`), matched case-insensitively (a key
  echoed in capitals is still the key);
- anything shaped like an OpenAI key, organization or project ID, or an Authorization header.

Matching is done on decoded text: a string that holds JSON (a raw response body) is decoded
first, so that a key sent back as `\\u0073\\u006b-…` escapes is found, and the string leaves of
that JSON are also searched joined together, so that a key split across two fields is found.
Where anything is found inside such a body, the body is stored re-encoded from its redacted
decoded form (its bytes then differ from what was received; its content does not, but for the
secret).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable
from typing import Any

MARK = "[redacted]"
MIN_SECRET = 8
"""Shorter values are not treated as secrets: they would match ordinary words."""

SECRET_ENV = re.compile(r"(API_KEY|_TOKEN|_SECRET|PASSWORD|_ORG_ID|_PROJECT_ID|ORGANIZATION)$",
                        re.IGNORECASE)

# Shaped like OpenAI's identifiers (long enough that ordinary words never match).
ACCOUNT_PATTERN = (
    r"\bsk-[A-Za-z0-9_*-]{16,}"           # keys, masked or not
    r"|\borg-[A-Za-z0-9]{16,}"            # organization IDs
    r"|\bproj_[A-Za-z0-9]{16,}"           # project IDs
    r"|\bBearer\s+[A-Za-z0-9._~+/=-]{16,}"
)
_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})")


def secrets_in_env(environ: dict[str, str] | None = None) -> list[str]:
    """Values never to be written: keys, tokens, secrets, passwords, organization and project
    identifiers found in the environment."""
    env = os.environ if environ is None else environ
    return [v for k, v in env.items() if SECRET_ENV.search(k) and len(v.strip()) >= MIN_SECRET]


def _unescape_safe(text: str) -> str:
    """`\\uXXXX` escapes decoded, but for quotes, backslashes and control characters."""
    def one(m: re.Match[str]) -> str:
        char = chr(int(m.group(1), 16))
        return m.group(0) if char in '"\\' or ord(char) < 0x20 else char

    return _ESCAPE.sub(one, text)


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        values = sorted({s for v in secrets for s in (v, v.strip()) if len(s) >= MIN_SECRET},
                        key=len, reverse=True)
        parts = [re.escape(v) for v in values] + [ACCOUNT_PATTERN]
        self._pattern = re.compile("|".join(parts), re.IGNORECASE)
        # A secret cut in two (two content parts of one body, two lines): a text that ends
        # with its first MIN_SECRET or more characters, or starts with its last ones.
        cuts = [re.escape(v[:k]) + r"\Z" for v in values for k in range(MIN_SECRET, len(v))]
        cuts += [r"\A" + re.escape(v[-k:]) for v in values for k in range(MIN_SECRET, len(v))]
        self._cut = re.compile("|".join(cuts), re.IGNORECASE) if cuts else None

    def _sub(self, text: str) -> str:
        text = self._pattern.sub(MARK, text)
        return self._cut.sub(MARK, text) if self._cut is not None else text

    @classmethod
    def from_env(cls) -> Redactor:
        return cls(secrets_in_env())

    def found(self, text: str) -> bool:
        return self._pattern.search(text) is not None or (
            self._cut is not None and self._cut.search(text) is not None)

    def text(self, text: str) -> str:
        """Any text: a message, a line to print, or a raw body (JSON decoded where it is)."""
        if text.lstrip().startswith(("{", "[", '"')):
            try:
                doc = json.loads(text)
            except ValueError:
                pass
            else:
                redacted, changed = self._document(doc)
                if changed:
                    return json.dumps(redacted, ensure_ascii=False)
                # What parsing hides (a key repeated, whose first value is dropped; a number)
                # is still in the text: the plain search below finds it.
        return self._plain(text)

    def _plain(self, text: str) -> str:
        """Search the text as it is and with its \\u escapes decoded. Quotes, backslashes and
        control characters stay escaped, so that JSON text stays JSON."""
        text = self._sub(text)
        if "\\u" in text:
            decoded = _unescape_safe(text)
            if self.found(decoded):
                return self._sub(decoded)
        return text

    def _document(self, doc: Any) -> tuple[Any, bool]:
        """(the document with secrets redacted in its decoded strings, whether any was)."""
        leaves: list[str] = []
        _collect(doc, leaves)
        joined = "".join(leaves)
        spans = [m.span() for m in self._pattern.finditer(joined)]
        keys_hit = any(self.found(k) for k in _keys(doc))
        cut = self._cut is not None and any(self._cut.search(v) for v in leaves)
        if not spans and not keys_hit and not cut:
            return doc, False
        # Mark every leaf that overlaps a match of the joined text (a key split across fields):
        # one sweep over leaves and matches, both in order.
        hit: set[int] = set()
        start, j = 0, 0
        for index, leaf in enumerate(leaves):
            end = start + len(leaf)
            while j < len(spans) and spans[j][1] <= start:
                j += 1
            if j < len(spans) and spans[j][0] < end:
                hit.add(index)
            start = end
        counter = iter(range(len(leaves)))
        return _rebuild(doc, lambda s: self._leaf(s) if next(counter) in hit else self._sub(s),
                        lambda k: self._sub(k)), True

    def _leaf(self, leaf: str) -> str:
        redacted = self._sub(leaf)
        return redacted if redacted != leaf else MARK  # part of a split secret: all of it

    def value(self, value: Any) -> Any:
        """A JSON-ready record with every string redacted (JSON held in strings included)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(str(k)): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value


def _collect(doc: Any, leaves: list[str]) -> None:
    """The string values, in document order; keys are searched one by one (`_rebuild`)."""
    if isinstance(doc, str):
        leaves.append(doc)
    elif isinstance(doc, dict):
        for v in doc.values():
            _collect(v, leaves)
    elif isinstance(doc, list):
        for v in doc:
            _collect(v, leaves)


def _rebuild(doc: Any, fix: Callable[[str], str], fix_key: Callable[[str], str]) -> Any:
    """The same traversal order as `_collect`, applying `fix` to each string value."""
    if isinstance(doc, str):
        return fix(doc)
    if isinstance(doc, dict):
        return {fix_key(str(k)): _rebuild(v, fix, fix_key) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_rebuild(v, fix, fix_key) for v in doc]
    return doc


def _keys(doc: Any) -> list[str]:
    if isinstance(doc, dict):
        return [str(k) for k in doc] + [k for v in doc.values() for k in _keys(v)]
    if isinstance(doc, list):
        return [k for v in doc for k in _keys(v)]
    return []
