"""`fragbench new experiment NAME [--corpus PATH] [--dir DIR]`: an experiment folder to start
from, that freezes and runs offline as written.

What a user can rely on:
- NAME: lowercase ASCII letters and digits, runs of them joined by single `-`, `_` or `.`,
  starting with a letter, at most 64 characters (it is also the budget's id, which names the
  budget's ledger). Anything else is refused in one line (exit 2), nothing written.
- `DIR/NAME` (DIR by default `experiments`, as in a fragbench checkout; made when missing,
  its parent a folder, as `uv init` and `cargo new` do: `fragbench.scaffold.plugin.check_dir`)
  holds `config.toml` (every key commented: what it means, what is frozen),
  `prompts/LANG.toml` (protocol 1.0's wording), `schema.json` (protocol 1.0's answer
  schema: an answer and verbatim citations) and, without --corpus, `corpus/example.toml`,
  one case in English.
- With `--corpus PATH` (a TOML case file, a folder of them, or a columnar folder such as one
  `fragbench import` wrote), the corpus is loaded and validated first (refused in one line,
  exit 4, nothing written), and the config names it by its path relative to the new folder
  (so that the pair can be committed and cloned together). Its languages are those every case
  has and its variants those every case has, in the first case's order; a corpus whose cases
  share no language or no variant is refused. Decision: a language other than `en` and `fr`
  gets a prompt file with protocol 1.0's English wording, headed "TRANSLATE BEFORE FREEZING"
  (and the command says so), rather than a refusal: the experiment still freezes and runs
  offline as written, and the words to translate are in front of the reader.
- The default backend is `extractive` (offline, unpriced: nothing is billed by accident); an
  `openai` backend with protocol 1.0's parameters and pricing and `max_in_flight = 4` is ready
  for a billed (or loopback) series. The budget is the experiment's own: id NAME, ceiling 2
  USD. A NAME whose budget id another experiment in DIR already uses (such as
  `protocol-1.0-openai`) is refused (exit 4): a new experiment never draws on another's budget.
- Nothing is half-written: every file is rendered first, then written into a hidden folder in
  DIR renamed to NAME when complete (`fragbench.scaffold.plugin.write_whole`). An existing
  `DIR/NAME`
  is refused (exit 4) and left as it is.
"""

from __future__ import annotations

import datetime
import os
import re
import tomllib
from pathlib import Path

import attrs

from fragbench.corpus.ids import LANG_CODE
from fragbench.errors import FragbenchError, UsageError
from fragbench.scaffold.plugin import TEMPLATES, check_dir, write_whole

NAME = re.compile(r"[a-z][a-z0-9]*(?:[-_.][a-z0-9]+)*")
MAX_NAME = 64
"""A budget id's limit (`fragbench.files.FILE_NAME`): the name is the budget's id."""
TEMPLATE = TEMPLATES / "experiment"
WORDED = ("en", "fr")
"""The languages protocol 1.0's prompt wording exists in."""
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
_SAFE_PATH = re.compile(r"[A-Za-z0-9._/-]+")


@attrs.frozen
class NewExperiment:
    """What `new_experiment` wrote."""

    folder: Path
    cases: int
    languages: tuple[str, ...]
    to_translate: tuple[str, ...]
    """Prompt files holding the English wording for another language (relative paths)."""


def name_problem(name: str) -> str | None:
    """Why `name` cannot name an experiment, in words that follow it; None when it can."""
    if len(name) > MAX_NAME:
        return f"is longer than {MAX_NAME} characters"
    if not NAME.fullmatch(name):
        return ("is not lowercase ASCII letters and digits joined by single '-', '_' or '.', "
                "starting with a letter (such as `my-study`)")
    return None


def toml_string(text: str) -> str:
    """`text` as a TOML basic string: quotes, backslashes and every control character
    escaped (a path may hold any of them)."""
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _common(lists: list[tuple[str, ...]]) -> tuple[str, ...]:
    """The items every list has, in the first list's order."""
    shared = set(lists[0]).intersection(*lists[1:])
    return tuple(item for item in lists[0] if item in shared)


def _budget_users(parent: Path, budget_id: str) -> list[Path]:
    """The configs in `parent`'s folders whose budget is `budget_id` (unreadable ones skipped:
    they would not run either)."""
    users = []
    for config in sorted(parent.glob("*/config.toml")):
        try:
            data = tomllib.loads(config.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
        budget = data.get("budget")
        if isinstance(budget, dict) and budget.get("id") == budget_id:
            users.append(config)
    return users


def _fill(text: str, given: dict[str, str]) -> str:
    # A placeholder the code does not know is a bug in the templates: KeyError, traceback.
    return _PLACEHOLDER.sub(lambda m: given[m.group(1)], text)


def render(name: str, target: Path, corpus: Path | None) -> tuple[dict[str, str], int,
                                                                    tuple[str, ...]]:
    """The experiment's files (path relative to its folder -> text), its number of cases and
    its languages. Loads and validates `corpus` (CorpusError when it is unusable)."""
    from fragbench.corpus.cases import load_corpus

    files: dict[str, str] = {}
    if corpus is None:
        example = TEMPLATE / "corpus" / "example.toml.tmpl"
        files["corpus/example.toml"] = _fill(example.read_text(encoding="utf-8"),
                                             {"name": name})
        cases, languages, variants = 1, ("en",), ("A", "B")
        corpus_value = toml_string("corpus")
        corpus_note = "Here: corpus/, one example case."
        languages_note = "The example case is in English."
    else:
        loaded = load_corpus([corpus.resolve()])
        languages = _common([tuple(c.langs) for c in loaded])
        variants = _common([tuple(c.variants) for c in loaded])
        if not languages or not variants:
            missing = "language" if not languages else "variant"
            raise FragbenchError(f"--corpus {corpus}: its cases share no {missing}; an "
                                 f"experiment asks every case for each of its {missing}s: "
                                 "make them share one.")
        odd = [lang for lang in languages if not LANG_CODE.fullmatch(lang)]
        if odd:
            raise FragbenchError(f"--corpus {corpus}: language {odd[0]!r} cannot name a prompt "
                                 "file; use a language code such as `en` or `pt-BR`.")
        cases = len(loaded)
        where = os.path.relpath(corpus.resolve(), target.resolve())
        corpus_value = toml_string(Path(where).as_posix())
        corpus_note = f"Here: the --corpus given, {cases} cases."
        languages_note = "Taken from the corpus: those every case has."
    to_translate = []
    prompt_lines = []
    for lang in languages:
        source = f"{lang}.toml.tmpl" if lang in WORDED else "other.toml.tmpl"
        path = f"prompts/{lang}.toml"
        files[path] = _fill((TEMPLATE / "prompts" / source).read_text(encoding="utf-8"),
                            {"name": name, "lang": lang})
        prompt_lines.append(f"{lang} = {toml_string(path)}")
        if lang not in WORDED:
            to_translate.append(path)
    files["schema.json"] = (TEMPLATE / "schema.json").read_text(encoding="utf-8")
    shown = str(target) if _SAFE_PATH.fullmatch(str(target)) else f"PATH/TO/{name}"
    files["config.toml"] = _fill((TEMPLATE / "config.toml.tmpl").read_text(encoding="utf-8"), {
        "name": name,
        "dir": shown,
        "title": f"fragbench experiment {name}",
        "design_date": datetime.date.today().isoformat(),
        "corpus": corpus_value,
        "corpus_note": corpus_note,
        "languages": ", ".join(toml_string(lang) for lang in languages),
        "languages_note": languages_note,
        "variants": ", ".join(toml_string(v) for v in variants),
        "prompts": "\n".join(prompt_lines),
    })
    return files, cases, tuple(to_translate)


def new_experiment(name: str, parent: Path, corpus: Path | None = None) -> NewExperiment:
    """Write the experiment folder `parent/NAME` (`parent` made when missing). UsageError for
    a bad name or a `parent` that is no folder and cannot be made in one; FragbenchError
    (refused) when the folder exists, another experiment in `parent` uses the budget id NAME,
    or the corpus is unusable."""
    problem = name_problem(name)
    if problem is not None:
        raise UsageError(f"experiment name {name!r} {problem}; choose another.")
    check_dir(parent)  # a missing one is made by write_whole, its parent a folder
    target = parent / name
    if target.exists() or target.is_symlink():
        raise FragbenchError(f"{target} already exists; it is left as it is: remove it, or "
                             "choose another name or --dir.")
    users = _budget_users(parent, name)
    if users:
        raise FragbenchError(f"{users[0]} already draws on budget {name!r}, which a new "
                             f"experiment {name} would share; choose another name.")
    files, cases, to_translate = render(name, target, corpus)
    languages = tuple(Path(p).stem for p in files if p.startswith("prompts/"))
    write_whole(files, target, name)
    return NewExperiment(target, cases, languages, to_translate)
