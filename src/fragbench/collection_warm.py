"""Compiles collection mode's loops once, so that a user's first `retrieve --collection` does
not spend its first quarter of a minute compiling: `python -m fragbench.collection_warm`
(`make` runs it after installing).

numba compiles each loop on its first call and keeps the machine code next to the module
(`cache=True`); later processes load it. A tiny collection run through the same path as a
real one (ASCII and accented text, a file in chunk order and one not, queries over the whole
collection and restricted to a passage, a k larger than the candidates) reaches the loops
(all but the vocabulary's growth, a second's compiling in the first large run), and prints one
line.
"""

from __future__ import annotations

import time


def warm() -> float:
    """Runs the tiny collection through the local engine; the seconds it took."""
    import polars as pl

    from fragbench.collection import retrieve_collection

    start = time.perf_counter()
    sentences = pl.DataFrame({
        "passage": ["en", "en", "en", "fr", "fr"],
        "position": [0, 1, 2, 0, 1],
        "lang": ["en", "en", "en", "fr", "fr"],
        "text": ["The refund takes 14 days.", "Hosting is included.", "The offer ends.",
                 "Le délai de remboursement est de 14 jours.", "L’offre est élevée."],
    })
    interleaved = sentences[[3, 0, 4, 1, 2]]  # a file not in chunk order: terms merged per chunk
    for frame, queries in ((frame, queries) for frame in (sentences, interleaved) for queries in (
        pl.DataFrame({"query": ["q1", "q2"], "lang": ["en", "fr"],
                      "text": ["refund days", "délai élevé"]}),
        pl.DataFrame({"query": ["q1", "q2"], "lang": ["en", "fr"],
                      "text": ["refund days", "délai élevé"], "passage": ["en", "fr"]}),
    )):
        for top_k in (1, 10):
            retrieve_collection(frame, queries, 2, top_k)
    return time.perf_counter() - start


if __name__ == "__main__":
    print(f"collection mode's compiled loops ready ({warm():.1f} s)")
