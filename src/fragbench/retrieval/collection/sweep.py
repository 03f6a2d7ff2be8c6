"""Sweeps of `retrieve --collection`: several chunk sizes, top-ks and scorers in one command.

A sweep is every combination of its chunk sizes, top-ks and scorers (a *setting*). Given on
the command line as comma lists (`--chunk-size 2,3 --top-k 1,2 --scorer sqrt-lexical`) or in a
sweep file (`--sweep FILE`, TOML):

    chunk_size = [2, 3]          # or one integer
    top_k = [1, 2]               # or one integer
    scorer = ["sqrt-lexical"]    # or one name; default sqrt-lexical

A single setting is today's command: `--out FILE` (.parquet, .csv or .jsonl), the same table.
Several settings write one table per setting into the folder `--out DIR`, named by its
setting, `chunk-size-<N>_top-k-<K>_scorer-<NAME>.parquet`, and last `sweep.json`, which lists
each setting with its file (other files already in the folder are left as they are: the
manifest says which tables this run wrote). A setting is never a column of a table: nothing
invites averaging results of different settings.

The work is shared: each chunk size is chunked once, each (chunk size, scorer) indexed and
scored once at the sweep's largest top-k, and every smaller top-k is cut from those tops by
the merge (a top-k for k holds the top-k for any k' <= k with the counts its tie flags need).
Everything is checked before anything is computed, and every table is written whole or not
at all (written beside, then renamed); `sweep.json` is written after the tables it lists.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fragbench.errors import UsageError

INT32_MAX = 2**31 - 1
DEFAULT_CHUNK_SIZE = 3
DEFAULT_TOP_K = 1
DEFAULT_SCORER = "sqrt-lexical"
SWEEP_KEYS = ("chunk_size", "top_k", "scorer")
MANIFEST = "sweep.json"
MAX_SETTINGS = 10_000
"""More settings than this in one sweep is a typo (a list pasted twice, a range too wide)."""


@dataclass(frozen=True)
class Sweep:
    """The settings of one command: every chunk size x top-k x scorer (names, in the order
    given, repeats dropped)."""

    chunk_sizes: tuple[int, ...]
    top_ks: tuple[int, ...]
    scorers: tuple[str, ...]

    @property
    def single(self) -> bool:
        """One setting: today's command, one --out file."""
        return len(self.chunk_sizes) == len(self.top_ks) == len(self.scorers) == 1

    def settings(self) -> list[tuple[int, int, str]]:
        """(chunk size, top-k, scorer) in the order they are written."""
        return [(c, k, s) for c in self.chunk_sizes for k in self.top_ks for s in self.scorers]


def table_name(chunk_size: int, top_k: int, scorer: str) -> str:
    """The file of one setting's table in a sweep's --out folder."""
    return f"chunk-size-{chunk_size}_top-k-{top_k}_scorer-{scorer}.parquet"


def _numbers(text: str, option: str) -> tuple[int, ...]:
    values = []
    for part in text.split(","):
        part = part.strip()
        if not re.fullmatch(r"[0-9]{1,10}", part) or not 1 <= int(part) <= INT32_MAX:
            raise UsageError(f"{option} {text!r}: give whole numbers from 1 to {INT32_MAX}, "
                             "separated by commas (e.g. 2,3).")
        values.append(int(part))
    return tuple(dict.fromkeys(values))


def _names(values: list[str], option: str) -> tuple[str, ...]:
    names = [n.strip() for v in values for n in v.split(",")]
    if not names or any(not n for n in names):
        raise UsageError(f"{option} {','.join(values)!r}: an empty scorer name; give names "
                         "separated by commas (e.g. sqrt-lexical).")
    return tuple(dict.fromkeys(names))


def from_options(chunk_size: str | None, top_k: str | None, scorers: list[str] | None
                 ) -> Sweep:
    """The sweep of the command line's options (None: the default)."""
    return _bounded(Sweep(
        _numbers(chunk_size, "--chunk-size") if chunk_size is not None
        else (DEFAULT_CHUNK_SIZE,),
        _numbers(top_k, "--top-k") if top_k is not None else (DEFAULT_TOP_K,),
        _names(scorers, "--scorer") if scorers else (DEFAULT_SCORER,)), "the options")


def _file_values(doc: dict[str, Any], key: str, kind: type, where: str) -> tuple[Any, ...]:
    value = doc[key]
    items = value if isinstance(value, list) else [value]
    what = "whole numbers from 1 to 2147483647" if kind is int else "scorer names"
    if not items:
        raise UsageError(f"{where}: key {key} is an empty list; give one or more {what}.")
    for item in items:
        ok = (isinstance(item, int) and not isinstance(item, bool) and 1 <= item <= INT32_MAX
              if kind is int else isinstance(item, str) and item.strip() != "")
        if not ok:
            raise UsageError(f"{where}: key {key} holds {item!r}; give {what} (one, or a "
                             "list).")
    return tuple(dict.fromkeys(items))


def from_file(path: Path) -> Sweep:
    """The sweep of a TOML sweep file, checked: one line naming the file and the key."""
    where = f"--sweep {path}"
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{where}: cannot be read ({exc.strerror or exc}).") from None
    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{where}: not a TOML file ({str(exc).splitlines()[0]}); write keys "
                         f"{', '.join(SWEEP_KEYS)}.") from None
    for key in doc:
        if key not in SWEEP_KEYS:
            raise UsageError(f"{where}: unknown key {key!r}; the keys are "
                             f"{', '.join(SWEEP_KEYS)}.")
    for key in ("chunk_size", "top_k"):
        if key not in doc:
            raise UsageError(f"{where}: lacks the key {key}; give one or more whole numbers.")
    return _bounded(Sweep(_file_values(doc, "chunk_size", int, where),
                          _file_values(doc, "top_k", int, where),
                          _file_values(doc, "scorer", str, where) if "scorer" in doc
                          else (DEFAULT_SCORER,)), where)


def _bounded(sweep: Sweep, where: str) -> Sweep:
    count = len(sweep.settings())
    if count > MAX_SETTINGS:
        raise UsageError(f"{where}: {count} settings; a sweep takes at most {MAX_SETTINGS}.")
    return sweep


def check_sweep_out(out: Path, sweep: Sweep) -> None:
    """Refuse, before any work, a sweep's --out that cannot be its folder of tables (or a
    scorer name that cannot be part of a file name)."""
    for name in sweep.scorers:
        # Not files.FILE_NAME (64): a scorer is a plugin's name, not an id of ours, and only
        # a part of the file name (`table_name` adds at most 54 characters), so a longer one
        # that works in a sweep today stays allowed; 100 keeps the whole name under 255 bytes.
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", name):
            raise UsageError(f"--scorer {name!r}: this name cannot name a sweep's table file "
                             "(letters, digits, '.', '_', '-'); sweep it alone with --out "
                             "FILE.")
    if out.suffix in (".parquet", ".csv", ".jsonl"):
        raise UsageError(f"--out {out}: a sweep writes one table per setting; name a folder "
                         "(e.g. --out results/), not a file.")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: is a file; name a folder for the sweep's tables.")
    folder = out
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise UsageError(f"--out {out}: {folder} is a file, not a folder; choose another --out.")


def compute_local(sentences_lf: Any, query_frame: Any, sweep: Sweep,
                  scorers: dict[str, Any]) -> dict[tuple[int, int, str], Any]:
    """Every setting's result table (RESULT_SCHEMA), on this machine: per chunk size one
    chunking, per (chunk size, scorer) one index and one scoring at the largest top-k, then
    one merge per top-k."""
    from fragbench.retrieval.collection.engine import local_chunks, local_tops, merge_tops

    largest = max(sweep.top_ks)
    results = {}
    for size in sweep.chunk_sizes:
        chunks, rows = local_chunks(sentences_lf, size, [scorers[n] for n in sweep.scorers])
        for name in sweep.scorers:
            tops = local_tops(sentences_lf, chunks, rows, query_frame, largest, scorers[name])
            for k in sweep.top_ks:
                results[(size, k, name)] = merge_tops([tops], query_frame["query"], k)
        del chunks
    return results


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and the noun, in the plural unless n is 1: "1 result", "10 results", and the
    plural given when adding "s" is wrong (`counted(n, "query", "queries")`)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def write_sweep(results: dict[tuple[int, int, str], Any], sweep: Sweep, out: Path,
                engine: str) -> list[str]:
    """Each setting's table into the folder `out` (each written whole, beside then renamed),
    then `sweep.json` listing them; the lines to print."""
    from fragbench.files import write_text_atomically
    from fragbench.tables import write_table

    out.mkdir(parents=True, exist_ok=True)
    listed, lines = [], []
    for size, k, name in sweep.settings():
        frame = results[(size, k, name)]
        path = out / table_name(size, k, name)
        write_table(frame, path)
        listed.append({"chunk_size": size, "top_k": k, "scorer": name, "file": path.name,
                       "rows": frame.height, "queries": frame["query"].n_unique()})
        lines.append(f"chunk size {size}, top-k {k}, scorer {name}: "
                     f"{counted(frame.height, 'result')}, written to {path}")
    try:
        write_text_atomically(out / MANIFEST, json.dumps(
            {"engine": engine, "settings": listed}, indent=2) + "\n")
    except OSError as exc:
        from fragbench.errors import FragbenchError

        raise FragbenchError(f"{out / MANIFEST}: cannot be written ({exc.strerror or exc}); "
                             "choose a writable --out.") from None
    return lines
