"""The operator's heap on glibc: fewer malloc arenas, and free memory given back.

glibc gives each thread that allocates its own malloc arena (up to 8 per core), and a freed
chunk stays in its arena. The API client runs on the event loop (`kube.Kube`, no threads),
but threads remain (DNS lookups, the metrics server); two arenas are enough for them, and
`trim` (malloc_trim) hands the free pages of the heap back to the kernel after the peak
of a first reconcile. Elsewhere than glibc both do nothing.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("antidote.operator")

M_ARENA_MAX = -8  # mallopt parameter (malloc.h)

try:
    _libc: ctypes.CDLL | None = ctypes.CDLL("libc.so.6")
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
