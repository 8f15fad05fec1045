"""Giving the memory a compaction pass freed back to the operating system.

A compaction pass reads sealed segments and holds, for a moment, a few
hundred bytes of Python objects per entry it looks at (ids, sets, the
rewritten bytes), most of it allocated in the worker threads the pass runs
in. Python frees it all at the end of the pass, but glibc's allocator keeps
freed memory in its arenas for reuse, one arena per thread that allocated,
so left alone a node's RSS would rise to its largest pass's peak and, as
later passes land on other threads, step up again. :func:`give_back` asks
glibc to return the free pages of every arena (``malloc_trim(0)``), after
each pass that dropped something: RSS comes back near its level before the
pass.

Elsewhere than glibc (musl, macOS) there is nothing to call, and nothing
is done: those allocators return memory by their own rules.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return trim


def give_back() -> bool:
    """Return the allocator's free memory to the OS; whether it could be asked.
    Blocking (it walks every arena, a few milliseconds): run it in a thread."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
