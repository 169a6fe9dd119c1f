"""The reader's wait for a partition's records has a deadline: a broker that delivers
nothing (no record, no end) for READ_WAIT ends the run with an error naming the topic,
partition and offsets, instead of polling for ever."""

from __future__ import annotations

import threading

import pytest

from antidote_consumer.reader import run as reader_run


class _Silent:
    """A Kafka consumer whose broker never answers: every poll times out."""

    def assign(self, _tps) -> None:
        pass

    def unassign(self) -> None:
        pass

    def poll(self, _timeout: float):
        return None


def test_a_partition_that_never_answers_ends_the_read_with_a_clear_error(monkeypatch) -> None:
    monkeypatch.setattr(reader_run, "READ_WAIT", 0.2, raising=False)
    run = object.__new__(reader_run._Run)
    run.topic, run.consumer, run.stop = "orders.poison", _Silent(), threading.Event()
    settled: list = []
    run._settle = lambda *a: settled.append(a)
    # Should the wait have no deadline, the test's own stops it after 5 s (and fails).
    threading.Timer(5, run.stop.set).start()
    with pytest.raises(TimeoutError, match=r"topic orders.poison/2: no record and no end from the "
                                           r"broker for 0.2s, after offset 9 of 10..19"):
        run._read_partition(2, 10, 20)
    run.stop.set()
    assert settled == []  # nothing read, nothing settled: the next run reads it all
