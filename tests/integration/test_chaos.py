"""A small `make chaos` inside `make test`: SIGKILLs of the consumer process at random moments,
some with the checkpoint lost too, over a stream with poison and flaky messages (which
succeed on their 4th attempt) going through retry cycles; then every source offset must have
exactly one outcome. The full run (100 kills over 20,000 messages) is `.venv/bin/python
benchmarks/chaos.py`."""

from __future__ import annotations

import pytest
from benchmarks.chaos import run_chaos


@pytest.mark.slow  # `make test-slow` (docs/testing.md): a small chaos run, ~165 s with its stack; `make chaos` is the full one
def test_random_sigkills_and_lost_checkpoints_lose_nothing_and_quarantine_nothing_twice(
        stack, tmp_path) -> None:
    chaos, audit = run_chaos(stack, messages=2000, kills=4, poison_rate=0.01, seed=20261123,
                             checkpoint_loss=0.4, max_batch=300, jitter=3.0,
                             folder=tmp_path)
    print(chaos, *audit.lines(), sep="\n")
    assert chaos.kills + chaos.exited_before_kill + chaos.resumes == 4 and chaos.kills >= 3
    assert chaos.checkpoints_lost >= 1
    assert audit.offsets == 2000 and audit.poison_expected == 20 and audit.flaky_expected == 20
    assert (audit.lost, audit.duplicated_quarantine, audit.wrong_attempts, audit.both,
            audit.flaky_wrong) == ([], [], [], [], [])
    assert audit.processed + audit.quarantined == 2000
