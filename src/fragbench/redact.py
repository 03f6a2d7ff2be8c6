"""Secrets never written or printed: keys, tokens, account identifiers.

One `Redactor` serves every write (journals, ledger, tables, reports) and every line printed, so
that what reaches a terminal is held to the same rule as what reaches a disk.

What is redacted:
- the values of environment variables named like secrets (`*_API_KEY`, `*_TOKEN`, `*_SECRET`,
  `*PASSWORD`, `*_ORG_ID`, `*_PROJECT_ID`, `*ORGANIZATION`), in any letter case (a key echoed in
  capitals is still the key), and in the forms a server can send one back in:
  - with invisible characters anywhere inside it: whitespace and line breaks, control
    characters, format characters (Unicode category Cf: zero-width spaces and joiners, word
    joiner, byte-order mark, soft hyphen...), variation selectors and fillers;
  - with any of its characters written as `\\uXXXX` escapes, JSON escapes (`\\n`, `\\/`...) or
    percent-escapes (`%2D`, `%2d`), at any depth of escaping (JSON held in a JSON string);
  - base64-encoded, in the standard or URL-safe alphabet, at any of the three byte alignments
    (alone or inside a longer base64 text, wrapped over lines or not);
- its halves, in all of those forms: a prefix or a suffix of a secret at least half its length
  (and at least `MIN_SECRET` characters), wherever it is; and a secret cut in two (two content
  parts of a body, two JSON fields, two lines written apart): a prefix or suffix of
  `MIN_SECRET` characters or more that ends or starts a text or a JSON string;
- anything shaped like an OpenAI key, organization or project ID, or an Authorization header.

What a user can rely on:
- Each secret found is replaced by `MARK` where it stands; every other character of the text is
  kept as it was (escapes stay escapes: a raw response body keeps its bytes but for the secret,
  and the JSON it held stays JSON). A caller sees that something was redacted by comparing its
  input with the output.
- Nothing is created that the input did not hold: no escape is ever decoded into the output (a
  `\\ud83d` escape stays six characters), so the output encodes as UTF-8 whenever the input does.
- Every text is read the same way, JSON or not: an escape anywhere counts, for the search only,
  as the character it stands for.
- Time and memory are linear in the text's length: the text is read in chunks, each turned once
  into a "skeleton" (escapes decoded, invisible characters dropped, lower case) in which every
  form above is a plain substring; secrets are found there with `str.find`, and only the pieces
  (about `PIECE` characters) that hold a match are mapped back to offsets in the text. No
  regular expression is tried with alternatives at every position, no JSON is parsed, nothing
  recurses: a body nested 100,000 deep, a lone surrogate, a NUL or a 100 MB text is read like
  any other text, and no `str` input makes `text` raise. `benchmarks/bench_redact.py` measures
  the speed (tens of MB/s, flat from 1 to 16 MB).

A secret is never shorter than `MIN_SECRET` characters, so that the search for its forms (and
its halves) does not match ordinary words; a key is taken to be ASCII (non-ASCII characters of a
secret are matched as they are, not percent-escaped).
"""

from __future__ import annotations

import base64
import os
import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from typing import Any

MARK = "[redacted]"
"""What stands in a text where a secret was."""
MIN_SECRET = 8
"""Shorter values are not treated as secrets: they would match ordinary words."""

SECRET_ENV = re.compile(r"(API_KEY|_TOKEN|_SECRET|PASSWORD|_ORG_ID|_PROJECT_ID|ORGANIZATION)$",
                        re.IGNORECASE)
"""The names of environment variables whose values are secrets, in any letter case."""

# Shaped like OpenAI's identifiers (long enough that ordinary words never match).
ACCOUNT_PATTERN = (
    r"\bsk-[A-Za-z0-9_*-]{16,}"           # keys, masked or not
    r"|\borg-[A-Za-z0-9]{16,}"            # organization IDs
    r"|\bproj_[A-Za-z0-9]{16,}"           # project IDs
    r"|\bBearer\s+[A-Za-z0-9._~+/=-]{16,}"
)
"""What is redacted wherever it appears, in any letter case, even when no variable holds it:
text shaped like an OpenAI key, organization or project ID, or a Bearer header."""
_SHAPES = re.compile(ACCOUNT_PATTERN, re.IGNORECASE)
# Where a shape can start (lower case): the shapes are tried only there.
_SHAPE_STARTS = ("sk-", "org-", "proj_", "bearer")

INVISIBLE: tuple[tuple[int, int], ...] = (
    (0x00, 0x20), (0x7F, 0xA0), (0xAD, 0xAD), (0x34F, 0x34F), (0x600, 0x605), (0x61C, 0x61C),
    (0x6DD, 0x6DD), (0x70F, 0x70F), (0x890, 0x891), (0x8E2, 0x8E2), (0x115F, 0x1160),
    (0x1680, 0x1680), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x2000, 0x200F), (0x2028, 0x202F),
    (0x205F, 0x2064), (0x2066, 0x206F), (0x2800, 0x2800), (0x3000, 0x3000), (0x3164, 0x3164),
    (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF9, 0xFFFB), (0x110BD, 0x110BD),
    (0x110CD, 0x110CD), (0x13430, 0x13438), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001), (0xE0020, 0xE007F), (0xE0100, 0xE01EF),
)
"""The characters dropped from the skeleton (inclusive ranges of code points): whitespace,
controls (Cc), format characters (Cf, as of Unicode 14), variation selectors, fillers. One of
them inside a key hides it from a plain search and not from a reader."""
_INVISIBLE = re.compile("[" + "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}"
                                      for a, b in INVISIBLE) + "]")
# The same, on UTF-8 bytes: ASCII ones deleted by `bytes.translate`, the others by a pattern
# grouped by leading bytes (so that it is tried only where such a byte is).
_ASCII_INVISIBLE = bytes(c for a, b in INVISIBLE for c in range(a, b + 1) if c < 0x80)


def _utf8_pattern(codes: list[int]) -> bytes:
    """A bytes pattern for the UTF-8 forms of `codes`: a trie of their leading bytes."""
    tree: dict[int, Any] = {}
    for code in codes:
        node = tree
        for byte in chr(code).encode("utf-8"):
            node = node.setdefault(byte, {})

    def emit(node: dict[int, Any]) -> bytes:
        leaves = [b for b, child in node.items() if not child]
        branches = [re.escape(bytes([b])) + emit(child) for b, child in node.items() if child]
        if leaves:
            branches.append(b"[" + b"".join(re.escape(bytes([b])) for b in leaves) + b"]")
        return branches[0] if len(branches) == 1 else b"(?:" + b"|".join(branches) + b")"

    return emit(tree)


_WIDE_INVISIBLE = re.compile(_utf8_pattern(
    [c for a, b in INVISIBLE for c in range(max(a, 0x80), b + 1)]))

# An escape, at up to 8 levels of escaping (`\\\\u0073` is JSON in a JSON string), or a
# percent-escape. Bounded, so that no token is longer than 13 characters.
# (Each alternative starts with its own character, so that the pattern is tried only there.)
ESCAPE_REACH = 16
"""Past a chunk's cut, how far an escape that straddles it can reach (at most 13 characters)."""
_ESCAPE = re.compile(r"(\\\\{0,7}(?:u[0-9a-fA-F]{4}|[nrtbf\"/\\])|%[0-9a-fA-F]{2})")
_SIMPLE = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f"}
# A chunk may end before a character that can only start, never continue, an escape: the
# escapes of a chunk are then exactly those the whole text has there.
_CHUNK_START = re.compile(r'[^\\0-9a-fA-Fu"/nrtbf]')
CHUNK = 16_384
"""Characters per chunk (about): the unit the views are built by."""
PIECE = 512
"""Characters per piece (about): the unit that is mapped back to the text where it holds a
match."""

_BASE64 = frozenset("abcdefghijklmnopqrstuvwxyz0123456789+/-_=")
_URLSAFE = str.maketrans("+/", "-_")


def secrets_in_env(environ: dict[str, str] | None = None) -> list[str]:
    """Values never to be written: keys, tokens, secrets, passwords, organization and project
    identifiers found in the environment."""
    env = os.environ if environ is None else environ
    return [v for k, v in env.items() if SECRET_ENV.search(k) and len(v.strip()) >= MIN_SECRET]


class _Decoded(dict[str, str]):
    """Escape -> the character it stands for, computed once per distinct escape (one text)."""

    def __missing__(self, token: str) -> str:
        if token[0] == "%":
            char = chr(int(token[1:], 16))
        else:
            body = token.lstrip("\\") or "\\"
            char = chr(int(body[1:], 16)) if body[0] == "u" else _SIMPLE.get(body, body)
        self[token] = char
        return char


def _decode(text: str, decoded: _Decoded) -> str:
    """`text` with each escape replaced by the character it stands for (`decoded`)."""
    parts = _ESCAPE.split(text)
    parts[1::2] = map(decoded.__getitem__, parts[1::2])
    return "".join(parts)


def _decoded_view(text: str) -> str:
    """`text`'s decoded view, as `_View` builds it: chunk by chunk, so that what decoding holds
    at once (the pieces between escapes) is bounded by a chunk, not by the text."""
    decoded = _Decoded()
    return "".join(_decode(text[a:b], decoded) for a, b in _chunks(text, 0, len(text), CHUNK))


def _lower(text: str) -> str:
    """Lower case, one character for one (U+0130 is the only one whose lower case is two)."""
    if not text.isascii() and "\u0130" in text:
        text = text.replace("\u0130", "i")
    return text.lower()


def _visible(text: str) -> str:
    """`text` without its invisible characters (as `_INVISIBLE.sub("", text)`, faster)."""
    if text.isascii():
        return text.encode("ascii").translate(None, _ASCII_INVISIBLE).decode("ascii")
    data = text.encode("utf-8", "surrogatepass").translate(None, _ASCII_INVISIBLE)
    return _WIDE_INVISIBLE.sub(b"", data).decode("utf-8", "surrogatepass")


def _chunks(text: str, start: int, end: int, size: int) -> Iterator[tuple[int, int]]:
    """[start, end) of `text` in pieces of about `size` characters, each cut where no escape
    straddles the cut (`start` and `end` are such places)."""
    while start < end:
        cut = start + size
        if cut >= end:
            yield start, end
            return
        cut = _safe_cut(text, start, cut, end)
        yield start, cut
        start = cut


def _safe_cut(text: str, start: int, cut: int, end: int) -> int:
    """The first place from `cut` on where no escape of the text straddles."""
    found = _CHUNK_START.search(text, cut, min(end, cut + 64))
    if found:
        return found.start()
    # A long run of the characters escapes are made of: follow the escapes themselves, from
    # `start` (where the whole text's escapes are the same as those read from there). An escape
    # is at most 13 characters, so none that straddles `cut` reaches past cut + 13: the scan
    # stops there, or a text with no escape after `cut` (a long run of hex digits) would be
    # read to its end at every chunk, quadratic in its length.
    for m in _ESCAPE.finditer(text, start, min(end, cut + ESCAPE_REACH)):
        if m.end() >= cut:
            return m.end() if m.start() < cut else cut
    return cut


_Map = tuple[list[int], list[int], list[int], list[int]]
_Starts = tuple[list[int], list[int], list[int]]


class _View:
    """A text's decoded view (escapes decoded) and skeleton (the decoded view without invisible
    characters, in lower case), with the way back from either to offsets in the text.

    The views are built chunk by chunk with whole-string operations (no Python loop over
    characters, words or escapes). The way back is built only where it is asked for: the chunk
    is measured in pieces of `PIECE` characters, and only the piece that holds the character is
    mapped character by character."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._decoded = _Decoded()
        self._starts: _Starts = ([], [], [])  # per chunk: its offset in the text, views
        self._pieces: dict[int, _Starts] = {}
        self._maps: dict[int, _Map] = {}
        d_parts: list[str] = []
        l_parts: list[str] = []
        s_parts: list[str] = []
        d_len = s_len = 0
        escaped = False
        for start, end in _chunks(text, 0, len(text), CHUNK):
            piece = text[start:end]
            decoded, lowered, skeleton = self._views(piece)
            escaped = escaped or decoded is not piece
            for column, value in zip(self._starts, (start, d_len, s_len), strict=True):
                column.append(value)
            d_parts.append(decoded)
            l_parts.append(lowered)
            s_parts.append(skeleton)
            d_len += len(decoded)
            s_len += len(skeleton)
        self.decoded = "".join(d_parts) if escaped else text
        self.lowered = "".join(l_parts)
        """The decoded view in lower case, one character for one."""
        self.skeleton = "".join(s_parts)

    def _views(self, piece: str) -> tuple[str, str, str]:
        """(decoded view, in lower case, skeleton) of a piece cut where no escape straddles."""
        decoded = _decode(piece, self._decoded) if "\\" in piece or "%" in piece else piece
        lowered = _lower(decoded)
        return decoded, lowered, _visible(lowered)

    def _measure(self, index: int) -> _Starts:
        """Chunk `index` in pieces: where each starts in the text and in both views."""
        if index not in self._pieces:
            starts: _Starts = ([], [], [])
            end = self._starts[0][index + 1] if index + 1 < len(self._starts[0]) else len(
                self.text)
            d_at, s_at = self._starts[1][index], self._starts[2][index]
            for a, b in _chunks(self.text, self._starts[0][index], end, PIECE):
                decoded, _, skeleton = self._views(self.text[a:b])
                for column, value in zip(starts, (a, d_at, s_at), strict=True):
                    column.append(value)
                d_at += len(decoded)
                s_at += len(skeleton)
            starts[0].append(end)
            self._pieces[index] = starts
        return self._pieces[index]

    def _map(self, start: int, end: int) -> _Map:
        """For the piece [start, end) of the text: per character of its decoded view, then of
        its skeleton, the offset in the text where it starts and where it ends."""
        if start in self._maps:
            return self._maps[start]
        piece = self.text[start:end]
        d_from: list[int] = []
        d_to: list[int] = []
        at = 0
        for m in _ESCAPE.finditer(piece):
            a, b = m.span()
            d_from.extend(range(start + at, start + a))
            d_to.extend(range(start + at + 1, start + a + 1))
            d_from.append(start + a)  # one decoded character for the whole escape
            d_to.append(start + b)
            at = b
        d_from.extend(range(start + at, end))
        d_to.extend(range(start + at + 1, end + 1))
        s_from: list[int] = []
        s_to: list[int] = []
        at = 0
        for m in _INVISIBLE.finditer(self._views(piece)[0]):
            s_from.extend(d_from[at:m.start()])
            s_to.extend(d_to[at:m.start()])
            at = m.end()
        s_from.extend(d_from[at:])
        s_to.extend(d_to[at:])
        self._maps[start] = maps = (d_from, d_to, s_from, s_to)
        return maps

    def _locate(self, at: int, skeleton: bool) -> tuple[int, int]:
        """Where character `at` of the skeleton (or of the decoded view) is in the text."""
        column = 2 if skeleton else 1
        # Pieces empty in a view share their offset with the next: bisect lands on the last of
        # them, the one that holds the character.
        index = bisect_right(self._starts[column], at) - 1
        pieces = self._measure(index)
        j = bisect_right(pieces[column], at) - 1
        maps = self._map(pieces[0][j], pieces[0][j + 1])
        k = at - pieces[column][j]
        return (maps[2][k], maps[3][k]) if skeleton else (maps[0][k], maps[1][k])

    def span(self, a: int, b: int, *, skeleton: bool) -> tuple[int, int]:
        """The text's span that became [a, b) of the skeleton (or of the decoded view)."""
        return self._locate(a, skeleton)[0], self._locate(b - 1, skeleton)[1]


def _common_prefix(text: str, at: int, secret: str, least: int) -> int:
    """How many characters of `text` from `at` are the start of `secret` (`least` known)."""
    low, high = least, min(len(secret), len(text) - at)
    if text[at:at + high] == secret[:high]:
        return high
    while low + 1 < high:  # invariant: low chars agree, high do not
        mid = (low + high) // 2
        if text[at + low:at + mid] == secret[low:mid]:
            low = mid
        else:
            high = mid
    return low


def _common_suffix(text: str, end: int, secret: str, least: int) -> int:
    """How many characters of `text` before `end` are the end of `secret` (`least` known)."""
    low, high = least, min(len(secret), end)
    if text[end - high:end] == secret[len(secret) - high:]:
        return high
    while low + 1 < high:
        mid = (low + high) // 2
        if text[end - mid:end - low] == secret[len(secret) - mid:len(secret) - low]:
            low = mid
        else:
            high = mid
    return low


def _find_all(text: str, needle: str) -> Iterator[int]:
    at = text.find(needle)
    while at >= 0:
        yield at
        at = text.find(needle, at + 1)


def _base64_forms(piece: bytes) -> set[tuple[str, int, int]]:
    """The base64 characters that `piece` alone decides, at each of the three byte alignments,
    in both alphabets, in lower case (the skeleton's); with, for each, how many characters
    before and after it are partly the piece's (0 or 1)."""
    forms = set()
    for shift in range(3):
        encoded = base64.b64encode(bytes(shift) + piece).decode("ascii")
        first, stop = 8 * shift, 8 * (shift + len(piece))  # the piece's bits
        core = encoded[-(-first // 6):stop // 6]
        partly = (int(first % 6 != 0), int(stop % 6 != 0))
        forms |= {(core.lower(), *partly), (core.translate(_URLSAFE).lower(), *partly)}
    return forms


def _skeleton(text: str) -> str:
    return _View(text).skeleton


class Redactor:
    """Redacts the secrets it was given (values of `MIN_SECRET` characters or more), in every
    form the module docstring lists, and anything shaped like `ACCOUNT_PATTERN`."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets = sorted({s for v in secrets for s in (v, v.strip()) if len(s) >= MIN_SECRET},
                              key=len, reverse=True)
        # Each secret as the skeleton holds it: as typed, and decoded (a password holding `%41`
        # or a backslash is found in both forms).
        literal = {form for v in self._secrets
                   for form in (_visible(_lower(v)), _skeleton(v))}
        self._literal = sorted(f for f in literal if len(f) >= MIN_SECRET)
        encoded: set[tuple[str, int, int]] = set()
        for value in {v.strip() for v in self._secrets}:
            data = value.encode("utf-8", "surrogatepass")
            half = max(MIN_SECRET, len(data) // 2)
            encoded |= _base64_forms(data[:half]) | _base64_forms(data[-half:])
        self._base64 = sorted(encoded)

    @classmethod
    def from_env(cls) -> Redactor:
        """A redactor of every secret in this process's environment (`secrets_in_env`)."""
        return cls(secrets_in_env())

    def found(self, text: str) -> bool:
        """Whether `text` holds anything `text()` would redact."""
        return bool(self._spans(text))

    def text(self, text: str) -> str:
        """Any text (a message, a line to print, a raw body) with every secret replaced by
        `MARK`, and nothing else changed."""
        spans = self._spans(text)
        if not spans:
            return text
        out: list[str] = []
        at = 0
        for a, b in spans:
            out += (text[at:a], MARK)
            at = b
        out.append(text[at:])
        return "".join(out)

    def _spans(self, text: str) -> list[tuple[int, int]]:
        """The text's spans to redact, in order, merged where they meet."""
        if len(text) < MIN_SECRET:  # the skeleton is never longer than the text
            return []
        # The quick path, on the decoded view (the text itself where it holds no escape):
        # escapes decode where they are, so the whole text's view is the one `_View` builds
        # chunk by chunk, and nothing found in it means nothing to map back.
        escaped = "\\" in text or "%" in text
        if self._nothing_in(_decoded_view(text) if escaped else text):
            return []
        view = _View(text)
        spans = [view.span(a, b, skeleton=True) for a, b in self._in_skeleton(view.skeleton)]
        spans += [view.span(a, b, skeleton=False) for a, b in _shapes(view.decoded, view.lowered)]
        spans.sort()
        merged: list[tuple[int, int]] = []
        for a, b in spans:
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
            else:
                merged.append((a, b))
        return merged

    def _nothing_in(self, text: str) -> bool:
        """Whether `text`, a value's decoded view (the value itself where it holds no
        escape), has none of the needles every match starts from: a shape's start in its lower
        case, a secret's first or last MIN_SECRET characters or a base64 form in its skeleton.
        Then `_spans` would find nothing, and the views' mapping back to the text is not built
        (a report redacts every value it shows: most are sentences, IDs and numbers). Exact:
        the same lower case and skeleton `_View` builds, whole instead of chunk by chunk (both
        are character by character), searched for the same needles."""
        lowered = _lower(text)
        if any(word in lowered for word in _SHAPE_STARTS):
            return False
        if not self._literal and not self._base64:
            return True
        skeleton = _visible(lowered)
        return not any(s[:MIN_SECRET] in skeleton or s[-MIN_SECRET:] in skeleton
                       for s in self._literal) and \
            not any(form in skeleton for form, _, _ in self._base64)

    def _in_skeleton(self, skeleton: str) -> Iterator[tuple[int, int]]:
        for secret in self._literal:
            size = len(secret)
            half = min(size, max(MIN_SECRET, size // 2))
            for at in _find_all(skeleton, secret[:MIN_SECRET]):
                n = _common_prefix(skeleton, at, secret, MIN_SECRET)
                end = at + n
                # A half or more anywhere; less, only where a text or a JSON string ends.
                if n >= half or end == len(skeleton) or skeleton[end] == '"':
                    yield at, end
            for at in _find_all(skeleton, secret[-MIN_SECRET:]):
                end = at + MIN_SECRET
                n = _common_suffix(skeleton, end, secret, MIN_SECRET)
                start = end - n
                if n >= half or start == 0 or skeleton[start - 1] == '"':
                    yield start, end
        found: list[tuple[int, int]] = []
        for form, before, after in self._base64:
            for at in _find_all(skeleton, form):
                # With the characters partly the secret's, and the padding that may follow.
                start, end = at, at + len(form)
                if before and start > 0 and skeleton[start - 1] in _BASE64:
                    start -= 1
                if after and end < len(skeleton) and skeleton[end] in _BASE64:
                    end += 1
                while end < len(skeleton) and skeleton[end] == "=" and end < at + len(form) + 3:
                    end += 1
                found.append((start, end))
        # The two halves of one encoded secret: one span (the character or two between them
        # encode the middle of the secret).
        found.sort()
        for i, (start, end) in enumerate(found):
            if i + 1 < len(found) and found[i + 1][0] - end <= 2 and all(
                    c in _BASE64 for c in skeleton[end:found[i + 1][0]]):
                end = found[i + 1][0]
            yield start, end

    def value(self, value: Any) -> Any:
        """A JSON-ready record with every string (and every key) redacted; tuples become lists;
        other values are kept. Walked with a stack of its own, never recursively: any depth is
        fine. A container held twice is copied once (a cycle stays a cycle, for `json.dumps`
        to refuse)."""
        if isinstance(value, str):
            return self.text(value)
        if not isinstance(value, dict | list | tuple):
            return value
        made: dict[int, Any] = {}  # a container seen twice is copied once (and a cycle ends)
        todo: list[tuple[Any, Any]] = []

        def copy(item: Any) -> Any:
            if isinstance(item, str):
                return self.text(item)
            if not isinstance(item, dict | list | tuple):
                return item
            if id(item) not in made:
                made[id(item)] = {} if isinstance(item, dict) else []
                todo.append((item, made[id(item)]))
            return made[id(item)]

        top = copy(value)
        while todo:
            source, target = todo.pop()
            if isinstance(source, dict):
                for k, v in source.items():
                    target[self.text(str(k))] = copy(v)
            else:
                target.extend(copy(v) for v in source)
        return top


def _shapes(decoded: str, lowered: str) -> Iterator[tuple[int, int]]:
    """Spans of the decoded view shaped like an account identifier or a Bearer header. The
    pattern is tried only where one of its starts is (found with `str.find` in `lowered`)."""
    starts = sorted(at for word in _SHAPE_STARTS for at in _find_all(lowered, word))
    covered = 0
    for at in starts:
        if at < covered:
            continue
        m = _SHAPES.match(decoded, at)
        if m:
            covered = m.end()
            yield m.span()
