"""Compiled loops of the collection mode (numba): terms to ids, postings, and each query's top-k.

Imported on first use only (numba takes a while to import and compiles on first call; compiled
code is cached next to this module, `cache=True`), never by `fragbench --help`.

What they rely on, said once here:

- **Terms.** A text whose bytes are all ASCII is tokenized here: ASCII letters lowercased,
  terms the maximal runs of `[a-z0-9]` (NFKD leaves ASCII as it is, it has no combining mark,
  and the only ASCII characters of `[\\p{L}\\p{N}]` are letters and digits: the rule's terms).
  Any other text is first normalized and split by the rule's Polars expressions
  (`fragbench.text.all_terms`), its terms joined by spaces, and only split on spaces here
  (`pretokenized`). Terms are compared byte for byte (a hash finds the candidates; the bytes
  decide), so two terms share an id exactly when they are equal strings.
- **Stopwords** are terms of the vocabulary like any other, with a mask of the languages whose
  list holds them; a chunk's (or query's) language mask drops them.
- **Scores.** Every score of the built-in scorer is `m / sqrt(n)` (m distinct query terms found
  in a chunk of n terms, repeats counted): the kernel computes that division exactly as the
  sparse path does (float64 m over the float64 square root of n, no fast-math), so the same
  bits. The tie keys (Polars `round(12)` of the score) are not computed here: Polars rounds a
  table of every (m, n) the run can meet, and the kernel reads it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

MAX_THREADS = 4
"""Most threads of the query kernel. Each thread holds its own counters over every chunk of
the collection (`acc` uint16 + `touched` int32: 6 bytes x chunks, 30 MB at 5M chunks), so
threads multiply memory: on a 64-core node Polars' pool would add 1.9 GB at 5M chunks. Past a
few threads the kernel is bound by memory bandwidth anyway."""


def threads() -> int:
    """Threads the query kernel uses: Polars' thread count (POLARS_MAX_THREADS sets it; the
    machine's cores by default), at most `MAX_THREADS`; each costs 6 bytes x chunks."""
    import polars as pl

    return max(1, min(int(pl.thread_pool_size()), MAX_THREADS))


_BLOCK = 1 << 17
"""Chunks counted at once in the query kernel's dense pass: 256 KiB of 16-bit counters."""
_FNV_OFFSET = np.uint64(14695981039346656037)
_FNV_PRIME = np.uint64(1099511628211)
_EMPTY = np.int32(-1)


@njit(cache=True, nogil=True, inline="always")
def _is_term_byte(b: int, pretokenized: bool) -> bool:
    if pretokenized:
        return b != 32
    return (48 <= b <= 57) or (97 <= b <= 122) or (65 <= b <= 90)


@njit(cache=True, nogil=True, inline="always")
def _lower(b: int, pretokenized: bool) -> int:
    if not pretokenized and 65 <= b <= 90:
        return b + 32
    return b


@njit(cache=True, nogil=True)
def _hash(data: np.ndarray, start: int, end: int, pretokenized: bool) -> np.uint64:
    h = _FNV_OFFSET
    for i in range(start, end):
        h = (h ^ np.uint64(_lower(data[i], pretokenized))) * _FNV_PRIME
    return h


@njit(cache=True, nogil=True)
def _same(data: np.ndarray, start: int, end: int, pretokenized: bool, arena: np.ndarray,
          at: int, length: int) -> bool:
    if end - start != length:
        return False
    for i in range(length):  # noqa: SIM110 (numba compiles loops, not generators)
        if _lower(data[start + i], pretokenized) != arena[at + i]:
            return False
    return True


@njit(cache=True, nogil=True)
def _find(table: np.ndarray, hashes: np.ndarray, starts: np.ndarray, lens: np.ndarray,
          arena: np.ndarray, data: np.ndarray, start: int, end: int, pretokenized: bool,
          h: np.uint64) -> tuple[int, int]:
    """(term id or -1, the table slot where it is or would go)."""
    mask = np.uint64(table.size - 1)
    slot = h & mask
    while True:
        tid = table[slot]
        if tid == _EMPTY:
            return -1, np.int64(slot)
        if hashes[tid] == h and _same(data, start, end, pretokenized, arena, starts[tid],
                                      lens[tid]):
            return np.int64(tid), np.int64(slot)
        slot = (slot + np.uint64(1)) & mask


class Vocabulary:
    """Term -> id, exact: an open-addressing hash table over a byte arena of the terms.

    Its arrays have a fixed capacity inside the compiled loops (reassigning arrays in a hot
    loop costs reference counting on every term); a loop that meets a new term it has no room
    for stops and says where, and `grow` doubles what is full before it resumes.
    `stopmask[id]`: the bits of the languages whose stopword list holds the term."""

    def __init__(self) -> None:
        self.table = np.full(1 << 16, _EMPTY, dtype=np.int32)
        self.hashes = np.zeros(1 << 14, dtype=np.uint64)
        self.starts = np.zeros(1 << 14, dtype=np.int64)
        self.lens = np.zeros(1 << 14, dtype=np.int32)
        self.stopmask = np.zeros(1 << 14, dtype=np.int64)
        self.arena = np.zeros(1 << 17, dtype=np.uint8)
        self.counters = np.zeros(2, dtype=np.int64)
        """Terms held, bytes of the arena used."""

    @property
    def size(self) -> int:
        """Terms held (ids 0..size-1)."""
        return int(self.counters[0])

    def arrays(self) -> tuple:
        """The arrays the compiled loops take, in their order."""
        return (self.table, self.hashes, self.starts, self.lens, self.stopmask, self.arena,
                self.counters)

    def grow(self, length: int) -> None:
        """Room for one more term of `length` bytes."""
        size, used = (int(c) for c in self.counters)
        if size + 1 > self.hashes.size:
            for name in ("hashes", "starts", "lens", "stopmask"):
                old = getattr(self, name)
                new = np.zeros(2 * old.size, dtype=old.dtype)
                new[:old.size] = old
                setattr(self, name, new)
        if 2 * (size + 1) > self.table.size:
            self.table = _rehashed(np.full(2 * self.table.size, _EMPTY, dtype=np.int32),
                                   self.hashes, size)
        if used + length > self.arena.size:
            new = np.zeros(max(2 * self.arena.size, used + length), dtype=np.uint8)
            new[:used] = self.arena[:used]
            self.arena = new

    def add(self, data: np.ndarray, offsets: np.ndarray, bit: int) -> None:
        """Adds the words (pretokenized, one a row of `offsets`) with language bit `bit`."""
        row = 0
        while (row := add_words(self.arrays(), data, offsets, bit, row)) < offsets.size - 1:
            self.grow(int(offsets[row + 1] - offsets[row]))

    def index(self, data: np.ndarray, offsets: np.ndarray, pretokenized: np.ndarray,
              langmask: np.ndarray, seen: np.ndarray, stamps: np.ndarray) -> tuple:
        """`index_texts` over every row, the vocabulary grown as it needs: (term counts,
        row_ptr, distinct ids, seen)."""
        rows = offsets.size - 1
        counts = np.zeros(rows, dtype=np.int32)
        row_ptr = np.zeros(rows + 1, dtype=np.int64)
        ids = np.empty(data.size // 2 + rows, dtype=np.int32)  # a term and a separator
        longest = int(np.diff(offsets).max()) if rows else 0
        row = 0
        while (row := index_texts(self.arrays(), data, offsets, pretokenized, langmask, seen,
                                  stamps, row, counts, row_ptr, ids)) < rows:
            self.grow(longest)
            if seen.size < self.hashes.size:
                more = np.full(self.hashes.size, -1, dtype=np.int64)
                more[:seen.size] = seen
                seen = more
        return counts, row_ptr, ids[:row_ptr[rows]].copy(), seen

    def terms(self) -> list[str]:
        """Every term, by id (for tests and diagnostics)."""
        return [bytes(self.arena[s:s + n]).decode("utf-8")
                for s, n in zip(self.starts[:self.size].tolist(),
                                self.lens[:self.size].tolist(), strict=True)]


@njit(cache=True, nogil=True)
def _rehashed(table: np.ndarray, hashes: np.ndarray, size: int) -> np.ndarray:
    mask = np.uint64(table.size - 1)
    for t in range(size):
        s = hashes[t] & mask
        while table[s] != _EMPTY:
            s = (s + np.uint64(1)) & mask
        table[s] = t
    return table


@njit(cache=True, nogil=True)
def _insert(table: np.ndarray, hashes: np.ndarray, starts: np.ndarray, lens: np.ndarray,
            stopmask: np.ndarray, arena: np.ndarray, counters: np.ndarray, data: np.ndarray,
            start: int, end: int, pretokenized: bool, h: np.uint64, slot: int) -> int:
    """Adds a term `_find` did not find (`slot`: where it said it would go): its id, or -1
    when the vocabulary has no room for it (see `Vocabulary.grow`)."""
    size = counters[0]
    used = counters[1]
    length = end - start
    if size + 1 > hashes.size or 2 * (size + 1) > table.size or used + length > arena.size:
        return -1
    for i in range(length):
        arena[used + i] = _lower(data[start + i], pretokenized)
    hashes[size] = h
    starts[size] = used
    lens[size] = length
    stopmask[size] = 0
    table[slot] = size
    counters[0] = size + 1
    counters[1] = used + length
    return size


@njit(cache=True, nogil=True, inline="always")
def _next_term(data: np.ndarray, i: int, end: int, pretokenized: bool) -> tuple:
    """The next term of data[i:end]: (start, stop), start == end when no term is left (the
    one term scanner of `index_texts` and `lookup_texts`)."""
    while i < end and not _is_term_byte(data[i], pretokenized):
        i += 1
    j = i
    while j < end and _is_term_byte(data[j], pretokenized):
        j += 1
    return i, j


@njit(cache=True, nogil=True)
def add_words(vocab: tuple, data: np.ndarray, offsets: np.ndarray, bit: int, row: int) -> int:
    """Adds the words (pretokenized, one a row) from `row` on, with language bit `bit` set in
    their mask: the row it stopped at for want of room (offsets.size - 1 when done)."""
    table, hashes, starts, lens, stopmask, arena, counters = vocab
    while row < offsets.size - 1:
        i = offsets[row]
        j = offsets[row + 1]
        h = _hash(data, i, j, True)
        tid, slot = _find(table, hashes, starts, lens, arena, data, i, j, True, h)
        if tid < 0:
            tid = _insert(table, hashes, starts, lens, stopmask, arena, counters, data, i, j,
                          True, h, slot)
            if tid < 0:
                return row
        stopmask[tid] |= np.int64(1) << np.int64(bit)
        row += 1
    return row


@njit(cache=True, nogil=True)
def index_texts(vocab: tuple, data: np.ndarray, offsets: np.ndarray, pretokenized: np.ndarray,
                langmask: np.ndarray, seen: np.ndarray, stamps: np.ndarray, row: int,
                counts: np.ndarray, row_ptr: np.ndarray, ids: np.ndarray) -> int:
    """Terms of rows (text bytes `data`, row i at offsets[i]:offsets[i+1]), from `row` on:
    each row's count of terms (stopwords of its language out, repeats counted) in `counts`,
    and its distinct term ids in order of first occurrence in `ids[row_ptr[i]:row_ptr[i+1]]`
    (`ids`: room for every term of the rows). New terms join the vocabulary. Returns the row
    it stopped at, the whole row undone, when the vocabulary had no room for a new term
    (offsets.size - 1 when done).

    `seen[id]` is the stamp (`stamps[row]`) of the last row that held the term, kept across
    calls (as large as the vocabulary's capacity), so that distinctness costs one comparison
    a term: rows of one stamp, consecutive, share their distinct terms (a chunk's sentences
    stamped with the chunk), the later rows listing only terms the earlier ones lacked."""
    table, hashes, starts, lens, stopmask, arena, counters = vocab
    rows = offsets.size - 1
    n = row_ptr[row]
    while row < rows:
        pre = pretokenized[row]
        mask = langmask[row]
        stamp = stamps[row]
        count = 0
        i = offsets[row]
        end = offsets[row + 1]
        while i < end:
            i, j = _next_term(data, i, end, pre)
            if i >= end:
                break
            h = _hash(data, i, j, pre)
            tid, slot = _find(table, hashes, starts, lens, arena, data, i, j, pre, h)
            if tid < 0:
                tid = _insert(table, hashes, starts, lens, stopmask, arena, counters, data, i,
                              j, pre, h, slot)
                if tid < 0 or tid >= seen.size:  # no room: undo this row, say where
                    for x in range(row_ptr[row], n):
                        seen[ids[x]] = -1
                    return row
            i = j
            if stopmask[tid] & mask:
                continue
            count += 1
            if seen[tid] != stamp:
                seen[tid] = stamp
                ids[n] = tid
                n += 1
        counts[row] = count
        row_ptr[row + 1] = n
        row += 1
    return row


@njit(cache=True, nogil=True)
def lookup_texts(vocab: tuple, data: np.ndarray, offsets: np.ndarray, pretokenized: np.ndarray,
                 langmask: np.ndarray) -> tuple:
    """Each row's distinct known terms (stopwords of its language out), sorted by id: the rows'
    CSR (row_ptr, ids). Terms the vocabulary lacks are left out (they match nothing)."""
    table, hashes, starts, lens, stopmask, arena, _ = vocab
    rows = offsets.size - 1
    row_ptr = np.zeros(rows + 1, dtype=np.int64)
    ids = np.empty(max(16, data.size // 2 + rows), dtype=np.int32)
    n = 0
    for row in range(rows):
        pre = pretokenized[row]
        mask = langmask[row]
        first = n
        i = offsets[row]
        end = offsets[row + 1]
        while i < end:
            i, j = _next_term(data, i, end, pre)
            if i >= end:
                break
            h = _hash(data, i, j, pre)
            tid, _ = _find(table, hashes, starts, lens, arena, data, i, j, pre, h)
            i = j
            if tid < 0 or stopmask[tid] & mask:
                continue
            ids[n] = tid
            n += 1
        if n > first:
            part = np.sort(ids[first:n])
            m = first
            for x in range(part.size):
                if x == 0 or part[x] != part[x - 1]:
                    ids[m] = part[x]
                    m += 1
            n = m
        row_ptr[row + 1] = n
    return row_ptr, ids[:n].copy()


@njit(cache=True, nogil=True)
def merge_rows(row_ptr: np.ndarray, ids: np.ndarray, counts: np.ndarray, group: np.ndarray,
               n_groups: int, seen: np.ndarray) -> tuple:
    """Rows' terms (CSR row_ptr, ids; `counts`: each row's term count) merged into groups
    (`group[row]`): each group's term count (the sum) and distinct ids, as a CSR. `seen` is
    scratch as large as the vocabulary."""
    order = np.argsort(group, kind="mergesort")
    totals = np.zeros(n_groups, dtype=np.int64)
    ptr = np.zeros(n_groups + 1, dtype=np.int64)
    out = np.empty(ids.size, dtype=np.int32)
    seen[:] = -1
    n = 0
    at = 0
    for g in range(n_groups):
        while at < order.size and group[order[at]] == g:
            row = order[at]
            totals[g] += counts[row]
            for p in range(row_ptr[row], row_ptr[row + 1]):
                t = ids[p]
                if seen[t] != g:
                    seen[t] = g
                    out[n] = t
                    n += 1
            at += 1
        ptr[g + 1] = n
    return totals, ptr, out[:n].copy()


@njit(cache=True, nogil=True)
def fill_postings(fill: np.ndarray, indices: np.ndarray, row_ptr: np.ndarray, ids: np.ndarray,
                  row_chunk: np.ndarray) -> None:
    """Places each row's ids in the term-major postings: `indices[fill[t]] = row_chunk[row]`,
    `fill[t]` then advanced (rows in chunk order keep every term's chunks ascending)."""
    for row in range(row_ptr.size - 1):
        c = row_chunk[row]
        for p in range(row_ptr[row], row_ptr[row + 1]):
            t = ids[p]
            indices[fill[t]] = c
            fill[t] += 1


@njit(cache=True, nogil=True, inline="always")
def _worse(ka: float, ca: int, kb: float, cb: int) -> bool:
    """(ka, ca) ranks below (kb, cb): a lower key, or the same key and a later chunk."""
    return ka < kb or (ka == kb and ca > cb)


@njit(cache=True, nogil=True)
def _top_one(q_ptr: np.ndarray, q_ids: np.ndarray, t_ptr: np.ndarray, t_idx: np.ndarray,
             q: int, lo: int, hi: int, top_k: int, sqrt_terms: np.ndarray, n_index: np.ndarray,
             keytab: np.ndarray, width: int, best: np.ndarray, acc: np.ndarray,
             touched: np.ndarray, out_ids: np.ndarray, out_scores: np.ndarray,
             out_keys: np.ndarray, out_at: np.ndarray, out_zero: np.ndarray,
             out_len: np.ndarray) -> None:
    n_chunks = acc.size
    total = 0
    for p in range(q_ptr[q], q_ptr[q + 1]):
        total += t_ptr[q_ids[p] + 1] - t_ptr[q_ids[p]]
    # Few postings: note each chunk as it is first met. Many (frequent terms): count blindly
    # (no branch per posting), a block of chunks at a time so that its counters stay in the
    # core's cache, each block's chunks met picked right after it is counted.
    sparse = 8 * total < hi - lo
    n_terms = q_ptr[q + 1] - q_ptr[q]
    cursor = np.empty(n_terms, dtype=np.int64)
    ends = np.empty(n_terms, dtype=np.int64)
    for i in range(n_terms):
        t = q_ids[q_ptr[q] + i]
        a = t_ptr[t]
        b = t_ptr[t + 1]
        if lo > 0:
            a = a + np.searchsorted(t_idx[a:b], lo)
        if hi < n_chunks:
            b = a + np.searchsorted(t_idx[a:b], hi)
        cursor[i] = a
        ends[i] = b
    n_touched = 0
    if sparse:
        for i in range(n_terms):
            for x in range(cursor[i], ends[i]):
                c = t_idx[x]
                if acc[c] == 0:
                    touched[n_touched] = c
                    n_touched += 1
                acc[c] += 1
    else:
        for first in range(lo, hi, _BLOCK):
            last = min(first + _BLOCK, hi)
            for i in range(n_terms):
                a = cursor[i]
                b = a + np.searchsorted(t_idx[a:ends[i]], last)
                for x in range(a, b):
                    acc[t_idx[x]] += 1
                cursor[i] = b
            for c in range(first, last):
                touched[n_touched] = c
                n_touched += acc[c] != 0
    # the top_k by (key desc, chunk asc): a heap whose root is the worst kept
    hk = out_keys[q]
    hc = out_ids[q]
    size = 0
    for x in range(n_touched):
        c = touched[x]
        m = np.int64(acc[c])
        if size == top_k and best[m] < hk[0]:  # no chunk of m matches can beat the worst kept
            continue
        key = keytab[m * width + n_index[c]]
        if size < top_k:
            i = size
            size += 1
            while i > 0:
                parent = (i - 1) // 2
                if _worse(key, c, hk[parent], hc[parent]):
                    hk[i] = hk[parent]
                    hc[i] = hc[parent]
                    i = parent
                else:
                    break
            hk[i] = key
            hc[i] = c
        elif _worse(hk[0], hc[0], key, c):
            i = 0
            while True:
                left = 2 * i + 1
                if left >= size:
                    break
                child = left
                if left + 1 < size and _worse(hk[left + 1], hc[left + 1], hk[left], hc[left]):
                    child = left + 1
                if _worse(hk[child], hc[child], key, c):
                    hk[i] = hk[child]
                    hc[i] = hc[child]
                    i = child
                else:
                    break
            hk[i] = key
            hc[i] = c
    # best first: by key descending, then chunk ascending
    order = np.argsort(hc[:size], kind="mergesort")
    keys_by_chunk = hk[:size][order]
    order = order[np.argsort(-keys_by_chunk, kind="mergesort")]
    chosen_c = hc[:size][order].copy()
    chosen_k = hk[:size][order].copy()
    lowest = chosen_k[size - 1] if size else 0.0
    at_lowest = 0
    if size:
        if n_touched > size:  # only the lowest chosen key can tie with a chunk left out
            for x in range(n_touched):
                c = touched[x]
                m = np.int64(acc[c])
                if best[m] >= lowest and keytab[m * width + n_index[c]] == lowest:
                    at_lowest += 1
        else:
            for x in range(size):
                if chosen_k[x] == lowest:
                    at_lowest += 1
    for x in range(size):
        c = chosen_c[x]
        out_ids[q, x] = c
        out_keys[q, x] = chosen_k[x]
        out_scores[q, x] = np.float64(acc[c]) / sqrt_terms[c]
        out_zero[q, x] = False
        if chosen_k[x] == lowest:
            out_at[q, x] = at_lowest
        else:
            same = 0
            for y in range(size):
                if chosen_k[y] == chosen_k[x]:
                    same += 1
            out_at[q, x] = same
    filled = size
    if size < top_k:  # zero-score chunks, in collection order
        zeros = (hi - lo) - n_touched
        c = lo
        while filled < top_k and c < hi:
            if acc[c] == 0:
                out_ids[q, filled] = c
                out_scores[q, filled] = 0.0
                out_keys[q, filled] = 0.0
                out_at[q, filled] = zeros
                out_zero[q, filled] = True
                filled += 1
            c += 1
    out_len[q] = filled
    if sparse:
        for x in range(n_touched):
            acc[touched[x]] = 0
    else:
        acc[lo:hi] = 0


@njit(cache=True, nogil=True)
def _top_k_block(q_ptr: np.ndarray, q_ids: np.ndarray, t_ptr: np.ndarray, t_idx: np.ndarray,
                 lo: np.ndarray, hi: np.ndarray, top_k: int, sqrt_terms: np.ndarray,
                 n_index: np.ndarray, keytab: np.ndarray, width: int, best: np.ndarray,
                 block: int, blocks: int,
                 out_ids: np.ndarray, out_scores: np.ndarray, out_keys: np.ndarray,
                 out_at: np.ndarray, out_zero: np.ndarray, out_len: np.ndarray) -> None:
    """Queries block, block + blocks, ...: their rows of the output arrays."""
    n_chunks = sqrt_terms.size
    acc = np.zeros(n_chunks, dtype=np.uint16)  # matched terms: the caller checks < 2**16
    touched = np.empty(n_chunks, dtype=np.int32)
    for q in range(block, q_ptr.size - 1, blocks):
        _top_one(q_ptr, q_ids, t_ptr, t_idx, q, lo[q], hi[q], top_k, sqrt_terms, n_index,
                 keytab, width, best, acc, touched, out_ids, out_scores, out_keys, out_at,
                 out_zero, out_len)


def top_k_all(q_ptr: np.ndarray, q_ids: np.ndarray, t_ptr: np.ndarray, t_idx: np.ndarray,
              lo: np.ndarray, hi: np.ndarray, top_k: int, sqrt_terms: np.ndarray,
              n_index: np.ndarray, keytab: np.ndarray, width: int, blocks: int) -> tuple:
    """Every query's top-k (see `fragbench.retrieval.collection.kernels`): chunk ids, scores, keys,
    at_key, zero flags as (queries x top_k) arrays, and each query's row count. Queries go
    to `blocks` threads, interleaved (the compiled loop releases the GIL; numba's parallel
    runtime is not used: it would cost about 80 MB of memory for two threads); each has its
    own counters over the chunks: 6 bytes x chunks per thread (`MAX_THREADS` bounds them).
    `best[m]`: the highest key of m matched terms (over every chunk length), so that a chunk
    that cannot enter the top-k is passed over unread."""
    from concurrent.futures import ThreadPoolExecutor

    best = keytab.reshape(-1, width).max(axis=1)

    n_q = q_ptr.size - 1
    out = (np.zeros((n_q, top_k), dtype=np.int64), np.zeros((n_q, top_k), dtype=np.float64),
           np.zeros((n_q, top_k), dtype=np.float64), np.zeros((n_q, top_k), dtype=np.int64),
           np.zeros((n_q, top_k), dtype=np.bool_), np.zeros(n_q, dtype=np.int64))

    def run(block: int) -> None:
        _top_k_block(q_ptr, q_ids, t_ptr, t_idx, lo, hi, top_k, sqrt_terms, n_index, keytab,
                     width, best, block, blocks, *out)

    if blocks == 1:
        run(0)
    else:
        with ThreadPoolExecutor(max_workers=blocks) as pool:
            list(pool.map(run, range(blocks)))
    return out


@njit(cache=True, nogil=True)
def intern_rows(vocab: tuple, data: np.ndarray, offsets: np.ndarray, row: int,
                ids: np.ndarray) -> int:
    """Each row's whole bytes as one key (not lowercased): its id in `ids[row]`, new keys
    added. Returns the row it stopped at for want of room (offsets.size - 1 when done).

    The same lookup as `add_words`, written out on purpose: this loop is on `chunk_plan`'s
    path (a key per input row), and a shared helper, inlined or not, measured 1.3-1.7x
    slower here (5M rows: 0.95 against 1.5 s)."""
    table, hashes, starts, lens, stopmask, arena, counters = vocab
    while row < offsets.size - 1:
        i = offsets[row]
        j = offsets[row + 1]
        h = _hash(data, i, j, True)
        tid, slot = _find(table, hashes, starts, lens, arena, data, i, j, True, h)
        if tid < 0:
            tid = _insert(table, hashes, starts, lens, stopmask, arena, counters, data, i, j,
                          True, h, slot)
            if tid < 0:
                return row
        ids[row] = tid
        row += 1
    return row


@njit(cache=True, nogil=True)
def plan_chunks(group: np.ndarray, position: np.ndarray, n_groups: int, size: int) -> tuple:
    """Chunks of `size` rows per group (groups numbered in order of first appearance, rows
    ordered by (position, row) within a group): the chunk of each row (chunks numbered in
    group order, then chunk order), and each chunk's group and number in its group."""
    n = group.size
    starts = np.zeros(n_groups + 1, dtype=np.int64)
    for r in range(n):
        starts[group[r] + 1] += 1
    for g in range(n_groups):
        starts[g + 1] += starts[g]
    fill = starts[:n_groups].copy()
    order = np.empty(n, dtype=np.int32)  # row numbers: the caller keeps n < 2**31
    for r in range(n):  # rows ascending: each group's rows in row order
        order[fill[group[r]]] = r
        fill[group[r]] += 1
    n_chunks = 0
    for g in range(n_groups):
        n_chunks += (starts[g + 1] - starts[g] + size - 1) // size
    chunk_of_row = np.empty(n, dtype=np.int32)
    chunk_group = np.empty(n_chunks, dtype=np.int64)
    chunk_number = np.empty(n_chunks, dtype=np.int64)
    c = 0
    for g in range(n_groups):
        a = starts[g]
        b = starts[g + 1]
        rows = order[a:b]
        # stable by position: ties keep row order
        rows = rows[np.argsort(position[rows], kind="mergesort")]
        for x in range(b - a):
            if x % size == 0:
                chunk_group[c] = g
                chunk_number[c] = x // size
                c += 1
            chunk_of_row[rows[x]] = c - 1
    return chunk_of_row, chunk_group, chunk_number
