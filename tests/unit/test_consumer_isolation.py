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
