"""A page's data files: what a page of any size shows call by call (report.html's calls, the
pair page's cells), in script files beside it that its own script loads as it needs them.

Why files beside the page, loaded with script elements. A page that carries every call is
18 KB a call (fragments, answer, citations, raw response): 1.8 GB at 100,000 calls, which no
browser opens. The page now carries a compact index (what the filters, the URL and the pager
need: a few bytes a call) and each call's detail sits in `<page stem>-data/<digest>/` beside
it (`report-data/…` for report.html), in files of SHARD_CALLS calls (`calls-0001.js`, …, each
distinct text stored once per file) and the search texts in larger files (`search-0001.js`,
…), loaded only when a search is made. The page opens from disk, offline, in the time its
index takes, whatever the calls; a page copied without its folder says which one it needs.

A page opened from a file:// URL may not `fetch` a file beside it (Chromium and Firefox treat
each file as an origin of its own), but it may run a script element whose `src` is one; so a
data file is a script, and holds data only: `fragbenchData("calls-0003", "…");`, its one
argument a JavaScript string literal of JSON (`script`), which page.js checks by name and
reads with JSON.parse (never eval: a key such as `__proto__` stays a key). The JSON is escaped
as a page's data element is (`island`: `<`, `>`, `&`, U+2028 and U+2029 as `\\u` escapes), so a
data file could be inlined in a page unchanged, and no value can end a script or a string.

The Content-Security-Policy: `script-src 'sha256-<page.js>' 'strict-dynamic'`. Measured in
headless Chromium from file:// (2026-12-03): a hash source with the data file's `integrity`
attribute is refused (Subresource Integrity needs CORS, which file:// has not); `'self'`
allows any script on the disk, markup's included; `'strict-dynamic'` allows exactly the
scripts page.js creates (itself allowed by its hash) and still refuses every script element
the parser meets and every inline handler, so markup that slipped past escaping still cannot
run, nor load a script. page.js builds a data file's URL from the folder the index names (which
it checks: `<name>-data/` and a hex digest) and a number: nothing from a call's values ever
reaches a URL.

Written all or nothing (`DataFolder`): the data files are written and fsync'ed into a
temporary folder beside the page (`.<stem>-data-<random>.tmp`), as they are made (one file of
calls at a time in memory), and the folder is named for the sha256 of everything written (so
a page written twice from the same tables is the same bytes, folder name included). Then,
under the page's lock (`<stem>-data/.lock`), the folder is renamed into place, the page is
written beside and renamed over the old one, and only then are the page's older data folders
removed. A failure at any step leaves the old page and its folder, never a page whose folder
is missing or half written; a failure before the renames leaves nothing at all.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fragbench.files import fsync_dir, write_atomically, write_synced

SHARD_CALLS = 100
"""Calls (or cells) per detail file: about 1.5 MB for an offline call, so that a page of 50
calls loads one or two files and a filter whose calls are scattered loads at most 50."""
SEARCH_CALLS = 2_000
"""Calls per search file: a search loads every one of them, once, so fewer and larger."""
DATA_SUFFIX = "-data"
"""The page's data root beside it: `report.html` -> `report-data/`, `cmp.html` -> `cmp-data/`."""
DIGEST_CHARS = 16
DIGEST = re.compile(f"[0-9a-f]{{{DIGEST_CHARS}}}")
LOCK = ".lock"
STALE_SECONDS = 3600
"""A temporary folder beside a page older than this is a dead write's (removed by the next)."""


def data_root(page: Path) -> Path:
    """Where a page's data folders are: `<stem>-data/` beside it."""
    return page.parent / f"{page.stem}{DATA_SUFFIX}"


_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
            "\u2029": "\\u2029"}


def compact_json(data: Any) -> str:
    """`data` as compact JSON text, non-ASCII characters as they are: orjson's, which writes the
    same text as `json.dumps(data, ensure_ascii=False, separators=(",", ":"))` for strings,
    integers, booleans, null, lists and objects with string keys (the page data is only these)
    three times as fast (a data file of 100 calls: its JSON 6 ms against 2 ms, the string
    literal of that JSON 4 ms against 1.5 ms: `script`; a report at 100,000 calls writes a
    thousand such files). A float may be written in another but equal form (1e16 for 1e+16),
    and orjson writes NaN and the infinities as null (JSON has none, and JSON.parse would
    refuse a page holding `NaN`). What orjson refuses (an integer beyond 64 bits, a key that is
    not a string, a lone surrogate) is written by the standard library as before."""
    import orjson

    try:
        return orjson.dumps(data).decode()
    except TypeError:  # orjson.JSONEncodeError is one
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def island(data: Any) -> str:
    """`data` as the text of a `<script type="application/json">` element: JSON whose `<`, `>`
    and `&` are `\\u` escapes, so that no value can end the element (`</script`) or open a
    comment (`<!--`), and whose U+2028/U+2029 are escaped too (a reader pasting it into a JS
    string must not meet a line break). The browser reads the element's text as it is (no
    entity is decoded in a script element), and JSON.parse gives the values back exactly."""
    text = compact_json(data)
    for char, escape in _ESCAPES.items():  # five passes in C: far quicker than one re.sub
        text = text.replace(char, escape)
    return text


def script(name: str, data: Any) -> bytes:
    """A data file's bytes: one call of `fragbenchData` with the file's name and its data as a
    string literal of escaped JSON (`island`), which `compact_json` writes (`"` and `\\`
    escaped; `island` left no `<`, `>`, `&` or line separator to escape)."""
    literal = compact_json(island(data))  # a JSON string: `"` and `\\` escaped
    return f"fragbenchData({json.dumps(name)},{literal});\n".encode()


def shard_name(kind: str, number: int) -> str:
    """`calls-0001` for the first file of calls (page.js builds the same name)."""
    return f"{kind}-{number:04d}"


class DataFolder:
    """The data files of one page while they are written: `add` each file, then `publish` the
    page that names `name`. Without `page` nothing is written and only the name is computed
    (what `render` gives a test: the page's text as it would be written)."""

    def __init__(self, page: Path | None) -> None:
        self.page = page
        self._digest = hashlib.sha256()
        self._temp: Path | None = None
        self.bytes = 0
        """Bytes of data written (what a benchmark reports)."""
        if page is not None:
            self._temp = page.parent / (f".{page.stem}{DATA_SUFFIX}-"
                                        f"{uuid.uuid4().hex[:12]}.tmp")
            self._temp.mkdir()

    def add(self, name: str, data: Any) -> None:
        """Write data file `name`.js, fsync'ed (its bytes enter the folder's digest)."""
        body = script(name, data)
        file = f"{name}.js"
        self._digest.update(f"{file}\0{len(body)}\0".encode() + body)
        self.bytes += len(body)
        if self._temp is not None:
            write_synced(self._temp / file, body)

    @property
    def name(self) -> str:
        """The folder as the page names it, relative to the page: `<stem>-data/<digest>`, the
        digest of every file written so far (read it once every file is added)."""
        stem = self.page.stem if self.page is not None else "report"
        return f"{stem}{DATA_SUFFIX}/{self._digest.hexdigest()[:DIGEST_CHARS]}"

    def publish(self, text: str) -> Path:
        """Under the page's lock: rename the folder into place, write the page (`text`, which
        names the folder) over the old one, then remove the page's older data folders.
        Returns the folder."""
        assert self.page is not None and self._temp is not None
        page, parent = self.page, self.page.parent
        fsync_dir(self._temp)
        root = data_root(page)
        if not root.is_dir():
            root.mkdir()
            fsync_dir(parent)
        final = parent / self.name
        with _locked(root / LOCK):
            if final.exists():  # the same tables written again: the same bytes under that name
                os.rename(final, root / f".{final.name}-{uuid.uuid4().hex[:12]}.old")
            os.rename(self._temp, final)
            self._temp = None
            fsync_dir(root)
            data = text.encode("utf-8")
            write_atomically(page, lambda tmp: write_synced(tmp, data))
            fsync_dir(parent)
            # Only now that the page names the new folder: the older ones, and what a write
            # that died left (a folder replaced, a temporary one long untouched).
            for other in root.iterdir():
                if other != final and other.is_dir() and not other.is_symlink() and (
                        DIGEST.fullmatch(other.name) or other.name.endswith(".old")):
                    shutil.rmtree(other, ignore_errors=True)
            now = time.time()
            for other in parent.glob(f".{page.stem}{DATA_SUFFIX}-*.tmp"):
                with contextlib.suppress(OSError):
                    if other.is_dir() and now - other.stat().st_mtime > STALE_SECONDS:
                        shutil.rmtree(other, ignore_errors=True)
        return final

    def discard(self) -> None:
        if self._temp is not None:
            shutil.rmtree(self._temp, ignore_errors=True)
            self._temp = None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (created if need be), held while the block runs: one
    writer's cleanup never removes the folder another's page is about to name."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@contextlib.contextmanager
def writing(page: Path) -> Iterator[DataFolder]:
    """A DataFolder for `page`, its temporary folder removed if anything fails before
    `publish` (which takes the page's lock for the renames, the page and the cleanup)."""
    folder = DataFolder(page)
    try:
        yield folder
    finally:
        folder.discard()
