"""What a task notes of its input batches beside running them: the last offset of each
partition read (the ledger's positions) and the largest record (the next source batch's
Arrow batch size), each in a few calls a batch, none per row."""

from __future__ import annotations


def largest_record(batch) -> int:
    """Bytes of the largest record of an Arrow batch of INPUT_COLUMNS, or a little more: the
    largest key, value and headers of its rows added up (they may be different rows'). A few
    Arrow calls a batch, none per row."""
    import numpy as np
    import pyarrow.compute as pc

    n = 0
    for name in ("key", "value"):
        most = pc.max(pc.binary_length(batch.column(name))).as_py()
        n += most or 0
    lists = batch.column("headers")
    ends = lists.offsets.to_numpy(zero_copy_only=False)  # rows + 1 of them, even for none
    if ends[-1] > ends[0]:
        every = lists.values  # all rows' headers (unsliced: `ends` index into it)
        size = np.zeros(len(every) + 1, dtype=np.int64)
        for name in ("key", "value"):
            size[1:] += pc.fill_null(pc.binary_length(every.field(name)), 0).to_numpy(zero_copy_only=False)
        total = np.cumsum(size)  # total[i]: the first i headers' bytes
        n += int((total[ends[1:]] - total[ends[:-1]]).max())
    return n


def note_one_partition(topics: list, parts: list, offsets: list, ends: dict[tuple[str, int], int]) -> bool:
    """Fold the last offset of a batch's rows into `ends` when they are all of one (topic,
    partition), and say whether they were. A Kafka source task reads one partition, so that
    is nearly every batch, and the rows are at hand as lists already: two counts and a max
    in C. (An Arrow group-by per batch was a fifth of a worker's time, profiled with Arrow
    batches of 256 rows, and each group-by has a fixed cost.)"""
    n = len(topics)
    if n == 0:
        return True
    topic, partition = topics[0], parts[0]
    if topics.count(topic) != n or parts.count(partition) != n:
        return False
    last = max(offsets)
    if last > ends.get((topic, partition), -1):
        ends[(topic, partition)] = last
    return True


def note_ends(topics: list, parts: list, offsets: list, ends: dict[tuple[str, int], int]) -> None:
    """The last offset of each (topic, partition) of rows that mix partitions (a retry batch
    read by the local worker), folded into `ends`: a loop over ~1,000 rows costs less than
    Arrow's group-by, whose fixed cost (and first import) was most of it."""
    for where in zip(topics, parts, offsets):
        key = where[:2]
        if where[2] > ends.get(key, -1):
            ends[key] = where[2]
