"""LocalWorker.warmed: the retry pump's wait for the local worker's start-up, which it does
outside the batch lock so source batches go on meanwhile."""

from concurrent.futures import Future

from antidote_consumer.worker.local import LocalWorker


def test_warmed_is_true_when_no_start_up_was_begun():
    assert LocalWorker().warmed(0) is True


def test_warmed_waits_for_the_start_up_then_forgets_it():
    w = LocalWorker()
    w._warming = f = Future()
    assert w.warmed(0.01) is False
    f.set_result(None)
    assert w.warmed(0.01) is True
    assert w._warming is None


def test_a_failed_start_up_counts_as_ended_for_run_to_report_it():
    w = LocalWorker()
    w._warming = f = Future()
    f.set_exception(ImportError("no module named handlers"))
    assert w.warmed(0.01) is True


def test_a_start_up_cancelled_by_close_counts_as_ended():
    w = LocalWorker()
    w._warming = f = Future()
    f.cancel()
    assert w.warmed(0.01) is True
