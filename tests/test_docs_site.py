"""The documentation site (mkdocs.yml, `make docs`): it builds offline with `mkdocs build
--strict`, loads nothing from another host, renders the CLI reference from the program and the
kit's names where they are defined, and the README's links land on pages and anchors that
exist. A broken link, a broken anchor, a public name without a docstring or a lost CLI marker
each fail the build: shown on a copy of the docs and the source, broken on purpose.

The build runs as `make docs` runs it, in a subprocess, into tmp_path (about 7 CPU-seconds).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import griffe
import pytest
import typer
from support.suite import ROOT

import fragbench.testing
from fragbench.cli.commands import app

pytestmark = pytest.mark.slow

REMOTE = re.compile(r"<(?:script|link|img|iframe|source)\b[^>]*?(?:src|href)=[\"']?(?:https?:)?//"
                    r"[^\"' >]+|@import[^;]*//|url\([\"']?(?:https?:)?//")
"""A script, style, font, image or frame fetched from another host (a link a reader may follow
is fine)."""
LINK = re.compile(r"\]\(([^)\s]+)\)|\bsrc=\"([^\"]+)\"")


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--clean",
                           "--config-file", str(config), "--site-dir", str(site)],
                          cwd=config.parent, env=env, capture_output=True, text=True,
                          check=False)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = build(ROOT / "mkdocs.yml", out)
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    return out


def ids(page: Path) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', page.read_text(encoding="utf-8")))


def test_every_page_is_built(site: Path) -> None:
    """Each Markdown page under docs/ is a page of the site (mkdocs.yml's nav lists them all:
    `omitted_files: warn` makes a page left out of it a failure), the screenshots with them."""
    pages = {p.relative_to(ROOT / "docs").with_suffix(".html").as_posix()
             for p in (ROOT / "docs").rglob("*.md")}
    built = {p.relative_to(site).as_posix() for p in site.rglob("*.html")}
    assert pages <= built
    assert {"screenshots/report-demo.png", "screenshots/report-stopped.png"} <= {
        p.relative_to(site).as_posix() for p in site.rglob("*.png")}
    assert not list(site.rglob("*.py")), "docs/*.py are build code, not pages"


def test_the_site_loads_nothing_from_another_host(site: Path) -> None:
    """Offline: no page, script or style fetches from another host (`font: false`, no plugin
    that downloads: Material's `offline` plugin would add a script from unpkg.com to every
    page), and the search index is built."""
    for path in site.rglob("*"):
        if path.suffix in {".html", ".js", ".css"}:
            found = REMOTE.findall(path.read_text(encoding="utf-8"))
            assert found == [], f"{path.relative_to(site)} loads {found[:3]}"
    index = (site / "search" / "search_index.json").read_text(encoding="utf-8")
    assert "ledger settle" in index


def commands(group: object, prefix: tuple[str, ...] = ("fragbench",)) -> list[tuple[str, ...]]:
    """Every command path of the CLI (`fragbench ledger show`), from the program itself."""
    found = [prefix]
    for name, command in sorted(getattr(group, "commands", {}).items()):
        found += commands(command, (*prefix, name))
    return found


def test_the_cli_reference_is_the_programs(site: Path) -> None:
    """cli.html holds a section per command of the Typer app (subcommands included), each with
    every option of that command, so a command or option added to the program is on the page
    at the next build: nothing is copied by hand."""
    page = site / "cli.html"
    text = page.read_text(encoding="utf-8")
    anchors = ids(page)
    root = typer.main.get_command(app)
    paths = commands(root)
    assert len(paths) > 15  # retrieve ... export, import's and ledger's subcommands
    for path in paths:
        assert "-".join(path) in anchors, path
        command = root
        for name in path[1:]:
            command = command.commands[name]  # type: ignore[attr-defined]
        section = text.split(f'id="{"-".join(path)}"', 1)[1]
        for parameter in command.params:
            for option in getattr(parameter, "opts", []):
                if option.startswith("--"):
                    assert f"<code>{option}" in section, (path, option)


def test_each_lazy_name_of_the_kit_has_its_entry(site: Path) -> None:
    """The kit's names (`from fragbench.testing import check_backend`) each have an entry on the
    page of the submodule that defines them."""
    for name, submodule in fragbench.testing._EXPORTS.items():
        where = f"fragbench.testing.{submodule}"
        page = site / "reference" / "testing" / f"{submodule}.html"
        assert f"{where}.{name}" in ids(page), (name, where)


def test_the_readmes_links_land(site: Path) -> None:
    """Every relative link and image of README.md names a file of the repository, and a link
    into docs/ with an anchor lands on a heading the built page has."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = [a or b for a, b in LINK.findall(readme)]
    assert any(link.startswith("docs/running.md#") for link in links)
    for link in links:
        if "://" in link:
            continue
        path, _, anchor = link.partition("#")
        assert (ROOT / path).exists(), link
        if anchor:
            assert path.startswith("docs/") and path.endswith(".md"), link
            page = site / Path(path).relative_to("docs").with_suffix(".html")
            assert anchor in ids(page), link


def copy_of_the_docs(tmp_path: Path) -> Path:
    """mkdocs.yml, docs/ and src/ copied, so that the copy can be broken and built."""
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy2(ROOT / "mkdocs.yml", root / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", root / "docs")
    shutil.copytree(ROOT / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def drop_docstring(root: Path, path: str) -> None:
    """Delete the docstring of `path` (a name griffe knows) from the copy's source."""
    obj = griffe.load(path, search_paths=[str(root / "src")])
    assert obj.docstring is not None and obj.docstring.lineno and obj.docstring.endlineno
    file = Path(str(obj.filepath))
    lines = file.read_text(encoding="utf-8").splitlines(keepends=True)
    del lines[obj.docstring.lineno - 1:obj.docstring.endlineno]
    file.write_text("".join(lines), encoding="utf-8")


def test_a_broken_link_anchor_docstring_or_cli_page_fails_the_build(tmp_path: Path) -> None:
    root = copy_of_the_docs(tmp_path)
    page = root / "docs" / "your-own-experiment.md"
    text = page.read_text(encoding="utf-8")
    assert "(running.md#calls-in-flight)" in text
    page.write_text(text.replace("(running.md#calls-in-flight)", "(running.md#calls-aloft)")
                    + "\nSee [the gone page](nowhere.md).\n", encoding="utf-8")
    drop_docstring(root, "fragbench.interfaces.COST_FIELDS")
    cli = root / "docs" / "cli.md"
    hooks_marker = "<!-- the CLI reference, generated by docs/hooks.py -->"
    cli.write_text(cli.read_text(encoding="utf-8").replace(hooks_marker, ""), encoding="utf-8")

    done = build(root / "mkdocs.yml", tmp_path / "site")
    said = done.stdout + done.stderr
    assert done.returncode != 0
    assert "Aborted with 4 warnings in strict mode" in said, said
    assert "'running.md' does not contain an anchor '#calls-aloft'" in said, said
    assert "'nowhere.md'" in said, said
    assert "fragbench.interfaces.COST_FIELDS has no docstring" in said, said
    assert "cli.md has lost the line" in said, said
