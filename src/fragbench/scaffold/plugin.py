"""`fragbench new KIND NAME`: a plugin package to start from, that installs and passes its own
tests as written.

What a user can rely on:
- KIND is `chunker`, `scorer`, `measure` or `backend`; NAME is the name the plugin registers
  (`fragbench plugins` lists it): lowercase ASCII letters, digits and single hyphens, starting
  with a letter, at most 40 characters, not starting with `fragbench` (the package already
  says it). The package is `fragbench-NAME`, its module `fragbench_NAME` (hyphens as
  underscores).
- The package folder `DIR/fragbench-NAME` is made in DIR (by default the current folder;
  made when missing, its parent a folder: `check_dir`) and holds `pyproject.toml`
  (hatchling build, the `fragbench` entry point), `src/fragbench_NAME/__init__.py` (the
  plugin, light at import, declaring the plugin API it is written for), `tests/test_NAME.py`
  (the test kit's check for that kind) and a README saying what to edit next.
- The plugin's class is NAME in CamelCase ending in the kind's word (`usage` ->
  `UsageBackend`, `my-chunker` -> `MyChunker`, `class_name`), so that no NAME can shadow a
  name the templates use or be a Python keyword: every accepted NAME gives a package whose
  tests pass.
- The README's commands are run from the fragbench checkout (the folder with `.venv/` and
  `.bootstrap/bin/uv`, which the Makefile makes) and name the package `PATH/TO/fragbench-NAME`,
  a placeholder the reader replaces. Decision: no real path is written in, because the README
  travels with the package (moved, committed, cloned next to someone else's checkout) and
  `fragbench new` may run from anywhere, so a path baked in at generation time would be right
  for one folder on one machine, and wrong without a word everywhere else; the placeholder
  cannot be mistaken for a path, and `fragbench new` prints the package's path (as given with
  `--dir`) for the first substitution. The install is editable (`-e`) through a plain `.pth`
  of `src/` (hatchling's `dev-mode-dirs`), so it builds with hatchling alone.
- Nothing is half-written: every file is rendered first, then written into a hidden folder in
  DIR, which is renamed to `fragbench-NAME` only when complete (removed on any failure). An
  existing `fragbench-NAME` is refused and left as it is.
- The templates are in `fragbench/scaffold/templates/` (shipped in the wheel): `common/` for the
  files every kind has, one folder per kind for the plugin module and its test.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
from pathlib import Path

from fragbench.api import API_VERSION
from fragbench.errors import FragbenchError, UsageError

TEMPLATES = Path(__file__).parent / "templates"
KINDS = ("chunker", "scorer", "measure", "backend")
NAME = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
MAX_NAME = 40
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")

DEPENDENCIES = {"backend": ("openai",)}
"""What a kind's template imports beyond fragbench (Polars comes with fragbench)."""

EDIT_NEXT = {
    "chunker": (
        "The chunker groups whole sentences, `size` at a time. Change `chunk` to your rule; "
        "the kit's `check_chunker` checks the columns, the order and that every sentence is "
        "in exactly one chunk (declare `overlap = True` if chunks share sentences, "
        "`output = \"spans\"` to return character offsets: docs/plugins.md, \"Chunkers: "
        "sentences or spans\")."),
    "scorer": (
        "The scorer counts the question's distinct words a chunk holds. Change `score` to "
        "your rule; the kit's `check_scorer` checks that every chunk comes back once, "
        "unchanged, with a finite score that is the same to the bit whether scored alone or "
        "with the others."),
    "measure": (
        "The measure counts each case's calls and what they cost. Change `compute` to your "
        "measure and `tables` to the tables and columns it returns (Polars types written as "
        "text: \"String\", \"Int32\", \"Decimal(38, 18)\" for money); the kit's "
        "`check_measure` checks the tables against that declaration, money as exact decimals, "
        "and the same output twice. A primary measure is pre-registered: an experiment lists "
        "it in its config's `measures` and freezes its plan again."),
    "backend": (
        "The backend speaks the Chat Completions API through the openai SDK, on fragbench's "
        "transport. Set `DEFAULT_URL`, read the usage your provider reports, and keep "
        "`max_retries=0` and `no_redirects`; the test runs the kit's whole fault suite "
        "(`check_backend` against the `chat_server` fixture). docs/adding-a-backend.md "
        "explains every line, and how to give an experiment a `[backends.NAME]` table with "
        "its pricing."),
}


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a plugin package, in words that follow it; None when it can."""
    if len(name) > MAX_NAME:
        return f"is longer than {MAX_NAME} characters"
    if not NAME.fullmatch(name):
        return ("is not lowercase ASCII letters, digits and single hyphens starting with a "
                "letter (such as `my-chunker`)")
    if name.startswith("fragbench"):
        return "starts with `fragbench`: the package is already called fragbench-NAME"
    return None


def class_name(kind: str, name: str) -> str:
    """The plugin's class: NAME in CamelCase, ending in the kind's word (`usage` -> `UsageBackend`,
    `my-chunker` -> `MyChunker`). The ending is what keeps it from shadowing a name the
    templates bind (`Usage`, `Route`, `MeasureInput`, `Decimal`, ...) or being a keyword
    (`none` -> `None`): no other name in them ends in `Chunker`, `Scorer`, `Measure` or
    `Backend` (tests/scaffold/test_scaffold.py checks the templates for it)."""
    camel = "".join(part.capitalize() for part in name.split("-"))
    suffix = kind.capitalize()
    return camel if camel.endswith(suffix) else camel + suffix


def values(kind: str, name: str) -> dict[str, str]:
    """What the templates' `{{placeholders}}` become for this plugin."""
    from fragbench import __version__

    entry = name.replace("-", "_")
    dependencies = [f"fragbench>={__version__}" if __version__ != "unknown" else "fragbench",
                    *DEPENDENCIES.get(kind, ())]
    return {
        "kind": kind,
        "name": name,
        "dist": f"fragbench-{name}",
        "module": f"fragbench_{entry}",
        "entry": entry,
        "cls": class_name(kind, name),
        "env": entry.upper(),
        "api_version": API_VERSION,
        "dependencies": ", ".join(f'"{d}"' for d in dependencies),
        "edit_next": EDIT_NEXT[kind],
    }


def render(kind: str, name: str) -> dict[str, str]:
    """The package's files, path relative to its folder -> text."""
    given = values(kind, name)
    sources = {
        "pyproject.toml": TEMPLATES / "common" / "pyproject.toml.tmpl",
        "README.md": TEMPLATES / "common" / "README.md.tmpl",
        f"src/{given['module']}/__init__.py": TEMPLATES / kind / "plugin.py.tmpl",
        f"tests/test_{given['entry']}.py": TEMPLATES / kind / "test.py.tmpl",
    }
    files = {}
    for path, source in sources.items():
        text = source.read_text(encoding="utf-8")
        # A placeholder the code does not know is a bug in the templates: KeyError, traceback.
        files[path] = _PLACEHOLDER.sub(lambda m: given[m.group(1)], text)
    return files


def new_plugin(kind: str, name: str, parent: Path) -> Path:
    """Write the `kind` plugin package `fragbench-NAME` into `parent`; returns its folder.
    UsageError for an unknown kind, a bad name or a `parent` that is no folder and cannot be
    made in one (`check_dir`);
    FragbenchError (refused) when the package folder already exists."""
    if kind not in KINDS:
        raise UsageError(f"no plugin kind {kind!r}; `fragbench new` makes a "
                         f"{', '.join(KINDS[:-1])} or {KINDS[-1]} plugin, or an experiment.")
    problem = name_problem(name)
    if problem is not None:
        raise UsageError(f"plugin name {name!r} {problem}; choose another.")
    check_dir(parent)
    target = parent / f"fragbench-{name}"
    if target.exists() or target.is_symlink():
        raise FragbenchError(f"{target} already exists; it is left as it is: remove it, or "
                             "choose another name or --dir.")
    return write_whole(render(kind, name), target, name)


def check_dir(parent: Path) -> None:
    """Refuse, before anything is rendered, a --dir that is neither a folder nor one to make.
    Decision: a missing --dir is made, as `uv init` and `cargo new` make theirs (a user outside
    a checkout has no `experiments/`), but only one level of it: its parent must be a folder,
    so that a mistyped path is said rather than built."""
    if parent.is_dir():
        return
    if parent.exists() or parent.is_symlink():
        raise UsageError(f"--dir {parent}: is not a folder (a file, or a link to nothing); "
                         "name a folder, or one to be made.")
    if not parent.parent.is_dir():
        raise UsageError(f"--dir {parent}: no such folder, and its parent {parent.parent} is "
                         "no folder either; name a folder, or one to be made in an existing "
                         "folder.")


def _make_dir(parent: Path) -> bool:
    """Make --dir when it is missing (its parent checked by `check_dir`); True when made here,
    so that a failure removes it again."""
    try:
        parent.mkdir()
    except FileExistsError:
        return False  # there already, or made meanwhile: mkdtemp below says if it is no folder
    except OSError as exc:
        raise FragbenchError(f"--dir {parent}: cannot be made ({exc.strerror}); name a folder "
                             "you can write in.") from None
    return True


def write_whole(files: dict[str, str], target: Path, what: str) -> Path:
    """Write `files` (path relative to `target` -> text) as the new folder `target`, whole or
    not at all: into a hidden folder beside it, renamed into place once every file is
    written (removed on any failure). A `target` made meanwhile is refused and left as it is.
    `what` is in the hidden folder's name (`.fragbench-new-WHAT-...`). The folder `target` is
    made in (--dir) is made when missing, and removed again on a failure."""
    parent = target.parent
    made = _make_dir(parent)
    try:
        scratch = Path(tempfile.mkdtemp(prefix=f".fragbench-new-{what}-", dir=parent))
    except OSError as exc:
        _unmake(parent, made)
        raise FragbenchError(f"--dir {parent}: cannot be written in ({exc.strerror}); name a "
                             "folder you can write in.") from None
    try:
        # Made inside the scratch folder, so that it gets the umask's permissions (mkdtemp's
        # own folder is private), then renamed into place whole.
        folder = scratch / target.name
        folder.mkdir()
        for path, text in files.items():
            file = folder / path
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(text, encoding="utf-8")
        if target.exists() or target.is_symlink():  # made meanwhile: never replaced
            raise FragbenchError(f"{target} already exists; it is left as it is: remove it, "
                                 "or choose another name or --dir.")
        folder.rename(target)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        _unmake(parent, made)
        raise
    shutil.rmtree(scratch, ignore_errors=True)
    return target


def _unmake(parent: Path, made: bool) -> None:
    """Remove --dir again when this command made it (only while empty: never anyone's files)."""
    if made:
        with contextlib.suppress(OSError):
            parent.rmdir()
