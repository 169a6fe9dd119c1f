"""The collector's settings in a Python worker that runs Antidote's tasks (worker.collector)."""

from __future__ import annotations

import gc

import pytest

from antidote_consumer.worker import collector


@pytest.fixture(autouse=True)
def untuned(monkeypatch):
    thresholds = gc.get_threshold()
    monkeypatch.setattr(collector, "_tuned", False)
    gc.unfreeze()
    yield
    gc.set_threshold(*thresholds)
    gc.unfreeze()


def test_tuned_once_and_kept() -> None:
    before = gc.get_threshold()
    collector.tune()
    frozen = gc.get_freeze_count()
    assert frozen > 0 and gc.get_threshold() == (collector.YOUNG_EVERY, *before[1:])
    kept = [object() for _ in range(3)]
    collector.tune()  # a later task: nothing more is frozen
    # The count can fall (another thread of this process, say a Kafka client's or py4j's
    # from an earlier test, frees an object that was frozen) but a second freeze would raise
    # it, and would take `kept` out of the generations the collector walks.
    assert gc.get_freeze_count() <= frozen
    assert any(o is kept for o in gc.get_objects())


def test_cycles_made_after_it_are_still_collected() -> None:
    collector.tune()

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a
    del a, b
    assert gc.collect() >= 2
