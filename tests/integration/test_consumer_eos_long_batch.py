"""A batch that outlives the sink's transaction timeout (docs/consumer.md, "Exactly-once to a
Kafka sink"): no transaction spans the handler, so a task whose handler calls take longer in
all than `transaction.timeout.ms` commits its outputs in chunks while it runs, and a SIGKILL
after that time, then a new run, still writes every output exactly once.

Were a task's outputs one transaction, the broker would abort it at the timeout and fence
the producer: the batch would fail and be replayed, and no output would be readable (by a
read_committed reader) before the batch's end."""

from __future__ import annotations

from collections import Counter

import pytest

from antidote_api.names import ledger_topic
from antidote_consumer.driver.ledger import load_state
from antidote_consumer.worker.txn_writer import TRANSACTION_TIMEOUT_MS

from antidote_testkit import consumers as cu
from antidote_testkit.consumers import start
from antidote_testkit.kafka_io import produce, read_all
from .cut_short import abort_open_transaction
from .test_consumer_process import exited, kill9, wait_until

DELAY_S = 1.0  # each handler call; one partition's task runs PER_PARTITION of them in a row
PER_PARTITION = 80
POLICY = {"retries": {"immediate": 0, "cycles": 0}}


@pytest.mark.slow  # `make test-slow` (docs/testing.md): one batch must last over 60 s
def test_a_batch_longer_than_the_transaction_timeout_commits_as_it_goes_and_survives_a_sigkill(
        stack, kafka_bootstrap, topic_factory, tmp_path, calls_dir) -> None:
    source, sink = topic_factory(partitions=2), topic_factory("-out")
    for p in (0, 1):
        produce(kafka_bootstrap, source, [(b"k%d" % i, b"p%d m%d" % (p, i), None) for i in range(PER_PARTITION)],
                partition=p)
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy=POLICY, name="eoslong")
    args = cu.write_manifests(tmp_path, name="eoslong", namespace="tests", bootstrap=kafka_bootstrap,
                              source=source, handler="tests.integration.handlers:slow_upper", policy=POLICY,
                              sink=sink, max_batch=2 * PER_PARTITION)
    log = tmp_path / "consumer.log"
    ledger = ledger_topic(source, s.namespace, s.consumer)
    proc = start(stack, calls_dir, log, args, ANTIDOTE_TEST_DELAY=str(DELAY_S))

    def past_the_timeout() -> bool:
        # The one batch is still running (nothing settled: no position yet), its handler
        # calls have gone on for longer than a transaction may stay open, and outputs of it
        # are already readable by a read_committed reader: committed while the task runs.
        times = [t for _, t in cu.call_log(calls_dir, source)]
        if not times or times[-1] - times[0] <= TRANSACTION_TIMEOUT_MS / 1000 + 2:
            return False
        if any(load_state(kafka_bootstrap, ledger).positions.values()):
            pytest.fail("the batch settled before it outlived the transaction timeout: "
                        "raise PER_PARTITION or DELAY_S")
        return bool(read_all(kafka_bootstrap, sink, missing_ok=True))
    wait_until(past_the_timeout, 300, proc, log, "a batch past the transaction timeout, outputs committed")
    kill9(proc)
    abort_open_transaction(kafka_bootstrap, s)
    before = Counter(r.value for r in read_all(kafka_bootstrap, sink))
    assert max(before.values()) == 1
    calls_before = sum(cu.calls(calls_dir, source).values())

    proc = start(stack, calls_dir, log, [*args, "--until-idle"], ANTIDOTE_TEST_DELAY="0.01")
    assert exited(proc, 300) == 0, log.read_text()[-3000:]

    outputs = Counter(r.value for r in read_all(kafka_bootstrap, sink))
    expected = Counter(b"P%d M%d" % (p, i) for p in (0, 1) for i in range(PER_PARTITION))
    assert outputs == expected, {v: c for v, c in outputs.items() if c != 1}
    # The new run passed over what the killed one committed: it called the handler only for
    # the rest (those whose outputs were not committed yet), never for a committed output.
    calls_after = sum(cu.calls(calls_dir, source).values()) - calls_before
    assert calls_after <= 2 * PER_PARTITION - len(before)
    assert load_state(kafka_bootstrap, ledger).counts["processed"] == 2 * PER_PARTITION
