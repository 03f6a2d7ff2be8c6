"""Handing freed memory back to the system, where the C library keeps it.

Python allocates every object larger than 512 bytes (a response body, an answer) with the C
library's `malloc`. glibc keeps what is freed in its heap for the next allocation and returns
it to the system only from the top of the heap: a gigabyte of bodies freed among objects that
live on stays counted in the process's resident memory, although nothing uses it. At 100,000
calls the journal's bodies, once the calls table holds them, are about a gigabyte of such
memory (measured on the bench_scale series: resident memory 6.4 GiB before `malloc_trim`,
5.4 GiB after, in 0.1 s). `malloc_trim(0)` gives back every whole free page of the heap.

A leaf: it imports nothing of fragbench.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable


@functools.cache
def _trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None where the C library has none (macOS, musl)."""
    if not sys.platform.startswith("linux"):
        return None
    # glibc's own name first: `find_library` would start `ldconfig` in a large process.
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_freed_memory() -> bool:
    """Return the C heap's free pages to the system (glibc), after a large set of objects was
    let go; whether it could be asked. It frees nothing in use: only pages that no allocation
    holds, so the process needs them back only if it allocates as much again."""
    trim = _trim()
    if trim is None:
        return False
    trim(0)
    return True
