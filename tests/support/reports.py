"""Reading a report back: a Markdown section's table, the rule that no number is an aggregate
over cells, and report.html parsed with the standard library into a tree."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import polars as pl

from support.hostile_pages import (
    islands,
)


def section_table(report: str, heading: str) -> list[dict[str, str]]:
    """The first pipe table after `heading`, as dicts of cell text."""
    part = report.split(heading, 1)[1]
    lines = [ln for ln in part.splitlines() if ln.startswith("|")]
    block = []
    for ln in lines:
        block.append(ln)
        if len(block) > 2 and part.splitlines().index(ln) + 1 < len(part.splitlines()) and \
                not part.splitlines()[part.splitlines().index(ln) + 1].startswith("|"):
            break
    header = [c.strip() for c in block[0].strip("|").split("|")]
    return [dict(zip(header, [c.strip() for c in row.strip("|").split("|")], strict=True))
            for row in block[2:]]


def aggregates(series_dir: Path, report: str | None = None) -> list[str]:
    """Every number of `report` (default: the series' report.md) that breaks the rule."""
    if report is None:
        report = (series_dir / "report.md").read_text(encoding="utf-8")
    calls = {r["call_id"]: (r["case"], r["lang"], r["variant"], r["mode"])
             for r in pl.read_parquet(series_dir / "calls.parquet").to_dicts()}
    faults: list[str] = []
    lines = report.splitlines()
    i, answer_of = 0, None  # answer_of: the call whose appendix heading came last
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            if answer_of is None:
                body = "\n".join(lines[i + 1:end])
                if DIGIT.search(body):
                    faults.append(f"code block outside the appendix: {body[:80]!r}")
            i = end + 1
            continue
        if line.startswith("|"):
            end = i
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            faults += check_table(lines[i:end], calls)
            i = end
            continue
        if line.startswith("## "):
            answer_of = None
        for pattern in PROSE_ALLOWED:
            match = pattern.fullmatch(line)
            if match:
                call = match.groupdict().get("call")
                if call is not None:
                    if call not in calls:
                        faults.append(f"appendix heading of no planned call: {line!r}")
                    answer_of = call
                break
        else:
            if DIGIT.search(VERSION.sub("", line)):
                faults.append(f"prose: {line!r}")
        i += 1
    return faults


ACCOUNTING_COLUMN = re.compile(r"calls_[a-z_]+|[a-z_]*tokens|[a-z_]*usd")


AGGREGATE_NAME = re.compile(r"share|rate|mean|average|median|overall|fidelity|score|percent|%",
                            re.I)


CALL_COUNTS = re.compile(r"\d+ planned; [a-z_]+ \d+(, [a-z_]+ \d+)*")


DIGIT = re.compile(r"\d")


PROSE_ALLOWED = [  # rule 4, whole lines
    re.compile(r"# \S+ · series `[^`]+`"),
    re.compile(r"### (?P<seq>\d+)\. (?P<call>\S+) — [a-z_]+"),
    re.compile(r"### \S+ \(measure `[^`]+`, \d+ rows\)"),
    re.compile(r"\d+ planned calls were not sent \(the series stopped\)\."),
    re.compile(r"!\[[^\]]*\]\(figures/[\w.-]+\)"),
]


RUN_ROWS = {  # "What was run": label -> what its numbers are (rule 3)
    "experiment": "identifier",
    "series": "identifier",
    "backend": "identifier",
    "endpoint": "identifier",
    "frozen plan (experiment.json) sha256": "hash",
    "model as returned": "identifier",
    "first and last call": "timestamps",
    "calls": "counts of calls",
    "series spend": "accounting",
    "budget": "accounting",
    "state": "the call a stop names",
    "note": "no number",
}


SETTING_COLUMN = re.compile(r"\d+/\d+( \(main\))?|full")


VERSION = re.compile(r"\b(checker|corpus) \d+\.\d+\b")  # rule 4, inside a line


def cells(line: str) -> list[str]:
    """The cells of a pipe-table line; `\\|` is a pipe inside a cell."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def check_table(block: list[str], calls: dict[str, tuple[str, ...]]) -> list[str]:
    header, rows = cells(block[0]), [cells(line) for line in block[2:]]
    passages = {key[:3] for key in calls.values()}
    blocks = set(calls.values())
    where = f"table | {' | '.join(header)} |"
    faults = [f"{where}: column {name!r} names an aggregate" for name in header
              if AGGREGATE_NAME.search(name)]
    if header == ["", ""]:
        for label, value in rows:
            kind = RUN_ROWS.get(label)
            if kind is None:
                faults.append(f"What was run: unknown row {label!r} = {value!r}")
            elif kind == "counts of calls" and not CALL_COUNTS.fullmatch(value):
                faults.append(f"What was run: calls is not counts of calls: {value!r}")
            elif kind == "no number" and DIGIT.search(value):
                faults.append(f"What was run: a number in {label!r}: {value!r}")
        return faults
    seen: set[tuple[str, ...]] = set()
    for row in rows:
        record = dict(zip(header, row, strict=True))
        if "call_id" in record:
            key: tuple[str, ...] = (record["call_id"],)
            real = record["call_id"] in calls
        elif header[:4] == ["case", "lang", "variant", "mode"]:
            key = tuple(row[:4])
            real = key in blocks
        elif header[:3] == ["case", "lang", "variant"]:
            key = tuple(row[:3])
            real = key in passages
        else:
            return [*faults, f"{where}: no column names a cell"]
        if not real or key in seen:
            faults.append(f"{where}: row {row!r} is no single cell")
        seen.add(key)
    if "call_id" not in header and header[3:4] == ["mode"]:
        faults += [f"{where}: {name!r} per case/lang/variant/mode is no accounting: it adds "
                   "up repetitions" for name in header[4:] if not ACCOUNTING_COLUMN.fullmatch(name)]
    elif "call_id" not in header:
        faults += [f"{where}: column {name!r} is no retrieval setting" for name in header[3:]
                   if not SETTING_COLUMN.fullmatch(name)]
    return faults


def parse(page: str) -> Node:
    builder = _Builder()
    builder.feed(page)
    builder.close()
    assert builder.node is builder.root, f"<{builder.node.tag}> never closed"
    return builder.root


def island(page: str) -> dict[str, Any]:
    """The page's one data element (report.html's index of calls, the pair page's of cells),
    parsed as the script parses it, after checking its escapes."""
    [text] = islands(page)
    return escaped_json(text)


def escaped_json(text: str) -> Any:
    """JSON as a page's data holds it: no `<`, `>`, `&` or line separator but as `\\u`
    escapes (fragbench.report.pagedata.island)."""
    assert not set(text) & {"<", ">", "&", "\u2028", "\u2029"}, "an unescaped character"
    return json.loads(text)


DATA_FILE = re.compile(r'fragbenchData\("([a-z]+-[0-9]{4})",(".*")\);\n', re.DOTALL)


def data_json(path: Path) -> str:
    """One data file beside a page, `fragbenchData("NAME","JSON");` (its name that of the file,
    its one argument a string literal): the JSON text page.js hands JSON.parse."""
    text = path.read_text(encoding="utf-8")
    found = DATA_FILE.fullmatch(text)
    assert found, f"{path.name}: not one fragbenchData call: {text[:80]!r}"
    assert found[1] == path.stem, (found[1], path.name)
    literal = json.loads(found[2])
    assert isinstance(literal, str)
    return literal


def data_file(path: Path) -> Any:
    """One data file's data, its JSON's escapes checked (`escaped_json`)."""
    return escaped_json(data_json(path))


def data_folder(page: Path, index: dict[str, Any]) -> Path:
    """The folder beside the page its index names."""
    folder = page.parent / index["files"]["dir"]
    assert re.fullmatch(r"[^/]+-data/[0-9a-f]{16}", index["files"]["dir"]), index["files"]
    assert folder.is_dir(), folder
    return folder


def utf16_slice(text: str, start: int, length: int) -> str:
    """`text.slice(start, start + length)` as JavaScript counts (UTF-16 code units)."""
    units = text.encode("utf-16-le")
    return units[2 * start:2 * (start + length)].decode("utf-16-le")


def marked_extracts(call: dict[str, Any], texts: list[str]) -> None:
    """A located extract is null in a data file: the text the pieces of its fragment mark
    (page.js reads it there). Filled in here as page.js does, after checking that each null
    one is marked in exactly one fragment."""
    marked: dict[int, str] = {}
    where: dict[int, set[int]] = {}
    for k, fragment in enumerate(call["frags"]):
        if len(fragment) < 3:
            continue
        whole, at = texts[fragment[1]], 0
        for size, numbers in fragment[2]:
            text = size if isinstance(size, str) else utf16_slice(whole, at, size)
            at += 0 if isinstance(size, str) else size
            for n in numbers:
                marked[n] = marked.get(n, "") + text
                where.setdefault(n, set()).add(k)
    for cite in call["cites"]:
        if cite[2] is None:
            assert len(where.get(cite[0], ())) == 1, (call["id"], cite)
            cite[2] = marked[cite[0]]


def page_data(page: Path, kind: str = "calls") -> dict[str, Any]:
    """Everything a page shows of its calls (report.html) or cells (the pair page and the grid,
    `kind` "cells"), read as page.js reads it: the index in the page, each item's detail from
    the data files beside it, in order, and each item's search text (`search`). The one decoder
    of the tests: it checks the layout on the way (each item in the file and at the place the
    index puts it, the index's fields those of the item, the derived IDs the items' own, every
    file of the folder read) and gives back what the page held when it was one element: `texts`
    (each fragment or question text, the items' indexes into it shifted to this one list),
    `calls` or `cells`, `usage`, `reasons`, the `index` itself."""
    index = island(page.read_text(encoding="utf-8"))
    folder = data_folder(page, index)
    files = index["files"]
    count = index["count"]
    texts: list[str] = []
    items: list[dict[str, Any]] = []
    read = set()
    for number in range(1, -(-count // files[kind]) + 1):
        path = folder / f"{kind}-{number:04d}.js"
        one = data_file(path)
        read.add(path.name)
        shift = len(texts)
        texts += one.get("texts", [])
        for item in one[kind]:
            if kind == "calls":
                marked_extracts(item, one["texts"])
            if shift and kind == "calls":
                item["frags"] = [[f[0], f[1] + shift, *f[2:]] for f in item["frags"]]
                if "q" in item:
                    item["q"] += shift
            items.append(item)
        assert len(one[kind]) == (files[kind] if number * files[kind] <= count
                                  else count % files[kind])
    search: list[str] = []
    for number in range(1, -(-count // files["search"]) + 1):
        path = folder / f"search-{number:04d}.js"
        search += data_file(path)
        read.add(path.name)
    assert len(items) == len(search) == count
    assert sorted(read) == sorted(p.name for p in folder.iterdir())
    fields = index["fields"]
    for i, item in enumerate(items):
        item["search"] = search[i]
        value = {name: f[0][f[1][i]] for name, f in fields.items()}
        if kind == "calls":
            derived = "{case}-{lang}-{variant}-{mode}-r{rep}".format(**value)
            assert item["id"] == index["ids"].get(str(i), derived), (i, item["id"])
            assert index["ids"].get(str(i)) != derived
            assert value["reasons"] == " ".join(c[3] for c in item["cites"])
            for name in ("case", "lang", "variant", "mode", "rep"):
                assert value[name] == str(item[name]), (i, name)
            for name in fields:
                if name.startswith("group:"):
                    assert value[name] == item.get("groups", {}).get(name[6:], ""), (i, name)
        else:  # a compare page's cell or row: its anchor, and what the filters compare
            derived = "-".join(value[f"data-{c}"] for c in ("case", "lang", "variant", "mode",
                                                              "rep"))
            assert item["anchor"] == index["anchors"].get(str(i), derived), (i, item["anchor"])
            for name in ("case", "lang", "variant", "mode", "rep", "differs", "compared"):
                assert value[f"data-{name}"] == str(item[name]), (i, name)
    return {"texts": texts, kind: items, "usage": index.get("usage"),
            "reasons": index.get("reasons"), "index": index}


def page_bytes(page: Path) -> bytes:
    """The page and every data file of its folder: all it writes, for a check of every byte."""
    index = island(page.read_text(encoding="utf-8"))
    folder = data_folder(page, index)
    return page.read_bytes() + b"".join(p.read_bytes() for p in sorted(folder.iterdir()))


def page_text(page: Path) -> str:
    """The page's text, then each data file's JSON as page.js parses it (one JSON text per
    line): what the page held when its data was one element, for a check of its text."""
    index = island(page.read_text(encoding="utf-8"))
    folder = data_folder(page, index)
    return "\n".join([page.read_text(encoding="utf-8"),
                      *(data_json(p) for p in sorted(folder.glob("*.js")))])


class Node:
    def __init__(self, tag: str, attrs: dict[str, str], parent: Node | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Node | str] = []

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def walk(self) -> list[Node]:
        found = []
        for child in self.children:
            if isinstance(child, Node):
                found.append(child)
                found += child.walk()
        return found

    def all(self, tag: str, cls: str | None = None) -> list[Node]:
        return [n for n in self.walk() if n.tag == tag and (cls is None or cls in n.classes)]

    def one(self, tag: str, cls: str | None = None) -> Node:
        found = self.all(tag, cls)
        assert len(found) == 1, (tag, cls, len(found))
        return found[0]

    def ancestor(self, tag: str, cls: str | None = None) -> Node | None:
        node = self.parent
        while node is not None and not (node.tag == tag and (cls is None or cls in node.classes)):
            node = node.parent
        return node


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {}, None)
        self.node = self.root

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs}, self.node)
        self.node.children.append(node)
        if tag not in VOID:
            self.node = node

    def handle_endtag(self, tag: str) -> None:
        assert self.node.tag == tag, f"</{tag}> closes <{self.node.tag}>: not well nested"
        assert self.node.parent is not None
        self.node = self.node.parent

    def handle_data(self, data: str) -> None:
        self.node.children.append(data)
