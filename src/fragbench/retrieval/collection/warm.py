"""Compiles collection mode's loops once, so that a user's first `retrieve --collection` does
not spend its first quarter of a minute compiling: `python -m fragbench.retrieval.collection.warm`
(`make` runs it after installing).

numba compiles each loop once per type of its arguments (an array's dtype, and whether it is
read-only, count) on its first call and keeps the machine code next to the module
(`cache=True`); later processes load it. So the warm-up does not only reach every loop: it
calls each with every type a real run hands it. A tiny collection goes through the same paths
as a real one:

- from frames and from a Parquet file of many row groups (Polars then hands `chunk_plan` its
  positions as a copy, writable, where a frame's are a read-only view: two types);
- ASCII and accented text, a file in chunk order and one not (a chunk's terms gathered as it is
  read, with int32 stamps, or merged after, with int64 ones), queries over the whole collection
  and restricted to a passage, a k larger than the candidates;
- the chunks' joined text (`shard_tops`: how sqrt-lexical indexes beside a scorer that cannot
  index sentences; its language masks are then read-only);
- more distinct terms than the vocabulary first holds (its table is rehashed).

`tests/retrieval/test_collection_kernels.py` holds this list to the loops: after the warm-up, every
loop a Python caller can reach has been compiled, and a varied run compiles nothing more.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl


def _sentences() -> pl.DataFrame:
    import polars as pl

    return pl.DataFrame({
        "passage": ["en", "en", "en", "fr", "fr"],
        "position": [0, 1, 2, 0, 1],
        "lang": ["en", "en", "en", "fr", "fr"],
        "text": ["The refund takes 14 days.", "Hosting is included.", "The offer ends.",
                 "Le délai de remboursement est de 14 jours.", "L’offre est élevée."],
    })


def _queries(restricted: bool) -> pl.DataFrame:
    import polars as pl

    frame = pl.DataFrame({"query": ["q1", "q2"], "lang": ["en", "fr"],
                          "text": ["refund days", "délai élevé"]})
    return frame.with_columns(passage=pl.Series(["en", "fr"])) if restricted else frame


def _grown() -> pl.DataFrame:
    """One passage of more distinct terms than a vocabulary's first table holds (2**15)."""
    import polars as pl

    return pl.DataFrame({"passage": ["big"], "position": [0], "lang": ["en"],
                         "text": [" ".join(f"t{i}" for i in range(1 << 15))]})


def warm() -> float:
    """Runs the tiny collection through every path of the local engine; the seconds it took."""
    from fragbench.plugins import registry
    from fragbench.retrieval.collection.engine import (
        chunk_collection,
        retrieve_collection,
        shard_tops,
    )

    # By its registered name, as a user picks it: the built-in scorers import this package,
    # so importing one here would tie the two in a circle.
    scorer = registry().get("scorer", "sqrt-lexical")

    start = time.perf_counter()
    sentences = _sentences()
    interleaved = sentences[[3, 0, 4, 1, 2]]  # a file not in chunk order: terms merged per chunk
    with tempfile.TemporaryDirectory() as folder:
        parquet = Path(folder) / "sentences.parquet"
        interleaved.write_parquet(parquet, row_group_size=1)  # columns read in many parts
        for source in (sentences, interleaved, parquet):
            for restricted in (False, True):
                for top_k in (1, 10):
                    retrieve_collection(source, _queries(restricted), 2, top_k)
    shard_tops(chunk_collection(sentences.lazy(), 2), _queries(False), 3, scorer)
    retrieve_collection(_grown(), _queries(False), 1, 1)
    return time.perf_counter() - start


if __name__ == "__main__":
    print(f"collection mode's compiled loops ready ({warm():.1f} s)")
