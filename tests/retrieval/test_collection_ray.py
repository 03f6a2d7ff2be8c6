"""The Ray engine of `retrieve --collection` against the local engine, on a local Ray cluster
this module starts once (2 CPUs, a small object store, no dashboard).

The collection is tie-heavy (tests/retrieval/test_collection.py's `synthetic`: a few words, scores
equal in many chunks), its rows shuffled (a passage's sentences spread over the file) and
written in many row groups, and split into more shards (7) than the cluster has CPUs (2), so
that several shards wait, run in any order and come back in any order. Each setting of a
sweep must give the local engine's table exactly (`.equals`: the same rows in the same order,
the same bits).

A few tests run the command in a process of its own, with a Ray temporary folder of its own
(`RAY_TMPDIR`), where what that process starts, connects to and leaves behind is under test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import attrs
import polars as pl
import pytest
from support.cli import error_lines, process_env, run_cli, run_process
from support.corpora import synthetic

from fragbench.errors import UsageError
from fragbench.plugins import registry
from fragbench.retrieval.collection.engine import chunk_collection, read_inputs
from fragbench.retrieval.collection.ray import (
    SHARDED_MODE,
    _index_bytes,
    _shard_files,
    assign_shards,
    check_work_dir,
    compute_ray,
    environment,
    ray_session,
    same_cluster,
    shard_task,
)
from fragbench.retrieval.collection.sweep import MANIFEST, Sweep

pytestmark = pytest.mark.slow

ray = pytest.importorskip("ray", reason="the dev environment installs ray (fragbench[ray])")

SHARDS = "7"
SETTINGS = ["--chunk-size", "2,3", "--top-k", "1,2"]
PATIENT = {"worker_register_timeout_seconds": 600, "gcs_server_request_timeout_seconds": 600}
"""Ray's start-up bounds a loaded machine can hit (a new worker must register within 60 s,
importing Polars, numba and fragbench; a GCS request within 60 s), raised for the tests to
bounds only a hung cluster reaches. The raylet's 30 s to register is fixed in Ray's code."""


@pytest.fixture(scope="module")
def cluster(failed_start: FailedStart) -> Iterator[str]:
    """A local Ray cluster for the module: its address (the engine, run in this process,
    uses the connection as it is and leaves it open). The process whose own cluster cannot
    start (`failed_start`) is under way first: its 30 s of Ray's waiting run beside this
    module's cluster tests instead of before them."""
    import logging

    # "local": a cluster of the module's own, never one found on this machine (failed_start's
    # runs meanwhile, in a Ray temporary folder of its own)
    context = ray.init(address="local", num_cpus=2, object_store_memory=80 * 2**20,
                       include_dashboard=False, logging_level=logging.ERROR,
                       log_to_driver=False, _system_config=PATIENT)
    try:
        yield context.address_info["address"]
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("ray")
    rows, queries = synthetic(20261202, passages=70)
    sentences = pl.DataFrame(rows, schema=["passage", "position", "lang", "text"],
                             orient="row")
    # ~20 row groups: Ray never reads the input, but the driver numbers its rows (`_row`) in
    # one streaming pass that writes the shard files; that numbering must follow the file's
    # order across row groups, or ties go to the wrong chunk
    sentences.write_parquet(folder / "s.parquet", row_group_size=13)
    chosen = pl.DataFrame(queries[:400], schema=["query", "lang", "text"], orient="row")
    chosen.write_parquet(folder / "q.parquet")
    # restricted: each query to one passage (some to a passage the collection lacks)
    passages = [f"p{i % 75}" for i in range(chosen.height)]
    chosen.with_columns(pl.Series("passage", passages)).write_parquet(folder / "qr.parquet")
    return {"sentences": folder / "s.parquet", "queries": folder / "q.parquet",
            "restricted": folder / "qr.parquet"}


def run(inputs: dict[str, Path], queries: str, out: Path, *args: str) -> None:
    ran = run_cli("retrieve", "--collection", str(inputs["sentences"]), "--queries",
                  str(inputs[queries]), *args, "--out", str(out))
    assert ran.returncode == 0, ran.stderr


def own_ray(temp: Path, **extra: str) -> dict[str, str]:
    """A subprocess's environment with a Ray temporary folder of its own (no cluster of
    another test or session is found there) and Ray's start-up bounds raised (PATIENT)."""
    return process_env({"RAY_TMPDIR": str(temp), **extra,
                        **{f"RAY_{k}": str(v) for k, v in PATIENT.items()}})


def ray_processes(temp: Path) -> list[str]:
    """The command lines of the live raylet and gcs_server processes of the Ray temporary
    folder `temp` (their command lines name its session folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, UnicodeDecodeError):
            continue
        if str(temp) in command and ("raylet" in command or "gcs_server" in command):
            found.append(command)
    return found


def none_left(temp: Path) -> bool:
    """No raylet or gcs_server of `temp` alive. Ray signals them at shutdown without waiting,
    so this polls; a cluster left behind never goes away, so the bound (2 minutes, far above
    the second or so they take to exit) only decides how long a failing test takes."""
    deadline = time.monotonic() + 120
    while ray_processes(temp) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not ray_processes(temp)


LOSE_A_SHARD_FILE = """
import sys
from fragbench.retrieval.collection import ray as collection_ray

written = collection_ray._shard_files

def lose_one(*args):
    # as on a node that cannot read the driver's folder: the file is not where the task looks
    files = written(*args)
    files[0][0].unlink()
    return files

collection_ray._shard_files = lose_one
from fragbench.cli.commands import main

sys.argv[0] = "fragbench"
try:
    main()
finally:  # before Ray's own exit hook, which would stop a cluster left running
    import ray
    print("connected to Ray after the command:", ray.is_initialized(), file=sys.stderr)
"""


@pytest.fixture
def ray_temp() -> Iterator[Path]:
    """A short Ray temporary folder (Ray's socket paths must stay under 108 bytes)."""
    temp = Path(tempfile.mkdtemp(prefix="fbray-", dir="/tmp"))
    try:
        yield temp
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def test_the_command_starts_and_stops_a_cluster_of_its_own_and_cleans_up_after_a_failure(
        inputs: dict[str, Path], tmp_path: Path, ray_temp: Path) -> None:
    """Without --ray-address, a process of its own with no Ray connection starts a local
    cluster for the run, even with RAY_ADDRESS set (here `auto`, which would fail: no cluster
    in this Ray temporary folder), and stops it: the table is the local engine's, --work-dir
    is left empty and no raylet or gcs_server is left. A task that fails (a shard file it
    cannot read, as on a node without the driver's folder) ends the run in one line, exit 4,
    with the same cleanup and nothing written."""
    local, work = tmp_path / "local.parquet", tmp_path / "work"
    work.mkdir()
    run(inputs, "queries", local, "--chunk-size", "2")
    common = ["retrieve", "--collection", str(inputs["sentences"]), "--queries",
              str(inputs["queries"]), "--chunk-size", "2", "--engine", "ray", "--shards", "3",
              "--work-dir", str(work)]
    out = tmp_path / "ray.parquet"
    done = run_process(*common, "--out", str(out), env=own_ray(ray_temp, RAY_ADDRESS="auto"))
    assert done.returncode == 0, done.stderr
    assert pl.read_parquet(out).equals(pl.read_parquet(local))
    assert list(work.iterdir()) == [] and none_left(ray_temp)

    lost = tmp_path / "lost.parquet"
    failed = subprocess.run([sys.executable, "-c", LOSE_A_SHARD_FILE, *common, "--out",
                             str(lost)], env=own_ray(ray_temp), capture_output=True,
                            text=True, check=False)
    assert failed.returncode == 4, failed.stderr
    assert "connected to Ray after the command: False" in failed.stderr
    [line] = error_lines(failed.stderr)
    assert "a Ray task failed: FileNotFoundError:" in line, line
    assert "--work-dir on storage every node reads" in line
    assert "install fragbench (the same versions) on every node" in line
    assert not lost.exists()
    assert list(work.iterdir()) == [] and none_left(ray_temp)


@attrs.frozen
class FailedStart:
    """The command started in a process of its own whose local cluster cannot come up."""

    process: subprocess.Popen[bytes]
    folder: Path
    """The folder the command was to write in: it holds only `site`."""
    out: Path
    ray_temp: Path
    stderr: IO[bytes]

    def ended(self) -> tuple[int, str]:
        """Its exit code and its stderr, once it has ended."""
        code = self.process.wait()
        self.stderr.seek(0)
        return code, self.stderr.read().decode("utf-8", "replace")


AGENT_DIES = """
import os
import sys

# Ray's dashboard agent, which each node's raylet starts and shares its fate with, exits as it
# starts (as when the issue killed it): the raylet dies, and `ray.init` waits for the node
# then raises a bare Exception ("node timed out during startup").
if any(arg.endswith("dashboard/agent.py") for arg in sys.orig_argv):
    os._exit(1)
"""

DRIVER_LIVES_ON = """
import os
import sys
from pathlib import Path

from fragbench.cli.commands import main

sys.argv[0] = "fragbench"
try:
    main()
finally:  # the driver still alive (Ray's reaper stops what is left only at its exit)
    temp = os.environ["RAY_TMPDIR"]
    left = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\\0", b" ").decode()
        except (OSError, UnicodeDecodeError):
            continue
        if temp in command and entry.name != str(os.getpid()):
            left.append(command[:120])
    print(f"ray processes left while the driver lives: {len(left)} {left}", file=sys.stderr)
"""


@pytest.fixture(scope="module")
def failed_start(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[FailedStart]:
    """`retrieve --engine ray` in a process of its own where every start of Ray's dashboard
    agent exits (a `sitecustomize` on its PYTHONPATH), so that its own cluster's node never
    comes up; started when first asked for (by `cluster`, after the tests that need no
    cluster on this machine) and read by the module's last test. Ray gives up on the node
    only after a fixed 30 s, which would otherwise be this module's longest wait. Its stderr
    goes to an unnamed file (a pipe nobody reads could fill up and stall it)."""
    folder = tmp_path_factory.mktemp("failed-start")
    site = folder / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(AGENT_DIES, encoding="utf-8")
    out = folder / "r.parquet"
    temp = Path(tempfile.mkdtemp(prefix="fbray-", dir="/tmp"))  # short: Ray's socket paths
    with tempfile.TemporaryFile() as stderr:
        process = subprocess.Popen(
            [sys.executable, "-c", DRIVER_LIVES_ON, "retrieve", "--collection",
             str(inputs["sentences"]), "--queries", str(inputs["queries"]), "--chunk-size",
             "2", "--engine", "ray", "--out", str(out)],
            env=own_ray(temp, PYTHONPATH=str(site)), stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            yield FailedStart(process, folder, out, temp, stderr)
        finally:
            process.wait()  # ends by itself (Ray's bound), whichever tests ran
            shutil.rmtree(temp, ignore_errors=True)


def test_ray_address_auto_without_a_cluster_is_one_line(inputs: dict[str, Path],
                                                         tmp_path: Path, ray_temp: Path) -> None:
    """In a process with no Ray connection and no cluster to find: fragbench's words, not
    Ray's flags nor the advice for a file error. (These process tests come before the
    module's cluster, and `failed_start`'s, start: `auto` finds any raylet or GCS server
    this machine runs.)"""
    if ray_processes(Path("/")):
        pytest.skip("a Ray cluster of another process runs on this machine; auto would use it")
    out = tmp_path / "r.parquet"
    done = run_process("retrieve", "--collection", str(inputs["sentences"]), "--queries",
                       str(inputs["queries"]), "--engine", "ray", "--ray-address", "auto",
                       "--out", str(out), env=own_ray(ray_temp))
    assert done.returncode == 4, done.stderr
    [line] = error_lines(done.stderr)
    assert line.startswith("fragbench: --ray-address auto: no running Ray cluster was found")
    assert "--address" not in line and "writable" not in line
    assert not out.exists() and os.listdir(tmp_path) == []

def test_a_sweep_on_ray_equals_the_local_engine(cluster: str, inputs: dict[str, Path],
                                                tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    assert pq.ParquetFile(inputs["sentences"]).num_row_groups > 10
    run(inputs, "queries", tmp_path / "local", *SETTINGS)
    run(inputs, "queries", tmp_path / "ray", *SETTINGS, "--engine", "ray", "--shards", SHARDS,
        "--ray-address", cluster)
    # this process's connection (the fixture's cluster) is used and left as it was
    assert ray.is_initialized() and ray.get_runtime_context().gcs_address == cluster
    local = json.loads((tmp_path / "local" / MANIFEST).read_text(encoding="utf-8"))
    remote = json.loads((tmp_path / "ray" / MANIFEST).read_text(encoding="utf-8"))
    assert (local["engine"], remote["engine"]) == ("local", "ray")
    assert local["settings"] == remote["settings"] and len(local["settings"]) == 4
    ties = 0
    for setting in local["settings"]:
        want = pl.read_parquet(tmp_path / "local" / setting["file"])
        got = pl.read_parquet(tmp_path / "ray" / setting["file"])
        assert got.equals(want), setting
        assert want.height == 400 * setting["top_k"]
        ties += int(want["tied"].sum())
    assert ties > 400  # the tie rule decides many rows


def test_restricted_queries_on_ray_equal_the_local_engine(cluster: str,
                                                          inputs: dict[str, Path],
                                                          tmp_path: Path) -> None:
    """Each query meets only its own passage's chunks, on whichever shard holds it; a query
    of a passage the collection lacks has no row, on both engines. Without --ray-address the
    engine uses this process's connection."""
    for size, k in (("2", "2"), ("3", "1")):
        local, remote = tmp_path / f"l{size}.parquet", tmp_path / f"r{size}.parquet"
        run(inputs, "restricted", local, "--chunk-size", size, "--top-k", k)
        run(inputs, "restricted", remote, "--chunk-size", size, "--top-k", k, "--engine",
            "ray", "--shards", SHARDS)
        want = pl.read_parquet(local)
        assert pl.read_parquet(remote).equals(want)
        assert 0 < want["query"].n_unique() < 400  # some queries name a missing passage
        asked = pl.read_parquet(inputs["restricted"]).select("query", "passage")
        assert want.join(asked, on="query", suffix="_asked").filter(
            pl.col("passage") != pl.col("passage_asked")).height == 0


def test_another_process_connects_to_a_running_cluster_and_leaves_it_running(
        cluster: str, inputs: dict[str, Path], tmp_path: Path) -> None:
    """`--ray-address` from a process of its own (what it connects to, and what it leaves
    running, is under test): its tasks run on the fixture's cluster, its table is the local
    engine's, and the cluster still answers after the command ends."""
    local, remote = tmp_path / "local.parquet", tmp_path / "ray.parquet"
    run(inputs, "queries", local, "--chunk-size", "2", "--top-k", "2")
    done = run_process("retrieve", "--collection", str(inputs["sentences"]), "--queries",
                       str(inputs["queries"]), "--chunk-size", "2", "--top-k", "2", "--engine",
                       "ray", "--shards", SHARDS, "--ray-address", cluster, "--out",
                       str(remote))
    assert done.returncode == 0, done.stderr
    assert f"of the cluster at {cluster};" in done.stdout
    assert pl.read_parquet(remote).equals(pl.read_parquet(local))
    assert ray.get(ray.put("still running")) == "still running"
    assert ray.cluster_resources().get("CPU") == 2


def test_each_shard_index_fits_a_memory_the_whole_index_exceeds(
        cluster: str, inputs: dict[str, Path], tmp_path: Path) -> None:
    """--shard-memory is Ray's `memory` resource for each task (scheduling) and a measured
    bound: with a bound one byte below one index of the whole collection, every shard's
    index is at most it and the run completes; a bound below the largest shard's index
    refuses the run, nothing written. (Two runs of the cluster's tasks, not three: the
    bound `whole - 1` is between the largest shard's index and the whole one as soon as the
    largest is smaller than the whole, which the first assert shows.)"""
    sentences_lf, query_frame = read_inputs(inputs["sentences"], inputs["queries"])
    scorer = registry().get("scorer", "sqrt-lexical")
    sweep = Sweep((2,), (1,), ("sqrt-lexical",))
    whole = _index_bytes(scorer.collection_index(
        chunk_collection(sentences_lf, 2).select("chunk_id", "lang", "text")))
    limit = whole - 1
    _, bounded = compute_ray(sentences_lf, query_frame, sweep, {"sqrt-lexical": scorer},
                             shards=7, shard_memory=limit)
    largest = bounded.largest_index()
    assert bounded.shards == 7 and len(bounded.tasks) == 7
    assert 0 < largest <= limit < whole
    assert all(t["index_bytes"]["sqrt-lexical"] <= limit < whole for t in bounded.tasks)
    assert sum(t["sentences"] for t in bounded.tasks) == sentences_lf.collect().height

    out = tmp_path / "r.parquet"
    ran = run_cli("retrieve", "--collection", str(inputs["sentences"]), "--queries",
                  str(inputs["queries"]), "--chunk-size", "2", "--engine", "ray", "--shards",
                  SHARDS, "--shard-memory", str(largest - 1), "--out", str(out))
    assert ran.returncode == 2
    [line] = error_lines(ran.stderr)
    assert f"--shard-memory {largest - 1}" in line and "more --shards" in line
    assert not out.exists()


def test_shard_files_without_polars_partitioned_sink(inputs: dict[str, Path], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Where Polars lacks its (unstable) partitioned sink, a streaming pass per shard writes
    the same shards: each shard the same rows (input row index included), so its task meets
    the same input (the tasks themselves are the sweep test's). Checked on the files, without
    running a cluster's tasks."""
    from fragbench.retrieval.collection.ray import _shard_files

    sentences_lf, _ = read_inputs(inputs["sentences"], inputs["queries"])
    for folder in ("sink", "passes"):  # the engine's work folder exists before it writes
        (tmp_path / folder).mkdir()
    sunk = _shard_files(sentences_lf, 5, tmp_path / "sink")
    monkeypatch.delattr(pl, "PartitionBy", raising=False)
    passes = _shard_files(sentences_lf, 5, tmp_path / "passes")
    assert len(sunk) == len(passes) == 5

    def rows(files: list[Path]) -> pl.DataFrame:
        return pl.read_parquet(files).sort("_row")

    for one, other in zip(sunk, passes, strict=True):
        assert rows(one).equals(rows(other))
    assert sum(rows(f).height for f in passes) == sentences_lf.collect().height


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port on 127.0.0.1 where nothing answers: bound by the test (so no other process,
    a Ray one included, can take it meanwhile) and not listening, until the test ends."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


@pytest.mark.parametrize(("args", "code", "words"), [
    (["--ray-address", "not an address"], 2, ["--ray-address 'not an address'", "HOST:PORT"]),
    (["--ray-address", "127.0.0.1:{port}"], 4, ["nothing answers there", "ray start --head"]),
    (["--shard-memory", "lots"], 2, ["--shard-memory 'lots'", "2GiB"]),
    (["--shard-memory", "1TiB"], 2, ["no node of the Ray cluster", "1099511627776"]),
])
def test_bad_ray_options_are_one_line_and_write_nothing(
        cluster: str, inputs: dict[str, Path], tmp_path: Path, args: list[str], code: int,
        words: list[str], closed_port: int) -> None:
    args = [a.format(port=closed_port) for a in args]
    out = tmp_path / "r.parquet"
    ran = run_cli("retrieve", "--collection", str(inputs["sentences"]), "--queries",
                  str(inputs["queries"]), "--engine", "ray", *args, "--out", str(out))
    assert ran.returncode == code, ran.stderr
    [line] = error_lines(ran.stderr)
    for word in words:
        assert word in line, line
    assert list(tmp_path.iterdir()) == []


def test_a_scorer_that_does_not_declare_it_can_be_sharded_is_refused(
        cluster: str, inputs: dict[str, Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    scorer = registry().get("scorer", "sqrt-lexical")
    monkeypatch.setattr(scorer, "modes", tuple(m for m in scorer.modes if m != SHARDED_MODE))
    out = tmp_path / "r.parquet"
    ran = run_cli("retrieve", "--collection", str(inputs["sentences"]), "--queries",
                  str(inputs["queries"]), "--engine", "ray", "--out", str(out))
    assert ran.returncode == 2
    [line] = error_lines(ran.stderr)
    assert "scorer 'sqrt-lexical' (built-in)" in line and "'sharded'" in line
    assert "--engine local" in line
    assert not out.exists()


def test_a_worker_with_another_environment_than_the_driver_is_refused(
        cluster: str, inputs: dict[str, Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On a cluster, a node with other versions would give other scores: the driver sends what
    it runs (here, as if it ran another fragbench), every task compares its own, and the run is
    refused in one line, nothing written."""
    from fragbench.retrieval.collection import ray as collection_ray

    real = collection_ray.environment
    monkeypatch.setattr(collection_ray, "environment",
                        lambda names: {**real(names), "fragbench": "0.0.0-elsewhere"})
    out = tmp_path / "r.parquet"
    ran = run_cli("retrieve", "--collection", str(inputs["sentences"]), "--queries",
                  str(inputs["queries"]), "--engine", "ray", "--shards", "2", "--out", str(out))
    assert ran.returncode == 4, ran.stderr
    [line] = error_lines(ran.stderr)
    assert "another Python environment than the driver" in line
    assert "0.0.0-elsewhere on the driver" in line and "same versions on every node" in line
    assert not out.exists()


def test_without_ray_the_engine_says_how_to_install_it(inputs: dict[str, Path],
                                                      tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray absent: `import ray` fails as it does when the package is not installed (a None in
    sys.modules is how Python marks a module that cannot be imported)."""
    monkeypatch.setitem(sys.modules, "ray", None)
    out = tmp_path / "r.parquet"
    ran = run_cli("retrieve", "--collection", str(inputs["sentences"]), "--queries",
                  str(inputs["queries"]), "--engine", "ray", "--out", str(out))
    assert ran.returncode == 2
    [line] = error_lines(ran.stderr)
    assert "pip install 'fragbench[ray]'" in line
    assert list(tmp_path.iterdir()) == []


def test_shards_are_contiguous_runs_of_about_equal_sentences_past_32_bits() -> None:
    """5,000 passages of 1,000 sentences into 1,000 shards (the review's shape, as the
    passages' table the driver builds: Polars counts are UInt32): start x shards passes 2**32,
    and the shards must still be 1,000 runs of five passages each, in collection order."""
    passages = pl.DataFrame({"passage": [f"p{i}" for i in range(5000)],
                             "n": pl.Series([1000] * 5000, dtype=pl.UInt32)})
    shards = assign_shards(passages, 1000)["shard"]
    assert shards.to_list() == [i // 5 for i in range(5000)]


def test_a_cluster_of_several_nodes_needs_a_work_dir(tmp_path: Path) -> None:
    """The shard files go to the driver's temporary folder without --work-dir: one line on a
    cluster of more than one alive node (a dead node's entry does not count)."""
    one, dead = {"Alive": True}, {"Alive": False}
    check_work_dir([one, dead], None)
    check_work_dir([one, one], tmp_path)
    with pytest.raises(UsageError, match="the Ray cluster has 2 nodes: give --work-dir"):
        check_work_dir([one, dead, one], None)


def test_an_address_naming_the_connected_cluster_otherwise_is_accepted(cluster: str) -> None:
    """`localhost:PORT` is the cluster at this machine's `IP:PORT` (Ray names its GCS by the
    node's IP); another port is refused, naming what is connected and what was asked."""
    _, port = cluster.rsplit(":", 1)
    assert same_cluster(f"localhost:{port}", f"127.0.0.1:{port}")
    assert not same_cluster(f"localhost:{port}", f"192.0.2.77:{port}", "192.0.2.1")
    with ray_session(f"localhost:{port}") as connected:
        assert connected.get_runtime_context().gcs_address == cluster
    other = f"localhost:{int(port) % 65535 + 1}"
    with pytest.raises(UsageError) as refused, ray_session(other):
        pass
    assert f"--ray-address {other}:" in str(refused.value) and cluster in str(refused.value)


def test_a_shard_task_stops_as_soon_as_its_index_exceeds_shard_memory(
        inputs: dict[str, Path], tmp_path: Path) -> None:
    """The bound is enforced in the task itself, as the index is built (not by the driver
    after every task has ended); the task is called here as a Ray worker calls it."""
    sentences_lf, query_frame = read_inputs(inputs["sentences"], inputs["queries"])
    [paths] = _shard_files(sentences_lf, 1, tmp_path / "shards")
    args = ([str(p) for p in paths], 0, 2, ["sqrt-lexical"], 1, query_frame,
            environment(["sqrt-lexical"]))
    built = shard_task(*args)["index_bytes"]["sqrt-lexical"]
    with pytest.raises(UsageError, match=f"--shard-memory {built - 1}: shard 0's index took "
                                         f"{built} bytes at chunk size 2"):
        shard_task(*args, built - 1)
    assert shard_task(*args, built)["index_bytes"]["sqrt-lexical"] == built


@pytest.mark.parametrize(("text", "size"), [
    ("2GiB", 2 * 2**30), ("500MB", 500 * 10**6), ("1.5GiB", 3 * 2**29), ("0.3MiB", 314572),
    ("9007199254740993", 9007199254740993), (" 64 kib ", 65536), ("7B", 7),
])
def test_shard_memory_sizes_are_exact_bytes(text: str, size: int) -> None:
    from fragbench.retrieval.collection.ray import parse_bytes

    assert parse_bytes(text) == size


@pytest.mark.parametrize("text", ["1.5", "1.5B", "0", "0.1KBx", "lots", "-1GiB", "0.0001B",
                                  "9" * 5000, "1." + "0" * 40 + "GiB"])
def test_shard_memory_that_is_not_a_whole_byte_count_is_one_line(text: str) -> None:
    from fragbench.retrieval.collection.ray import parse_bytes

    shown = text if len(text) <= 40 else text[:40] + "..."  # a long value, cut in the line
    with pytest.raises(UsageError, match=rf"--shard-memory {re.escape(repr(shown))}: give a "
                       "size such as 2GiB"):
        parse_bytes(text)


def test_a_local_cluster_that_fails_to_start_is_one_line_and_stopped(
        failed_start: FailedStart) -> None:
    """Issue 24, item 8: any failure to start the run's own cluster is one line (Ray's cause
    in it), exit 4, nothing written, and what the attempt had started (GCS server, dashboard,
    monitors) stopped at once, by the driver, not only by Ray's reaper at its exit. The fault
    is real: every start of Ray's dashboard agent exits, so the node never comes up (Ray then
    waits its fixed 30 s for the raylet). The process is `failed_start`'s, started before
    the module's cluster tests; this test, the module's last, reads what it did."""
    code, stderr = failed_start.ended()
    assert code == 4, stderr
    [line] = error_lines(stderr)
    assert line.startswith("fragbench: the local Ray cluster could not be started (Exception: "
                           "The current node timed out during startup."), line
    assert "nothing was written" in line
    assert "ray processes left while the driver lives: 0 []" in stderr, stderr
    assert not failed_start.out.exists() and os.listdir(failed_start.folder) == ["site"]
    assert none_left(failed_start.ray_temp)
