"""Small versions of `make chaos`'s other parts (benchmarks/chaos_operator.py and
chaos_restarts.py): SIGKILLs of the operator between actions, and the broker and the API
server crashed and restarted under a running consumer and operator. The restarts use a stack of their own: the session's stack
is shared with the tests running beside them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from antidote_devstack import stack as devstack
from benchmarks.chaos_operator import run_operator_chaos
from benchmarks.chaos_restarts import run_apiserver_restart, run_broker_restart

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[devstack.Stack]:
    state_dir = tmp_path_factory.mktemp("restart-stack")
    s = devstack.up(state_dir)
    try:
        yield s
    finally:
        devstack.down(state_dir)


def test_operator_sigkills_make_no_duplicate_jobs_no_extra_events_and_the_right_state(stack, tmp_path) -> None:
    r = run_operator_chaos(stack, kills=6, seed=20261123, jitter=1.0, folder=tmp_path)
    print(*r.lines(), sep="\n")
    assert r.kills == 6 and r.died_by_itself == 0
    # The deck covers every kind of action within the first six rounds.
    assert set(r.actions) == {"create", "pause", "resume", "drain", "policy"}, r.actions
    assert (r.duplicate_jobs, r.missing_jobs, r.events_beyond_transitions, r.unexpected_events,
            r.wrong_state) == (0, 0, 0, [], [])


@pytest.mark.slow  # `make test-slow` (docs/testing.md): ~40 s; `make chaos` has the broker part
def test_broker_crash_mid_stream_loses_nothing_and_the_consumer_finishes(own_stack, tmp_path) -> None:
    r = run_broker_restart(own_stack, messages=1000, poison_rate=0.01, seed=7, folder=tmp_path,
                           jitter=1.0, down_for=1.0, timeout=300)
    print(*r.lines(), sep="\n")
    assert r.recovered, r.detail
    assert r.outage_seconds > 1.0
    a = r.audit
    assert a is not None and a.offsets == 1000 and a.poison_expected == 10
    assert (a.lost, a.duplicated_quarantine, a.wrong_attempts, a.both) == ([], [], [], [])
    assert a.processed + a.quarantined == 1000


def test_apiserver_crash_mid_reconcile_the_operator_recovers_by_itself(own_stack, tmp_path) -> None:
    r = run_apiserver_restart(own_stack, folder=tmp_path, consumers=3, down_for=1.0, timeout=90)
    print(*r.lines(), sep="\n")
    assert r.recovered, r.detail + "\n" + (tmp_path / "operator.log").read_text()[-3000:]
