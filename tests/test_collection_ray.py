"""The Ray engine of `retrieve --collection` against the local engine, on a local Ray cluster
this module starts once (2 CPUs, a small object store, no dashboard).

The collection is tie-heavy (tests/test_collection.py's `synthetic`: a few words, scores
equal in many chunks), its rows shuffled (a passage's sentences spread over the file) and
written in many row groups, and split into more shards (7) than the cluster has CPUs (2), so
that several shards wait, run in any order and come back in any order. Each setting of a
sweep must give the local engine's table exactly (`.equals`: the same rows in the same order,
the same bits).
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from conftest import error_lines, run_cli, run_process
from test_collection import synthetic

from fragbench.collection import chunk_collection, read_inputs
from fragbench.collection_ray import SHARDED_MODE, _index_bytes, compute_ray
from fragbench.collection_sweep import MANIFEST, Sweep
from fragbench.plugins import registry

ray = pytest.importorskip("ray", reason="the dev environment installs ray (fragbench[ray])")

SHARDS = "7"
SETTINGS = ["--chunk-size", "2,3", "--top-k", "1,2"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A local Ray cluster for the module: its address (the engine, run in this process,
    uses the connection as it is and leaves it open)."""
    import logging

    context = ray.init(num_cpus=2, object_store_memory=80 * 2**20, include_dashboard=False,
                       logging_level=logging.ERROR, log_to_driver=False)
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
    sentences.write_parquet(folder / "s.parquet", row_group_size=13)  # ~20 row groups
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
    bound: every shard's index is at most it while one index of the whole collection is
    above it; a bound below the largest shard's index refuses the run, nothing written."""
    sentences_lf, query_frame = read_inputs(inputs["sentences"], inputs["queries"])
    scorer = registry().get("scorer", "sqrt-lexical")
    sweep = Sweep((2,), (1,), ("sqrt-lexical",))
    whole = _index_bytes(scorer.collection_index(
        chunk_collection(sentences_lf, 2).select("chunk_id", "lang", "text")))
    _, report = compute_ray(sentences_lf, query_frame, sweep, {"sqrt-lexical": scorer},
                            shards=7)
    largest = report.largest_index()
    assert report.shards == 7 and len(report.tasks) == 7
    assert 0 < largest < whole  # a limit between the two exists
    limit = (largest + whole) // 2

    _, bounded = compute_ray(sentences_lf, query_frame, sweep, {"sqrt-lexical": scorer},
                             shards=7, shard_memory=limit)
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


def test_shard_files_without_polars_partitioned_sink(cluster: str, inputs: dict[str, Path],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Where Polars lacks its (unstable) partitioned sink, a streaming pass per shard writes
    the same shards: the same tables as the local engine."""
    from fragbench.collection_sweep import compute_local

    sentences_lf, query_frame = read_inputs(inputs["sentences"], inputs["queries"])
    scorers = {"sqrt-lexical": registry().get("scorer", "sqrt-lexical")}
    sweep = Sweep((3,), (2,), ("sqrt-lexical",))
    want = compute_local(sentences_lf, query_frame, sweep, scorers)
    monkeypatch.delattr(pl, "PartitionBy", raising=False)
    got, report = compute_ray(sentences_lf, query_frame, sweep, scorers, shards=5)
    assert report.shards == 5
    assert got[(3, 2, "sqrt-lexical")].equals(want[(3, 2, "sqrt-lexical")])


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(("args", "code", "words"), [
    (["--ray-address", "not an address"], 2, ["--ray-address 'not an address'", "HOST:PORT"]),
    (["--ray-address", "127.0.0.1:{port}"], 4, ["nothing answers there", "ray start --head"]),
    (["--shard-memory", "lots"], 2, ["--shard-memory 'lots'", "2GiB"]),
    (["--shard-memory", "1TiB"], 2, ["no node of the Ray cluster", "1099511627776"]),
])
def test_bad_ray_options_are_one_line_and_write_nothing(
        cluster: str, inputs: dict[str, Path], tmp_path: Path, args: list[str], code: int,
        words: list[str]) -> None:
    args = [a.format(port=closed_port()) for a in args]
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
    from fragbench import collection_ray

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
