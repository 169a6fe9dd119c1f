"""Bisection pins batch-crashing messages on single messages in O(log n) executions."""

from __future__ import annotations

import math

import pytest

from antidote_consumer.driver.isolation import bisect


def runner(bad: set[int]):
    def run(segment):
        return None if bad & set(segment) else list(segment)
    return run


@pytest.mark.parametrize("culprit", [0, 1, 4999, 5000, 9998, 9999, 1234])
def test_one_crashing_message_in_10000_within_30_executions(culprit: int) -> None:
    iso = bisect(range(10_000), runner({culprit}), budget=100)
    assert iso.culprits == [culprit]
    assert sorted(k for r in iso.results for k in r) == [k for k in range(10_000) if k != culprit]
    assert iso.executions <= 30


def test_two_culprits_are_both_found_and_everything_else_succeeds() -> None:
    iso = bisect(range(1000), runner({3, 777}), budget=200)
    assert sorted(iso.culprits) == [3, 777]
    assert sorted(k for r in iso.results for k in r) == [k for k in range(1000) if k not in (3, 777)]


def test_a_transient_failure_is_not_blamed_on_an_innocent_message() -> None:
    calls = {"n": 0}

    def flaky(segment):
        calls["n"] += 1
        return list(segment)  # the whole batch failed once (before bisect); now all succeed

    iso = bisect(range(8), flaky, budget=50)
    assert iso.culprits == []
    assert sorted(k for r in iso.results for k in r) == list(range(8))


def test_budget_is_enforced() -> None:
    with pytest.raises(RuntimeError, match="more than 3 re-executions"):
        bisect(range(1000), runner(set(range(1000))), budget=3)


@pytest.mark.parametrize("n", [2, 3, 10, 1000, 10_000])
def test_one_crasher_costs_at_most_ceil_log2_n_plus_2_wherever_it_is(n: int) -> None:
    # The goal of issue 15: no position of the crasher costs more (the old bisection ran
    # both halves when the left one failed, up to 2 * log2 n).
    bound = math.ceil(math.log2(n)) + 2
    for culprit in range(n) if n <= 1000 else range(0, n, 37):
        iso = bisect(range(n), runner({culprit}), budget=100)
        assert iso.culprits == [culprit]
        assert sorted(k for r in iso.results for k in r) == [k for k in range(n) if k != culprit]
        assert iso.executions <= bound, (culprit, iso.executions)


def test_a_segment_that_succeeded_is_never_run_again() -> None:
    seen: list[int] = []

    def run(segment):
        if {3, 777} & set(segment):
            return None
        seen.extend(segment)
        return list(segment)

    bisect(range(1000), run, budget=200)
    assert sorted(seen) == [k for k in range(1000) if k not in (3, 777)]


# A sink or downstream service that is down fails every run, whatever it holds; one that
# comes back during the bisection must not leave a message blamed for the runs before.

def outage(bad: set[int], failing_runs: int):
    """`runner(bad)`, except that its first `failing_runs` runs fail whatever they hold (an
    outage that ends during the bisection); the batch's own failures came before."""
    calls = {"n": 0}
    inner = runner(bad)

    def run(segment):
        calls["n"] += 1
        return None if calls["n"] <= failing_runs else inner(segment)
    return run


def test_a_message_that_failed_alone_during_an_outage_that_then_ended_is_not_a_culprit() -> None:
    # Issue 43 (5): [0..3], [0, 1] and [0] fail while the sink is down; it is back for what
    # was set aside. The old bisection called 0 a culprit (Drop: an innocent message lost).
    iso = bisect(range(8), outage(set(), failing_runs=3), budget=50)
    assert iso.culprits == [] and iso.undecided == []
    assert iso.cleared == [0]
    assert sorted(k for r in iso.results for k in r) == list(range(8))
    # [0..3], [0, 1], [0], then [1..7] and [0] alone again.
    assert iso.executions == 5
    assert iso.unsettled() is None


def test_a_longer_outage_clears_every_message_it_made_fail_alone() -> None:
    # [0..3] [0,1] [0] [1..7] [1..3] [1] fail: 0 and 1 failed alone, nothing succeeded between.
    iso = bisect(range(8), outage(set(), failing_runs=6), budget=50)
    assert (iso.culprits, iso.cleared, iso.undecided) == ([], [0, 1], [])
    assert sorted(k for r in iso.results for k in r) == list(range(8))


def test_a_real_crasher_is_still_found_when_an_outage_ends_during_the_bisection() -> None:
    iso = bisect(range(8), outage({5}, failing_runs=6), budget=50)
    assert iso.culprits == [5]
    assert iso.cleared == [0, 1]
    assert sorted(k for r in iso.results for k in r) == [k for k in range(8) if k != 5]
    # [1..7] (the outage), [2..7], then [5] alone after [2, 3, 4] succeeded: confirmed
    # without another run of its own. 0 and 1 each run alone once more, at the end.
    assert iso.failures[5] == 3
    assert iso.executions == 12


@pytest.mark.parametrize("n", [1, 2, 3, 8, 13, 64])
def test_no_innocent_message_is_a_culprit_wherever_an_outage_ends(n: int) -> None:
    for bad in (set(), {0}, {n - 1}, {n // 2}, {0, n - 1}):
        for failing_runs in range(0, 4 * n + 2):
            try:
                iso = bisect(range(n), outage(bad, failing_runs), budget=4 * n + 40)
            except RuntimeError:
                continue  # the budget ran out: the queue stops, nothing quarantined
            case = (bad, failing_runs, iso)
            assert set(iso.culprits) <= bad, case
            processed = sorted(k for r in iso.results for k in r)
            assert set(processed).isdisjoint(bad), case
            if iso.unsettled() is None:
                # Settled: every message is processed or a culprit, once.
                assert sorted([*processed, *iso.culprits]) == list(range(n)), case
                assert set(iso.culprits) == bad, case
            else:
                # Not settled: nothing is quarantined (batches.py stops the queue).
                assert iso.undecided or not iso.results, case


def test_a_message_that_fails_alone_with_nothing_succeeding_after_is_undecided() -> None:
    # [0..3] succeeds, then the sink goes down for good: [4, 5] fails, [4] fails alone
    # (nothing succeeded since [4, 5]), then what was set aside, [5..7], and its parts: 5, 6
    # and 7 fail alone too. None is a known culprit.
    def run(segment):
        return list(segment) if list(segment) == [0, 1, 2, 3] else None

    iso = bisect(range(8), run, budget=50)
    assert (iso.culprits, iso.undecided) == ([], [4, 5, 6, 7])
    reason = iso.unsettled(name=lambda k: f"m{k}")
    assert reason is not None and reason.startswith("message(s) m4, m5, m6, m7 failed on their own")


def test_an_outage_for_the_whole_bisection_quarantines_nothing() -> None:
    iso = bisect(range(8), runner(set(range(8))), budget=50)
    assert iso.results == [] and iso.culprits == []
    assert iso.unsettled() == "no part of the batch succeeds"


def test_a_single_message_batch_is_never_blamed_on_the_batch_failures_alone() -> None:
    # Its batch failed (the rollbacks), so it failed on its own, but nothing succeeded since.
    iso = bisect(["only"], runner(set()), budget=5)
    assert iso.executions == 0 and iso.culprits == [] and iso.undecided == ["only"]
    assert iso.unsettled() == "no part of the batch succeeds"
