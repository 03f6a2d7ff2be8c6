"""Issue 24, items 3, 4, 9 and 10 (H4's part): an experiment id that would leave --out, a
linked folder inside a series, `new --dir` naming a folder not made yet, and the words of two
refusals.

The real CLI in process (Typer's runner), real files and real symbolic links; nothing patched.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli import error_lines, run_cli
from support.measure_plugin import Install, cell_cost, installer

import fragbench
from fragbench.scaffold.experiment import toml_string

# Over 5 s of tests in all (`make check` leaves it to `make test`: pyproject.toml's markers).
pytestmark = pytest.mark.slow


def stats(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file below `folder` (links not followed) with its inode, mtime and bytes: a file
    rewritten with the same bytes (a figure is drawn byte for byte the same) still shows."""
    out = {}
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = Path(root) / name
            st = path.lstat()
            data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
            out[str(path)] = (st.st_ino, st.st_mtime_ns, data)
    return out


# -- Item 3: an experiment id is one folder name under --out --------------------------------

def hostile_ids(tmp_path: Path) -> list[str]:
    return ["../../../../elsewhere/ESCAPED", str(tmp_path / "elsewhere" / "ABSOLUTE"),
            "nested/id", "..", ".", "-dash-first", "id\nwith-a-line-break", "x" * 65]


@pytest.mark.parametrize("command", ["freeze", "plan", "run"])
@pytest.mark.parametrize("which", range(8))
def test_an_experiment_id_that_is_no_folder_name_is_refused(
        experiment: Path, workspace: Path, ledger_store: Path, command: str,
        which: int) -> None:
    """The id names OUT/<id>, as the budget id names its ledger file: the same rule
    (`fragbench.experiment.config.file_name_problem`), refused at freeze, plan and run in one line
    naming
    the config and the value; nothing is written anywhere (the workspace, which holds --out
    and the escape targets, and the ledger store are unchanged)."""
    bad = hostile_ids(workspace)[which]
    config = experiment / "config.toml"
    text = config.read_text(encoding="utf-8")
    assert text.count('id = "protocol-1.0"\n') == 1
    config.write_text(text.replace('id = "protocol-1.0"\n', f"id = {toml_string(bad)}\n"),
                      encoding="utf-8")
    before, ledgers = stats(workspace), stats(ledger_store)
    args = {"freeze": ("freeze", str(experiment)), "plan": ("plan", str(experiment)),
            "run": ("run", str(experiment), "--series", "extractive",
                    "--out", str(workspace / "outputs" / "a" / "b" / "c" / "d"))}[command]
    result = run_cli(*args)
    assert result.returncode == 4, result.stdout + result.stderr
    [line] = error_lines(result.stderr)
    assert f"{config}: id must be up to 64 letters, digits" in line, line
    assert repr(bad[:80]) in line, line
    assert stats(workspace) == before and stats(ledger_store) == ledgers
    assert not (workspace / "elsewhere").exists()


def test_every_committed_id_keeps_the_rule(workspace: Path) -> None:
    """The rule changes no committed experiment: each still plans."""
    for config in sorted((workspace / "experiments").glob("*/config.toml")):
        result = run_cli("plan", str(config.parent))
        assert result.returncode == 0, result.stderr


def test_an_experiment_id_read_back_from_a_series_is_only_a_label(extractive: Path,
                                                                  tmp_path: Path) -> None:
    """The readers (report, measure, export, compare, scan) take the experiment id from the
    series' own files (series.json) as a label, never as a path: a hostile one written there
    sends nothing outside the series or the --out/--html named. A guard: no reader joins it
    to a path today."""
    for name in ("series.json", "status.json"):  # status.json repeats it
        info = json.loads((extractive / name).read_text(encoding="utf-8"))
        info["experiment"] = "../../../../ESCAPED"
        (extractive / name).write_text(json.dumps(info), encoding="utf-8")
    other = extractive.parent / "again"
    shutil.copytree(extractive, other)
    def entries() -> set[str]:  # every file and folder, made or not by a reader
        return {str(Path(root) / name) for root, dirs, files in os.walk(tmp_path.parent)
                for name in (*dirs, *files)}

    outside = entries()
    for args in (("report", str(extractive)), ("measure", str(extractive)),
                 ("export", str(extractive), "--format", "csv"),
                 ("compare", str(extractive), str(other), "--html", str(tmp_path / "c.html"),
                  "--out", str(tmp_path / "c.parquet"))):
        result = run_cli(*args)
        assert result.returncode == 0, (args, result.stderr)
    assert set(fragbench.scan(extractive.parent)["calls"].collect()["experiment"]) == \
        {"../../../../ESCAPED"}
    made = entries() - outside
    assert made and all(Path(p).is_relative_to(tmp_path) for p in made)
    assert not [p for p in made if "ESCAPED" in p]


# -- Item 4: a folder inside a series that is a link is refused -----------------------------

@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "mine.txt").write_text("a file of the user's own\n", encoding="utf-8")
    return folder


def refused_as_linked(series: Path, folder: str, elsewhere: Path, *args: str) -> str:
    """`fragbench ARGS` with SERIES/FOLDER a link to `elsewhere`: exit 4, one line naming the
    link, nothing written there or in the series. The line, for what else it must say."""
    (series / folder).symlink_to(elsewhere, target_is_directory=True)
    before, there = stats(series), stats(elsewhere)
    result = run_cli(*args)
    assert result.returncode == 4, result.stdout + result.stderr
    [line] = error_lines(result.stderr)
    assert f"{series / folder}: is a symbolic link" in line, line
    assert stats(elsewhere) == there and stats(series) == before
    return line


@pytest.mark.parametrize(("command", "folder"), [("report", "figures"),
                                                  ("measure", "figures"),
                                                  ("measure", "diagnostics")])
def test_a_linked_folder_inside_a_series_is_refused(extractive: Path, elsewhere: Path,
                                                    command: str, folder: str) -> None:
    """As a linked series folder is refused at run: one line naming the link, exit 4, and
    nothing written, neither where the link points nor in the series."""
    if (extractive / folder).exists():
        shutil.rmtree(extractive / folder)
    line = refused_as_linked(extractive, folder, elsewhere, command, str(extractive))
    assert "nothing was written" in line


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    yield from installer(tmp_path, monkeypatch)


def test_a_linked_diagnostics_folder_gets_no_diagnostic_table(extractive: Path,
                                                              elsewhere: Path,
                                                              install: Install) -> None:
    """The folder a diagnostic measure's tables go in (`measure --diagnostic`): refused
    linked, before any table is written."""
    install("fragbench-cell-cost-d", cell_cost(name="cell-cost-d", kind="diagnostic"))
    refused_as_linked(extractive, "diagnostics", elsewhere,
                      "measure", str(extractive), "--diagnostic", "cell-cost-d")
    (extractive / "diagnostics").unlink()  # without the link, the same command writes it
    assert run_cli("measure", str(extractive), "--diagnostic", "cell-cost-d").returncode == 0
    assert (extractive / "diagnostics" / "cell_cost.parquet").is_file()


def test_a_figure_file_that_is_a_link_is_replaced_not_written_through(
        extractive: Path, elsewhere: Path) -> None:
    """As every other file of a series: written beside and renamed into place."""
    for name in ("availability.png", "citations.svg"):
        (extractive / "figures" / name).unlink()
        (extractive / "figures" / name).symlink_to(elsewhere / "mine.txt")
    there = stats(elsewhere)
    result = run_cli("report", str(extractive))
    assert result.returncode == 0, result.stderr
    assert stats(elsewhere) == there
    for name in ("availability.png", "citations.svg"):
        figure = extractive / "figures" / name
        assert not figure.is_symlink() and figure.stat().st_size > 1000


def test_a_linked_export_folder_is_refused_and_a_linked_out_replaced(extractive: Path,
                                                                     elsewhere: Path,
                                                                     tmp_path: Path) -> None:
    """SERIES/export, the export's default: a link there is refused as figures/ is. An --out
    the user names that is a link is replaced whole by the export, as a linked file is, its
    folder untouched and no trace of the link left beside it."""
    refused_as_linked(extractive, "export", elsewhere, "export", str(extractive), "--format",
                      "csv")

    side = tmp_path / "side"
    (side / "empty").mkdir(parents=True)
    link = side / "named"
    link.symlink_to(side / "empty", target_is_directory=True)
    result = run_cli("export", str(extractive), "--format", "csv", "--out", str(link))
    assert result.returncode == 0, result.stderr
    assert link.is_dir() and not link.is_symlink() and (link / "calls.csv").is_file()
    assert list((side / "empty").iterdir()) == []
    assert sorted(p.name for p in side.iterdir()) == ["empty", "named"]


# -- Item 9: `new KIND NAME --dir DIR` makes a missing DIR (its parent a folder) ------------

@pytest.mark.parametrize("kind", ["chunker", "scorer", "measure", "backend", "experiment"])
def test_new_makes_a_missing_dir(tmp_path: Path, kind: str) -> None:
    """As `uv init` and `cargo new`: a user outside a checkout has no experiments/. The
    package or experiment is written whole into the folder made."""
    made = tmp_path / "mine"
    result = run_cli("new", kind, "stride", "--dir", str(made))
    assert result.returncode == 0, result.stderr
    target = made / ("stride" if kind == "experiment" else "fragbench-stride")
    assert f"written to {target}" in result.stdout
    assert [p.name for p in made.iterdir()] == [target.name]  # no scratch folder left
    assert (target / ("config.toml" if kind == "experiment" else "pyproject.toml")).is_file()


def test_a_new_experiment_in_a_made_dir_freezes(tmp_path: Path) -> None:
    made = tmp_path / "studies"
    assert run_cli("new", "experiment", "stride", "--dir", str(made)).returncode == 0
    frozen = run_cli("freeze", str(made / "stride"))
    assert frozen.returncode == 0, frozen.stderr


@pytest.mark.parametrize("kind", ["chunker", "experiment"])
def test_new_refuses_a_dir_whose_parent_is_missing(tmp_path: Path, kind: str) -> None:
    """Only one level is made: a mistyped path is said, not built (one line, exit 2)."""
    where = tmp_path / "typo" / "mine"
    result = run_cli("new", kind, "stride", "--dir", str(where))
    assert result.returncode == 2
    [line] = error_lines(result.stderr)
    assert line == (f"fragbench: --dir {where}: no such folder, and its parent {where.parent} "
                    "is no folder either; name a folder, or one to be made in an existing "
                    "folder.")
    assert list(tmp_path.iterdir()) == []
