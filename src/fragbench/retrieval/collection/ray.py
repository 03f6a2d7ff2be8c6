"""The Ray engine of `retrieve --collection`: the collection split into shards of whole
passages, a Ray task per (shard, chunk size) that chunks, indexes and scores its shard, and the
driver's exact merge. The result equals the local engine's, row for row and bit for bit.

How a run goes (docs/scale.md says what each step costs):

1. The driver numbers the input's rows (`_row`, the collection order) in one Polars pass,
   before anything is split or read by Ray, and assigns each passage to a shard by a
   vectorised rule: passages in collection order, cut into `shards` runs of about equal
   sentence counts. It writes the sentences with `_row` as Parquet files per shard into a
   work folder (Polars' partitioned sink: one streaming pass, the driver holding the
   passages' table, not the sentences): the only copy of the collection the workers read.
2. The queries are put in Ray's object store once (`ray.put`) and every task gets that one
   reference.
3. A task per (shard, chunk size): reads its shard's file, restores the input order from
   `_row` (a file's row order is not trusted), chunks it once and per scorer builds the
   shard's index as the local engine does a whole collection (`local_chunks`, `local_tops`),
   maps each chunk's `first` to the input's row index, and returns only the shard's tops at
   the sweep's largest top-k (at most k rows per query, TOPS_SCHEMA) with the index's size in
   bytes. With restricted queries (a `passage` column) a shard scores only the queries of its
   own passages.
4. The driver merges (`merge_tops`) each (chunk size, scorer)'s tops once per top-k.

A scorer runs on shards only if its modes list `sharded`: it declares that a chunk's score
depends on the chunk and the query alone (no collection-wide statistic such as an IDF, which
a shard's index would compute from that shard alone). The built-in `sqrt-lexical` does.

Memory: `shard_memory` (bytes) is given to Ray as each task's `memory` resource, which Ray
uses only to schedule (it starts no more tasks on a node than its memory resource allows; it
does not cap a process). It is also checked, as index memory per shard: a task measures each
index as soon as it is built and stops there, before scoring, when it exceeds `shard_memory`;
the driver then cancels the other tasks and refuses the run (more shards make smaller
indexes), with nothing written. What is measured is the index alone, not the shard's frame.

Ray: without an address a local Ray cluster is started for the run and stopped after it,
whatever `RAY_ADDRESS` says; with one (`host:port`, `ray://host:port` or `auto`) the driver
connects to that cluster, and only disconnects at the end. A process already connected to Ray
(a notebook, the tests) is used as it is and left connected. A cluster that cannot be started
or reached is one line with Ray's cause (exit 4), what the attempt started stopped (`_init`).
On a cluster of more than one node, `work_dir` must be given (the workers read the shard files
by path); a task that fails with anything but a fragbench error (a shard file it cannot read,
a node without fragbench) is one line with its cause and that hint, exit 4.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fragbench.errors import FragbenchError, UsageError, first_line

SHARDED_MODE = "sharded"
"""The mode a scorer lists to say that a chunk's score depends on the chunk and the query
alone, so that an index per shard gives the same scores as one index of the collection."""
RAY_MISSING = ("the Ray engine needs Ray, which is not installed: pip install "
               "'fragbench[ray]' (or use --engine local).")
ROW_GROUP = 65_536
"""Rows per row group of a shard file."""
CONNECT_SECONDS = 10.0
"""How long the driver waits for a TCP answer from --ray-address before refusing it (Ray
itself retries an unreachable address for minutes, silently)."""


@dataclass
class RayReport:
    """What a Ray run did, for the user and for checks: per task, the shard's sentences,
    chunks and index bytes per scorer; the time of each phase (seconds)."""

    shards: int = 0
    cluster_cpus: float = 0.0
    address: str = ""
    """The cluster's address (its GCS), whether started for the run or connected to."""
    tasks: list[dict[str, Any]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    def largest_index(self) -> int:
        return max((b for t in self.tasks for b in t["index_bytes"].values()), default=0)


def import_ray() -> Any:
    """Ray, or the one line that says how to install it (exit 2)."""
    try:
        import ray
    except ImportError:
        raise UsageError(RAY_MISSING) from None
    return ray


def check_scorers(scorers: dict[str, Any]) -> None:
    """Refuse, in one line, a scorer that does not declare it can be sharded."""
    from fragbench.plugins import describe

    for scorer in scorers.values():
        if SHARDED_MODE not in getattr(scorer, "modes", ()):
            raise UsageError(f"{describe('scorer', scorer)} does not list the mode "
                             f"{SHARDED_MODE!r} (a chunk's score depends on the chunk and the "
                             "query alone), so it cannot be split into shards; use --engine "
                             "local.")


def check_address(address: str) -> None:
    """Refuse a malformed --ray-address (exit 2) or one where nothing answers (exit 4), in
    one line, before Ray is asked (Ray would retry for minutes)."""
    if address == "auto":
        return
    match = re.fullmatch(r"(?:ray://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):([0-9]{1,5})",
                         address)
    if not match or not 1 <= int(match.group(2)) <= 65535:
        raise UsageError(f"--ray-address {address!r}: give HOST:PORT of a Ray cluster's head "
                         "(e.g. 10.0.0.5:6379), ray://HOST:PORT for Ray Client, or auto.")
    host, port = match.group(1).strip("[]"), int(match.group(2))
    try:
        with socket.create_connection((host, port), timeout=CONNECT_SECONDS):
            pass
    except OSError as exc:
        raise FragbenchError(f"--ray-address {address}: nothing answers there "
                             f"({exc.strerror or exc}); start the cluster's head with "
                             "`ray start --head` or correct the address.") from None


def _endpoints(address: str) -> set[tuple[str, int]]:
    """The (IP, port) pairs `host:port` (or `ray://host:port`) resolves to; none if it is not
    that form or does not resolve."""
    match = re.fullmatch(r"(?:ray://)?\[?([^\]]+?)\]?:([0-9]{1,5})", address)
    if not match:
        return set()
    try:
        found = socket.getaddrinfo(match.group(1), int(match.group(2)),
                                   type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return set()
    return {(str(info[4][0]), int(info[4][1])) for info in found}


def same_cluster(asked: str, current: str, node_ip: str = "") -> bool:
    """Whether `--ray-address asked` names the cluster at `current` (its GCS address): equal
    as text, or the same port at a common IP, or the same port on this machine (`node_ip`,
    loopback or this host's name: `localhost:6379` is the GCS at `10.0.0.5:6379` when that is
    this machine's address)."""
    if asked == current:
        return True
    mine, theirs = _endpoints(asked), _endpoints(current)
    if mine & theirs:
        return True
    here = {node_ip} | {ip for ip, _ in _endpoints(f"{socket.gethostname()}:1")}

    def local(ip: str) -> bool:
        return ip in here or ip == "::1" or ip.startswith("127.")

    return any(port == other and local(ip) and local(current_ip)
               for ip, port in mine for current_ip, other in theirs)


@contextlib.contextmanager
def ray_session(address: str | None) -> Iterator[Any]:
    """Ray, connected for the run: to `address`, or to a local cluster started now and
    stopped after (never the cluster `RAY_ADDRESS` names: no address means a cluster of the
    run's own); a process already connected is used and left as it is."""
    ray = import_ray()
    if ray.is_initialized():
        current = ray.get_runtime_context().gcs_address
        if address not in (None, "auto") and not same_cluster(
                address, current, ray.util.get_node_ip_address()):
            raise UsageError(f"--ray-address {address}: this process is already connected to "
                             f"the Ray cluster at {current} (a Ray Client address is compared "
                             "as given); give that address or none.")
        yield ray
        return
    _init(ray, address)
    try:
        yield ray
    finally:
        ray.shutdown()  # stops a cluster started here; from another one it only disconnects


def _init(ray: Any, address: str | None) -> None:
    """`ray.init`, or one line (exit 4) when the cluster cannot be started or reached, with
    whatever the attempt started stopped first. Ray raises a bare Exception when the local
    node does not come up ("node timed out during startup": its raylet died, say with its
    dashboard agent), and leaves the GCS server, dashboard and monitors it had started
    running until this process exits: they are this process's children, so the ones born
    during the attempt are stopped here (a notebook carries on without them)."""
    quiet = {"logging_level": logging.ERROR, "log_to_driver": False}
    before = _children()
    try:
        if address is None:  # "local": with no address, Ray would join RAY_ADDRESS's cluster
            ray.init(address="local", include_dashboard=False, **quiet)
        else:
            ray.init(address=address, **quiet)
    except BaseException as exc:
        with contextlib.suppress(Exception):
            ray.shutdown()  # what Ray recorded of the attempt, if anything
        started = _children() - before
        # The GCS server last: Ray's autoscaler monitor, told to stop, first reports its end
        # to the GCS server, and with that gone waits on it until SIGKILL (`_stop`'s 30 s).
        gcs = {pid for pid in started if b"gcs_server" in _command(pid)}
        _stop(started - gcs)
        _stop(gcs)
        if not isinstance(exc, Exception) or isinstance(exc, FragbenchError):
            raise  # Ctrl-C and fragbench's own errors go on as they are
        if address is not None and isinstance(exc, ConnectionError):
            # Ray's own message names its flags (and the CLI would add an OSError's advice);
            # `auto` with no cluster on this machine ends here (a HOST:PORT was checked)
            raise FragbenchError(f"--ray-address {address}: no running Ray cluster was "
                                 "found; start the cluster's head on this machine, or give "
                                 "its HOST:PORT.") from None
        cause = f"{type(exc).__name__}: {' '.join(first_line(exc, 'no message').split())}"
        if address is None:
            raise FragbenchError(f"the local Ray cluster could not be started ({cause[:300]}); "
                                 "what had started is stopped and nothing was written: see "
                                 "Ray's logs in its temporary folder (RAY_TMPDIR, /tmp/ray by "
                                 "default), or start a cluster and give --ray-address.") \
                from None
        raise FragbenchError(f"--ray-address {address}: the Ray cluster could not be reached "
                             f"({cause[:300]}); nothing was written: check that the cluster "
                             "is up and runs this Ray version.") from None


def _command(pid: int) -> bytes:
    """The command line of process `pid` (empty once it has gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _children() -> set[int]:
    """This process's child processes (Linux's /proc; none known elsewhere, where only
    Ray's reaper stops what a failed start left, at this process's exit)."""
    me, found = str(os.getpid()), set()
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text(encoding="ascii", errors="replace").rpartition(")")[2]
        except OSError:  # gone meanwhile
            continue
        parts = fields.split()  # state, parent pid, ...: an ended child too, to be reaped
        if len(parts) > 1 and parts[1] == me:
            found.add(int(entry.parent.name))
    return found


def _stop(pids: set[int], patience: float = 30.0) -> None:
    """SIGTERM the processes `pids` (this process's children) and reap them; SIGKILL the ones
    still alive after `patience` seconds, and give up on any left after as long again (one
    stuck in the kernel: Ray's reaper still stops it at this process's exit)."""
    left = set(pids)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + patience
        while left and time.monotonic() < deadline:
            left = {pid for pid in left if not _reaped(pid)}
            if left:
                time.sleep(0.05)
        if not left:
            return


def _reaped(pid: int) -> bool:
    """Whether the child `pid` has ended (reaped now, or by its owner, Ray's Popen)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done != 0


def check_work_dir(nodes: list[dict[str, Any]], work_dir: Path | None) -> None:
    """Refuse, in one line, a cluster of more than one alive node without `--work-dir`: the
    shard files would be in the driver's temporary folder, which the other nodes cannot
    read."""
    alive = sum(1 for n in nodes if n.get("Alive"))
    if alive > 1 and work_dir is None:
        raise UsageError(f"the Ray cluster has {alive} nodes: give --work-dir, a folder every "
                         "node reads at the same path (the workers read the shard files "
                         "there).")


def assign_shards(passages: Any, shards: int) -> Any:
    """Each passage's shard (Int32, numbered from 0), given the passages in collection order
    with their sentence counts (`n`): `shards` runs (fewer if there are fewer passages) of
    about equal sentence counts, contiguous in collection order. Columns: passage, shard."""
    import polars as pl

    sizes = pl.col("n").cast(pl.Int64)  # Polars counts are UInt32: start * count overflows
    total = int(passages["n"].cast(pl.Int64).sum())
    count = max(1, min(shards, passages.height))
    start = sizes.cum_sum() - sizes
    return passages.select(
        "passage", (((start * count) // total).rank("dense").cast(pl.Int32) - 1).alias("shard"))


def _largest_node_memory(ray: Any) -> float:
    return max((n["Resources"].get("memory", 0.0) for n in ray.nodes() if n.get("Alive")),
               default=0.0)


def _shard_files(sentences_lf: Any, shards: int, folder: Path) -> list[list[Path]]:
    """The sentences with their input row (`_row`), written as Parquet files of whole-passage
    shards: per shard, its files. One streaming pass over the input (Polars' partitioned
    sink), so the driver holds the passages' table, not the sentences."""
    import polars as pl

    rows = sentences_lf.select("passage", "position", "lang", "text").with_row_index("_row")
    passages = (rows.group_by("passage").agg(pl.col("_row").min().alias("first"),
                                             pl.len().alias("n"))
                .sort("first").collect())
    if passages.height == 0:
        return []
    passages = assign_shards(passages, shards)
    assigned = rows.join(passages.lazy(), on="passage", maintain_order="left")
    numbers = passages["shard"].unique().sort().to_list()
    if hasattr(pl, "PartitionBy"):  # one pass (Polars marks this sink unstable)
        assigned.sink_parquet(pl.PartitionBy(folder, key="shard", include_key=False,
                                             approximate_bytes_per_file=None),
                              row_group_size=ROW_GROUP, mkdir=True)
        return [sorted(folder.glob(f"shard={n}/*.parquet")) for n in numbers]
    files = []
    for n in numbers:  # a pass per shard, each streaming
        path = folder / f"shard-{n:05d}.parquet"
        assigned.filter(pl.col("shard") == n).drop("shard").sink_parquet(
            path, row_group_size=ROW_GROUP)
        files.append([path])
    return files


def _index_bytes(index: Any) -> int:
    """The bytes an index holds in arrays, sparse matrices and frames (its attributes and
    their items, two levels down): what a worker keeps in memory for its shard."""
    seen: set[int] = set()

    def size(obj: Any, depth: int) -> int:
        if id(obj) in seen or depth > 2:
            return 0
        seen.add(id(obj))
        nbytes = getattr(obj, "nbytes", None)
        if isinstance(nbytes, int) and not hasattr(obj, "indptr"):
            return nbytes
        if hasattr(obj, "estimated_size"):
            return int(obj.estimated_size())
        if hasattr(obj, "indptr"):  # scipy sparse
            return sum(size(getattr(obj, a), depth) for a in ("data", "indices", "indptr"))
        if isinstance(obj, list | tuple):
            return sum(size(item, depth + 1) for item in obj)
        if isinstance(obj, dict):
            return sum(size(item, depth + 1) for item in obj.values())
        if hasattr(obj, "__dict__"):
            return sum(size(item, depth + 1) for item in vars(obj).values())
        return 0

    return size(index, 0)


def environment(scorer_names: list[str]) -> dict[str, str]:
    """What a shard's scores depend on besides its data: the versions of fragbench and of the
    libraries that compute them, and each scorer as the plugin registry describes it (its
    distribution and version)."""
    import numba
    import numpy
    import polars

    from fragbench import __version__
    from fragbench.plugins import describe, registry

    found = {"fragbench": __version__, "polars": polars.__version__,
             "numpy": numpy.__version__, "numba": numba.__version__}
    for name in scorer_names:
        found[f"scorer {name}"] = describe("scorer", registry().get("scorer", name))
    return found


def _same_environment(expected: dict[str, str], scorer_names: list[str]) -> None:
    """Refuse, in one line, to compute a shard in a worker whose environment differs from the
    driver's (on a cluster, a node with other versions would give other scores)."""
    mine = environment(scorer_names)
    differ = [f"{k} {mine.get(k)} here, {v} on the driver" for k, v in expected.items()
              if mine.get(k) != v]
    if differ:
        raise FragbenchError(f"a Ray worker on {socket.gethostname()} has another Python "
                             f"environment than the driver ({'; '.join(differ)}); install the "
                             "same versions on every node (docs/scale.md).")


def shard_task(paths: list[str], shard: int, chunk_size: int, scorer_names: list[str],
               top_k: int, queries: Any, expected: dict[str, str],
               shard_memory: int | None = None) -> dict[str, Any]:
    """One shard at one chunk size, in a Ray worker: chunked once, then per scorer its index,
    its tops at `top_k` (TOPS_SCHEMA, `query` the row of the whole query frame) and the
    index's bytes; refused first if the worker's environment is not the driver's
    (`expected`), and stopped (UsageError) as soon as an index it builds takes more than
    `shard_memory` bytes, before that index is used.

    The shard is chunked and indexed as the local engine does a whole collection
    (`local_chunks`, `local_tops`: the sentences indexed without joining the chunks' text when
    the scorers can), on the shard's rows in input order; each chunk's `first` is then the
    input's row index of its passage's first sentence, and `shard` this shard's number, which
    is all the merge needs to order and count across shards."""
    import polars as pl

    from fragbench.plugins import registry
    from fragbench.retrieval.collection.engine import local_chunks, local_tops

    began = time.perf_counter()
    _same_environment(expected, scorer_names)
    frame = pl.scan_parquet(paths).collect().sort("_row")  # input order, whatever the files'
    input_rows = frame["_row"].to_numpy()
    sentences = frame.drop("_row").lazy()
    scorers = [registry().get("scorer", name) for name in scorer_names]
    chunks, chunk_of_row = local_chunks(sentences, chunk_size, scorers)
    # `first` as numbered in this shard -> the input's row index, so that (first, chunk)
    # orders chunks across shards as in the whole collection.
    chunks = chunks.with_columns(pl.Series("first", input_rows[chunks["first"].to_numpy()],
                                           dtype=pl.Int64))
    chosen, rows = queries, None
    if "passage" in queries.columns:  # restricted: only the queries of this shard's passages
        mine = queries.with_row_index("_q").filter(
            pl.col("passage").is_in(chunks["passage"].unique().implode()))
        chosen, rows = mine.drop("_q"), mine["_q"]
    tops: dict[str, Any] = {}
    sizes: dict[str, int] = {}
    for name, scorer in zip(scorer_names, scorers, strict=True):
        if chosen.height == 0 or chunks.height == 0:
            tops[name], sizes[name] = None, 0
            continue
        with _measured(scorer, shard_memory, shard, chunk_size) as built:
            found = local_tops(sentences, chunks, chunk_of_row, chosen, top_k, scorer)
        sizes[name] = max(built, default=0)
        found = found.with_columns(pl.lit(shard, dtype=pl.Int32).alias("shard"))
        if rows is not None:
            found = found.with_columns(rows.gather(found["query"]).alias("query"))
        tops[name] = found
    return {"shard": shard, "chunk_size": chunk_size, "tops": tops, "index_bytes": sizes,
            "sentences": frame.height, "chunks": chunks.height,
            "seconds": time.perf_counter() - began}


@contextlib.contextmanager
def _measured(scorer: Any, bound: int | None = None, shard: int = 0,
              chunk_size: int = 0) -> Iterator[list[int]]:
    """The bytes of each index the scorer builds within the block: its index methods are
    wrapped on this instance for the block (the same object, so errors still name the plugin
    as the registry knows it), then restored. An index over `bound` bytes raises at once."""
    built: list[int] = []
    wrapped = [n for n in ("collection_index", "collection_index_sentences")
               if hasattr(scorer, n) and n not in vars(scorer)]

    def wrap(own: Any) -> Any:
        def measured(*args: Any) -> Any:
            index = own(*args)
            built.append(_index_bytes(index))
            if bound is not None and built[-1] > bound:
                raise UsageError(f"--shard-memory {bound}: shard {shard}'s index took "
                                 f"{built[-1]} bytes at chunk size {chunk_size}; give more "
                                 "--shards (or more memory). Nothing was written.")
            return index
        return measured

    for name in wrapped:
        setattr(scorer, name, wrap(getattr(scorer, name)))
    try:
        yield built
    finally:
        for name in wrapped:
            delattr(scorer, name)


def compute_ray(sentences_lf: Any, query_frame: Any, sweep: Any, scorers: dict[str, Any], *,
                address: str | None = None, shards: int | None = None,
                shard_memory: int | None = None, work_dir: Path | None = None,
                ) -> tuple[dict[tuple[int, int, str], Any], RayReport]:
    """Every setting of `sweep` (RESULT_SCHEMA tables, keyed (chunk size, top-k, scorer)) on
    Ray, and what the run did. `shards` defaults to the cluster's CPUs; `work_dir` holds the
    shard files (a temporary folder here by default; on several machines, a folder every
    node reads at the same path), removed after the run."""
    from fragbench.retrieval.collection.engine import merge_tops

    check_scorers(scorers)
    if address is not None:
        check_address(address)
    report = RayReport()
    with ray_session(address) as ray:
        resources = ray.cluster_resources()
        report.cluster_cpus = float(resources.get("CPU", 0.0))
        report.address = ray.get_runtime_context().gcs_address
        check_work_dir(ray.nodes(), work_dir)
        if shard_memory is not None and shard_memory > _largest_node_memory(ray):
            raise UsageError(f"--shard-memory {shard_memory}: no node of the Ray cluster "
                             f"offers that much memory (the largest offers "
                             f"{int(_largest_node_memory(ray))} bytes); give less, with more "
                             "--shards.")
        wanted = shards if shards is not None else max(1, int(report.cluster_cpus))
        folder = Path(tempfile.mkdtemp(prefix="fragbench-shards-", dir=work_dir))
        try:
            began = time.perf_counter()
            files = _shard_files(sentences_lf, wanted, folder)
            report.shards = len(files)
            report.seconds["shard files"] = time.perf_counter() - began
            began = time.perf_counter()
            queries_ref = ray.put(query_frame)
            options: dict[str, Any] = {"num_cpus": 1, "max_retries": 0, "runtime_env": {
                "env_vars": {"POLARS_MAX_THREADS": "1", "NUMBA_NUM_THREADS": "1"}}}
            if shard_memory is not None:
                options["memory"] = shard_memory
            task = ray.remote(shard_task).options(**options)
            largest = max(sweep.top_ks)
            expected = environment(list(sweep.scorers))
            refs = [task.remote([str(p) for p in paths], shard, size, list(sweep.scorers),
                                largest, queries_ref, expected, shard_memory)
                    for size in sweep.chunk_sizes for shard, paths in enumerate(files)]
            done = _gather(ray, refs)
            report.seconds["shard tasks"] = time.perf_counter() - began
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    report.tasks = [{k: v for k, v in d.items() if k != "tops"} for d in done]
    began = time.perf_counter()
    results = {}
    for size in sweep.chunk_sizes:
        for name in sweep.scorers:
            tops = [d["tops"][name] for d in done
                    if d["chunk_size"] == size and d["tops"][name] is not None]
            for k in sweep.top_ks:
                results[(size, k, name)] = merge_tops(tops, query_frame["query"], k)
    report.seconds["merge"] = time.perf_counter() - began
    return results, report


def _gather(ray: Any, refs: list[Any]) -> list[dict[str, Any]]:
    """The tasks' results, in the order of `refs`. The first task to fail stops the run at
    once (the others are cancelled): a fragbench error raised as itself; any other exception
    in a task (a shard file the node cannot read, fragbench missing on the node) in one line,
    its type, its first line and what a cluster needs; a lost task (a worker lost, out of
    memory) in one line."""
    results: dict[Any, dict[str, Any]] = {}
    pending = list(refs)
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            results[ready[0]] = ray.get(ready[0])
    except ray.exceptions.RayTaskError as exc:
        _cancel(ray, pending)
        cause = getattr(exc, "cause", None)
        if isinstance(cause, FragbenchError):
            raise cause from None
        what = cause if isinstance(cause, BaseException) else exc
        first = first_line(what)
        raise FragbenchError(f"a Ray task failed: {type(what).__name__}: {first}; on a "
                             "cluster, give --work-dir on storage every node reads, and "
                             "install fragbench (the same versions) on every node.") from None
    except ray.exceptions.RayError as exc:
        _cancel(ray, pending)
        first = first_line(exc, type(exc).__name__)
        # a worker lost or killed (out of memory), or one that could not load the task (a
        # node without fragbench can fail here, as a system error, rather than in the task)
        raise FragbenchError(f"the Ray engine lost a shard's task ({type(exc).__name__}: "
                             f"{first}); give more --shards or more memory per node, and on "
                             "a cluster install fragbench (the same versions) on every "
                             "node.") from None
    return [results[r] for r in refs]


def _cancel(ray: Any, refs: list[Any]) -> None:
    """Cancel tasks not yet done (on a cluster the run did not start they would run on)."""
    for ref in refs:
        with contextlib.suppress(Exception):  # a task that ended meanwhile
            ray.cancel(ref, force=True)


def parse_bytes(text: str) -> int:
    """`--shard-memory`: a whole number of bytes, or a number with KB, MB, GB, TB (powers of
    1000) or KiB, MiB, GiB, TiB (powers of 1024), rounded down to a whole byte ("1.5GiB").
    Exact (a fraction, not a float: "9007199254740993" stays that many bytes); a fraction of
    bytes without a unit ("1.5") is refused rather than cut to 1."""
    from fractions import Fraction

    units = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
             "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
    # At most 30 digits each side of the point (far past any memory): a longer number is
    # refused like any other bad size, before Python's own limit on digits would raise.
    match = re.fullmatch(r"\s*([0-9]{1,30}(?:\.[0-9]{1,30})?)\s*([A-Za-z]*)\s*", text,
                         re.ASCII)  # \s: ASCII white space only, as the digits and units
    unit = match.group(2).upper() if match else ""
    size = Fraction(match.group(1)) * units[unit] if match and unit in units else Fraction(0)
    if size < 1 or (units.get(unit) == 1 and size.denominator != 1):
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise UsageError(f"--shard-memory {shown!r}: give a size such as 2GiB, 500MB or a "
                         "whole number of bytes.")
    return int(size)
