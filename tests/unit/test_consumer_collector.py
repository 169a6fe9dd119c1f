"""The collector's settings while an Antidote task runs in a Python worker (worker.collector)."""

from __future__ import annotations

import gc

import pytest

from antidote_consumer.worker import collector


def task(n: int, seen: list):
    for i in range(n):
        seen.append((gc.get_threshold()[0], gc.get_freeze_count() > 0))
        yield i


@pytest.fixture(autouse=True)
def clean_collector():
    thresholds = gc.get_threshold()
    gc.unfreeze()
    yield
    gc.set_threshold(*thresholds)
    gc.unfreeze()


def test_tuned_while_the_task_runs_and_put_back_after() -> None:
    before = gc.get_threshold()
    seen: list = []
    assert list(collector.tuned(task)(3, seen)) == [0, 1, 2]
    assert seen == [(collector.YOUNG_EVERY, True)] * 3
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_put_back_when_the_task_is_abandoned_or_fails() -> None:
    before = gc.get_threshold()
    it = collector.tuned(task)(10, [])
    next(it)
    it.close()  # Spark stops reading (a task killed, a limit reached)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0

    def failing():
        yield 1
        raise ValueError("handler import failed")

    it = collector.tuned(failing)()
    next(it)
    with pytest.raises(ValueError):
        next(it)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_the_wrapped_task_pickles_as_spark_ships_it() -> None:
    import functools

    from pyspark import cloudpickle

    from antidote_consumer.worker.executor import process

    fn = cloudpickle.loads(cloudpickle.dumps(functools.partial(collector.tuned(process), "cfg")))
    assert fn.func.__name__ == "process" and fn.args == ("cfg",)
