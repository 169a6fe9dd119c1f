"""Spark's source offsets, in and out: where the source query starts when its checkpoint has
no offsets (from the ledger's positions), and where the last batch of a query's progress
ended. Pure functions of the values Spark and the ledger give."""

from __future__ import annotations

import json


def committed_offsets(progress: dict | None, topic: str) -> dict[int, int] | None:
    """The source offsets the last batch of a query progress ended at, by partition."""
    for src in (progress or {}).get("sources") or []:
        end = src.get("endOffset")
        if isinstance(end, str):
            end = json.loads(end)
        if isinstance(end, dict) and topic in end:
            return {int(p): int(o) for p, o in end[topic].items()}
    return None


def starting_offsets(topic: str, policy: str, partitions: int, floor: dict[int, int],
                     start: dict[int, int]) -> str:
    """The source query's startingOffsets. Spark reads them only when the checkpoint has no
    offsets (a first start, or a lost or replaced checkpoint): then each partition starts
    where the ledger's accounting ends (`floor`), else where a `latest` consumer first
    started (`start`), else at its earliest record, as Spark starts a new partition. So a
    lost checkpoint neither skips a message nor quarantines one twice."""
    if not floor and not start:
        return policy
    every = set(range(partitions)) | set(floor)
    return json.dumps({topic: {str(p): floor.get(p, start.get(p, -2)) for p in sorted(every)}})
