"""Concurrent callers of the same read share one request (single flight).

After a start, up to 64 consumers of one namespace are reconciled at once and each needs
the same list (its namespace's reader Jobs, its children): one request answers them all,
instead of one per consumer until the first answer is in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")


class SingleFlight:
    def __init__(self) -> None:
        self._flying: dict[Hashable, asyncio.Future[Any]] = {}

    async def run(self, key: Hashable, fn: Callable[[], Awaitable[T]]) -> T:
        """`fn()`'s result; a caller arriving while it runs for `key` waits for the same
        result (or exception) instead of calling it again. The next caller after it ends
        calls it anew: nothing is cached here."""
        flight = self._flying.get(key)
        if flight is None:
            flight = asyncio.ensure_future(fn())
            self._flying[key] = flight
            flight.add_done_callback(lambda _: self._flying.pop(key, None))
        # shield: one waiter cancelled (its reconcile stopped) does not cancel the others'.
        return await asyncio.shield(flight)
