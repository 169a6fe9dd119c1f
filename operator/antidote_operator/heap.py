"""The operator's heap: fewer malloc arenas and free memory given back (glibc), and fewer
passes of Python's cyclic garbage collector over long-lived state.

glibc gives each thread that allocates its own malloc arena (up to 8 per core), and a freed
chunk stays in its arena. The API client runs on the event loop (`kube.Kube`, no threads),
but threads remain (DNS lookups, the metrics server); two arenas are enough for them, and
`trim` (malloc_trim) hands the free pages of the heap back to the kernel after the peak
of a first reconcile. Elsewhere than glibc both do nothing.
"""

from __future__ import annotations

import ctypes
import gc
import logging

log = logging.getLogger("antidote.operator")

M_ARENA_MAX = -8  # mallopt parameter (malloc.h)

_libc: ctypes.CDLL | None
try:
    _libc = ctypes.CDLL("libc.so.6")
    _libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    _libc.malloc_trim.argtypes = [ctypes.c_size_t]
except (OSError, AttributeError):  # not glibc (musl, macOS)
    _libc = None


def limit_arenas(arenas: int = 2) -> bool:
    """Call before the thread pools start: arenas already created stay."""
    return bool(_libc is not None and _libc.mallopt(M_ARENA_MAX, arenas))


def trim() -> None:
    if _libc is not None:
        _libc.malloc_trim(0)


TLS_READ_BUFFER = 64 * 1024


def small_tls_buffers(size: int = TLS_READ_BUFFER) -> None:
    """asyncio gives every TLS connection a read buffer of `SSLProtocol.max_size` (256 KiB),
    zero-filled, so resident at once. The operator holds 25-50 connections to the API server
    (Kopf's watches and its unbounded pool of patch connections, and `kube.Kube`'s 32):
    6-12 MB of buffers, measured. 64 KiB per read is plenty for the API server's answers (a
    long LIST is read in a few more calls). Set before the first connection; affects every
    asyncio TLS connection in the process (the operator's alone)."""
    import asyncio.sslproto

    if getattr(asyncio.sslproto.SSLProtocol, "max_size", 0) > size:
        asyncio.sslproto.SSLProtocol.max_size = size


# Young objects between collections of the youngest generation (Python's default: 700), and
# the collections of each generation before the next older one is collected (10, 10).
GC_THRESHOLDS = (10_000, 10, 10)


def fewer_collections() -> None:
    """The operator's heap is mostly long-lived: Kopf, pydantic and the modules, and each
    consumer's state. With Python's default thresholds, at 1,000 consumers a third of the
    operator's CPU went to the cyclic collector: 53 full collections in 142 s, each walking
    every object (0.05-0.44 s, during which the event loop stands still), about a second of
    a 3-second burst of disables (docs/performance.md). Call once everything is imported:
    what exists then is frozen (never walked again), and young collections come every
    10,000 new objects instead of 700, so older ones about 14 times less often. Objects are
    still freed when their last reference goes; only garbage in reference cycles waits
    longer (50,000 held the RSS of 1,000 consumers at 121 MB, 10,000 at 118 MB)."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
