"""The ledger's held entries (ordering Key, worker/ordering.py) in records a broker accepts.

A source partition's chains were one ledger record, `held:<partition>`, and nothing bounds
its size: maxHeldPerKey messages behind each of any number of keys. Past the ledger topic's
max.message.bytes (the broker's default, 1 MB: one key holding ~36,000 messages, measured)
the broker refused the record, every commit of the batch failed the same way, and the queue
was disabled with the batch unconsumed. So a partition's chains larger than HELD_PART_BYTES
are written as their JSON text cut in parts, each its own record:

    held:3     {"~parts": 4}            the head: how many parts to join
    held:3#0   {"text": "<the first HELD_PART_BYTES characters>"}
    ...
    held:3#3   {"text": "<the rest>"}

The head and its parts are committed in one transaction and in that order, so the parts a
head names, read after it, are its own. Parts past a head's count (left by a larger state
before, until compaction drops them) are not read. Chains that fit stay one record, as
before, so a ledger written before this reads the same.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

# Well below the broker's default max.message.bytes (1 MB) and librdkafka's batch.size (1 MB):
# a part, with its JSON escaping and the batch's framing, fits any ledger topic we create.
HELD_PART_BYTES = 256 * 1024
PARTS = "~parts"  # never a chain's key: those are base64 (worker.ordering.key_text)
PART_SEP = "#"


def held_entries(prefix: str, partition: str, chains: dict, limit: int = HELD_PART_BYTES) -> dict[str, dict]:
    """Ledger entries (key -> value) of one partition's chains."""
    text = json.dumps(chains)
    if len(text) <= limit:
        return {prefix + partition: chains}
    pieces = [text[i:i + limit] for i in range(0, len(text), limit)]
    return {prefix + partition: {PARTS: len(pieces)},
            **{f"{prefix}{partition}{PART_SEP}{i}": {"text": piece} for i, piece in enumerate(pieces)}}


@dataclass
class HeldReader:
    """Joins the parts of held entries as a ledger is read, record by record."""

    expected: dict[str, int] = field(default_factory=dict)  # partition -> parts its head names
    pieces: dict[str, dict[int, str]] = field(default_factory=dict)

    def apply(self, held: dict[str, dict], name: str, value: dict) -> None:
        """One `held:` record (`name` without the prefix) into `held` (partition -> chains)."""
        partition, sep, index = name.partition(PART_SEP)
        if not sep:
            if PARTS in value:
                self.expected[partition], self.pieces[partition] = int(value[PARTS]), {}
            else:
                held[partition] = dict(value)
                self.expected.pop(partition, None)
                self.pieces.pop(partition, None)
            return
        n, i = self.expected.get(partition), int(index)
        if n is None or i >= n:
            return  # a part no head names (left over from a larger state)
        got = self.pieces[partition]
        got[i] = value["text"]
        if len(got) == n:
            held[partition] = json.loads("".join(got[k] for k in range(n)))
