"""Follow a worked-example doc (docs/writing-a-chunker.md, docs/adding-a-backend.md) as a reader
would, so that a doc that no longer works fails a test.

A doc marks what the reader does with fenced blocks:
- ```<lang> file=PATH``` : create PATH with the block's text;
- ```toml edit=PATH``` : in the TOML file PATH, set each `key = value` line of the block under
  the table header that precedes it in the block (or at the top level), replacing the line
  that sets that key there;
- ```toml append=PATH``` : add the block's text at the end of PATH;
- ```sh``` : run each line (comments and blank lines skipped), in order, from the fragbench
  checkout.

The reader works in a fragbench checkout: here a scratch folder with the repository's `.venv/`
and `.bootstrap/` linked in and the committed experiments and `corpus/` copied, so nothing the
doc writes lands in the repository, and nothing a user added to the repository's experiments/
(by following a doc there) changes what the doc meets. One deviation, so that a test never
changes the shared environment: `uv pip install --python .venv/bin/python` installs into a
private folder (`--target`, put on PYTHONPATH for every later command) without build isolation
or network, from the packages the environment already has.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import attrs

from support.suite import COMMITTED_EXPERIMENTS, ROOT

FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
INSTALL = "uv pip install --python .venv/bin/python"


@attrs.frozen
class Block:
    lang: str
    file: str | None
    edit: str | None
    append: str | None
    text: str


def blocks(doc: Path, start: str | None = None, stop: str | None = None) -> list[Block]:
    """The doc's blocks, or those from the line `start` (a heading) to the line `stop`."""
    found = []
    whole = doc.read_text(encoding="utf-8")
    part = whole[whole.index(start) if start else 0:whole.index(stop) if stop else None]
    for lang, info, text in FENCE.findall(part):
        attrs_ = dict(part.split("=", 1) for part in info.split() if "=" in part)
        found.append(Block(lang, attrs_.get("file"), attrs_.get("edit"), attrs_.get("append"),
                           text))
    return found


def checkout(tmp: Path, root: Path = ROOT) -> Path:
    """A scratch fragbench checkout of `root`: the environment linked, the committed
    experiments (`COMMITTED_EXPERIMENTS`) and the corpus copied."""
    where = tmp / "fragbench"
    where.mkdir()
    for name in (".venv", ".bootstrap"):
        (where / name).symlink_to(root / name)
    for name in COMMITTED_EXPERIMENTS:
        shutil.copytree(root / "experiments" / name, where / "experiments" / name,
                        ignore=shutil.ignore_patterns("outputs"))
    shutil.copytree(root / "corpus", where / "corpus")
    return where


def edit_toml(path: Path, block: str) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    table = ""
    for raw in block.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            table = line
            continue
        key = line.split("=", 1)[0].strip()
        current = ""
        for i, existing in enumerate(lines):
            stripped = existing.strip()
            if stripped.startswith("["):
                current = stripped
            elif current == table and stripped.split("=", 1)[0].strip() == key:
                lines[i] = line
                break
        else:
            raise AssertionError(f"{path}: no `{key}` under {table or 'the top level'} to edit")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def follow(doc: Path, tmp: Path, replace: dict[str, str] | None = None, *,
           start: str | None = None, stop: str | None = None
           ) -> list[subprocess.CompletedProcess[str]]:
    """Do everything the doc says, in order; each command must succeed. `replace` substitutes
    text in the commands (a loopback server's address for the doc's example one); `start` and
    `stop` follow one part of a doc that has several (`blocks`)."""
    where = checkout(tmp)
    site = tmp / "site"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    env["PYTHONPATH"] = str(site)
    ran = []
    for block in blocks(doc, start, stop):
        if block.file is not None:
            target = (where / block.file).resolve()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.text, encoding="utf-8")
        elif block.edit is not None:
            edit_toml(where / block.edit, block.text)
        elif block.append is not None:
            with (where / block.append).open("a", encoding="utf-8") as config:
                config.write(block.text)
        elif block.lang == "sh":
            for line in block.text.splitlines():
                line = line.split(" #", 1)[0].strip()
                if not line or line.startswith("#"):
                    continue
                for old, new in (replace or {}).items():
                    line = line.replace(old, new)
                if INSTALL in line:
                    line = line.replace(INSTALL, f"{INSTALL} --target {shlex.quote(str(site))}"
                                        " --no-deps --no-build-isolation --offline")
                result = subprocess.run(line, shell=True, cwd=where, env=env,
                                        capture_output=True, text=True, check=False)
                assert result.returncode == 0, (line, result.stdout, result.stderr)
                ran.append(result)
    return ran
