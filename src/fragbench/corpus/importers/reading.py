"""Reading an import's input once, in bounded memory: its sha256 and its UTF-8 checked as it
is read, JSON parsed as a stream of events (ijson, over its C backend yajl2_c when built), JSON
lines split at b"\\n" only.

- `Input`: the file, opened for reading in binary; `read(n)` feeds the sha256 and an
  incremental UTF-8 decoder (so a fault is "not UTF-8", at its line, whatever the parser);
- `json_items`: each element of a top-level JSON list, one at a time, built from ijson's
  basic events by a loop (no recursion) that refuses nesting deeper than `MAX_DEPTH` (ijson's
  own `items` keeps every level's path: memory quadratic in depth, 2 GiB for 30,000 `[`);
  numbers as int or float, as the standard JSON parser gives them;
- `lines`: each line of a JSON-lines file, decoded, a "\\r" before its "\\n" dropped, never
  split at U+2028 and the other characters `str.splitlines` breaks at.
"""

from __future__ import annotations

import codecs
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from fragbench.corpus.columnar import NotUtf8
from fragbench.errors import CorpusError

MAX_DEPTH = 64
"""HotpotQA's deepest value is at depth 5 (list, question, context, pair, sentences)."""
CHUNK = 1 << 16


class NotJson(ValueError):
    """The JSON stream is malformed; the message is one line."""


class NotAList(ValueError):
    """The top-level value is not a non-empty list; `kind` is what it is: "nothing" (empty,
    null, as the standard parser's falsy values), else its type's name."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class Input:
    """A file read once, front to back: its bytes hashed and checked as UTF-8 as they pass."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._file: BinaryIO = path.open("rb")
        except OSError as exc:
            raise CorpusError(f"{path}: cannot be read ({exc.strerror}); check the path.") \
                from None
        self._sha = hashlib.sha256()
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._lines = 1
        """Line of the bytes read so far (for NotUtf8)."""

    def __enter__(self) -> Input:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()

    def _seen(self, data: bytes, final: bool = False) -> None:
        self._sha.update(data)
        try:
            self._utf8.decode(data, final)
        except UnicodeDecodeError as exc:
            raise NotUtf8(self._lines + data.count(b"\n", 0, max(exc.start, 0))) from None
        self._lines += data.count(b"\n")

    def read(self, size: int = -1) -> bytes:
        data = self._file.read(size)
        self._seen(data, final=not data and size != 0)  # ijson reads 0 bytes to learn the type
        return data

    def __iter__(self) -> Iterator[bytes]:
        for line in self._file:
            self._seen(line)
            yield line
        self._seen(b"", final=True)

    def sha256(self) -> str:
        """The hash of every byte: what was not read yet is read first."""
        while self.read(CHUNK):
            pass
        return self._sha.hexdigest()


def json_items(source: Input) -> Iterator[Any]:
    """Each element of the top-level list, in order. Raises NotJson (malformed, too deep),
    NotUtf8, or NotAList."""
    import ijson

    bom = source.read(3)
    events = ijson.basic_parse(_Replay(source, b"" if bom == codecs.BOM_UTF8 else bom),
                               use_float=True)
    stack: list[Any] = []
    key: Any = None
    empty = True
    try:
        first = next(events, None)
        if first is None:
            raise NotJson("holds no JSON value")
        event, value = first
        if event != "start_array":
            if event == "start_map":
                falsy, kind = next(events, (None, None))[0] == "end_map", "dict"
            else:
                falsy, kind = not value, type(value).__name__
            raise NotAList("nothing" if falsy else kind)
        for event, value in events:
            if event == "map_key":
                key = value
                continue
            if event == "start_map" or event == "start_array":
                if len(stack) >= MAX_DEPTH:
                    raise NotJson("nested too deep")
                new: Any = {} if event == "start_map" else []
                if stack:
                    _put(stack[-1], key, new)
                stack.append(new)
                continue
            if event == "end_map" or event == "end_array":
                if not stack:  # the top-level list's end
                    break
                done = stack.pop()
                if not stack:
                    empty = False
                    yield done
                continue
            if not stack:
                empty = False
                yield value
            else:
                _put(stack[-1], key, value)
        for _ in events:  # trailing garbage is refused by the parser
            pass
    except ijson.JSONError as exc:
        raise NotJson(_one_line(exc)) from None
    if empty:
        raise NotAList("nothing")


def _put(container: Any, key: Any, value: Any) -> None:
    if type(container) is list:
        container.append(value)
    else:
        container[key] = value


def _one_line(exc: Exception) -> str:
    """yajl's message is several lines (the text near the fault, a caret): its first."""
    text = exc.args[0] if exc.args else str(exc)
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return str(text).strip().splitlines()[0][:80] if str(text).strip() else type(exc).__name__


class _Replay:
    """`source`, with `head` (bytes already read from it) given back first."""

    def __init__(self, source: Input, head: bytes) -> None:
        self._source, self._head = source, head

    def read(self, size: int = -1) -> bytes:
        if self._head and size != 0:
            head, self._head = self._head, b""
            return head
        return self._source.read(size)


def lines(source: Input) -> Iterator[str]:
    """Each line, decoded (module docstring). Raises NotUtf8 naming the line."""
    for number, raw in enumerate(source, 1):
        if raw.endswith(b"\n"):
            raw = raw[:-1]
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError:
            raise NotUtf8(number) from None
