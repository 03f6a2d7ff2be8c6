"""Retrieval: passages chunked, chunks scored, the best kept; per passage and at collection scale.

In: the corpus's sentence frames and a chunker's and scorer's plugins (through
`fragbench.plugins`). Out: the retrieval table (`RETRIEVAL_SCHEMA`: every chunk, its score and
rank, the selection) and what a call is given (`spans.supplied`). Nothing is sent from here.

- `passages`: the per-passage retriever of protocol 1.0 (`retrieve`, `chunk_passages`);
- `spans`: what a chunker's spans cover of each fact (`chunker_output`, `supplied`);
- `collection/`: collection mode, every query against every chunk of a corpus folder (the
  engine, its compiled loops, the sweep of settings, the Ray engine, the install-time warm-up).
"""

from __future__ import annotations

from fragbench.lazy import reexport

__getattr__, __dir__ = reexport(__name__, {
    "retrieve": "passages",
    "chunk_passages": "passages",
    "RETRIEVAL_SCHEMA": "passages",
    "chunker_output": "spans",
    "supplied": "spans",
})
