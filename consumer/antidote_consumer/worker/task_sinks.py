"""A task's partition sinks (sink_txn.PartitionSink) as it reads its records: one opened for
each partition it moves to, the one it leaves committed, all committed at its end; and the
retries it settled itself (task_settle), told to the driver as SETTLED rows."""

from __future__ import annotations

from collections.abc import Callable

from .chosen import signal_of
from .sink_txn import ExactlyOnce, PartitionSink
from .task_settle import RETRIED, Final, Held, TaskSettle, Tally


class TaskSinks:
    """The partitions of one task. `settle`: its failures' records may be written with the
    chunks of the partitions whose outputs it writes (None: every failure goes back to the
    driver), once `ask` says yes (None: no breaker to ask); the rows of those that are not go
    to `rows`, the task's result rows. A run whose outputs come back (the local worker, a
    bisection's segment) settles nothing, but counts what a replay passes over by it."""

    def __init__(self, eos: ExactlyOnce, sink_kafka: dict, retried: bool, settle: TaskSettle | None = None,
                 ask: Callable[[], str] | None = None, rows: list | None = None) -> None:
        self.eos, self.sink_kafka, self.retried = eos, sink_kafka, retried
        self.settle, self.ask = settle, ask
        self.rows: list = rows if rows is not None else []
        self.parts: dict[tuple[str, int], PartitionSink] = {}
        self.tally = Tally()

    def moved_to(self, part: PartitionSink | None, done_below: int | None, topic: str, partition: int
                 ) -> PartitionSink:
        """The task's records move on to `topic`/`partition` from `part`'s (None: the first). A
        task of several partitions (coalesced: spark.antidote.tasksPerCore) reads each one's
        records in one run, so `part` is done with below `done_below` (None: its outputs are
        not written by the task): its buffered chunk is committed now rather than at the
        task's end, and the chunks of the partitions before it are waited for, so a task holds
        the outputs of two partitions at most, however many it reads. Correct for any order of
        records: a partition read again later commits from there."""
        if done_below is not None and part is not None:
            for other in self.parts.values():
                if other is not part:
                    other.done()
            part.commit(done_below)
        found = self.parts.get((topic, partition))
        if found is None:
            found = PartitionSink.open(self.eos, self.sink_kafka, topic, partition, self.retried)
            if self.settle is not None and done_below is not None:  # (its outputs are the task's to write)
                found.held = Held(self.ask, self.rows, self.tally)
            self.parts[(topic, partition)] = found
        return found

    def passed(self, topic: str, how: str, now: int) -> None:
        """A replay passed over a failure an earlier attempt settled (SinkEntry.settled_as):
        counted as that attempt's result, which never reached the driver, would have. A final
        one's error class and origin are not known here (the last-poison gauge keeps what it
        showed), and it counts toward the failure ratio unless refused by validation."""
        if how == RETRIED:
            self.tally.add(self.settle.cycle_of(topic) if self.settle is not None else 1, now)
            return
        reason, _, disposition = how.rpartition("/")
        self.tally.add_final(Final(reason, disposition, None, None, signal_of(reason, None)), last=False)

    def finish(self, ends: dict[tuple[str, int], int], writes: bool) -> None:
        """A task's end: the rest of each partition's outputs and its entry, committed. With
        the executor's writer, every partition's last chunk is sent before any is waited for."""
        for where, part in self.parts.items():
            if writes and where in ends:
                part.commit(ends[where] + 1)
        for part in self.parts.values():
            part.done()
