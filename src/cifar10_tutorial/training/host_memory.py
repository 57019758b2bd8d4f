"""Keep the memory a train step frees, instead of handing it back to the kernel each step.

A step allocates and frees tens of MB of activations and gradients (one 128 x 64 x 24 x 24
float32 map is 19 MB). With glibc's defaults, blocks that large come from ``mmap`` and go
back with ``munmap`` when freed, and the top of the heap is trimmed: the next step then
page-faults all of them in again, and anything else done between steps (the input
pipeline's dequeue) moves glibc's adaptive thresholds so that it happens more. Telling
malloc to serve blocks up to its largest mmap threshold (32 MB) from the heap and never to
trim it keeps them mapped. The arithmetic is untouched (bit-identical results); the
process keeps its peak memory until it ends. Measured by ``python benchmarks/benchmark.py``
(docs/benchmark.md).
"""
from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
MMAP_THRESHOLD_MAX = 32 << 20  # glibc's ceiling for M_MMAP_THRESHOLD on 64-bit
NEVER_TRIM = 2 ** 31 - 1  # mallopt takes an int


def keep_freed_memory() -> bool:
    """Set glibc malloc's options for the rest of the process; False where this is not
    glibc (macOS, musl) or it refuses, and nothing changes."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX) and mallopt(M_TRIM_THRESHOLD, NEVER_TRIM))
