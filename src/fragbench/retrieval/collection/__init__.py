"""Collection mode: every query against every chunk of a corpus folder, in bounded memory.

- `engine`: `retrieve_collection`, chunking and scoring shard by shard (numba's loops in
  `kernels`, imported only here);
- `sweep`: the sensitivity sweep of chunk sizes and top-k over a collection;
- `ray`: the same on a Ray cluster (`fragbench[ray]`);
- `warm`: compiles the loops once at install (`python -m fragbench.retrieval.collection.warm`).
"""
