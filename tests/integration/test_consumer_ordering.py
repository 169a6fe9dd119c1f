"""spec.ordering Key on the real stack: `antidote consumer` as a process over many keys, some
messages poison, some failing once; for every key the sink's order is the source order of
its processed messages, and a SIGKILL while messages are held changes nothing."""

from __future__ import annotations

import random

import pytest

from antidote_consumer.driver.ledger import load_state

from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce, read_all
from .test_consumer_process import finish, kill9, start, wait_until

# A third of the messages fail at least once: not a systemic failure here.
POLICY = {"retries": {"immediate": 0, "cycles": 2, "cycleDelay": "2s"},
          "queueDisable": {"failureRatio": {"threshold": 1.0}}}


def held_records(bootstrap: str, topic: str) -> int:
    return sum(1 for r in read_all(bootstrap, topic, missing_ok=True)
               if any(k == "antidote.held" for k, _ in r.headers or ()))


@pytest.mark.slow  # `make test-slow` (docs/testing.md)
def test_key_order_is_kept_through_retries_and_a_sigkill(stack, kafka_bootstrap, topic_factory,
                                                         tmp_path, calls_dir) -> None:
    source, sink = topic_factory(partitions=2), topic_factory("-out")
    rnd = random.Random(17)
    n, keys = 240, 12
    records = []
    for i in range(n):
        kind = rnd.choice(["ok"] * 8 + ["flaky-1"] * 3 + ["poison"])
        key = None if i % 40 == 39 else b"key-%d" % rnd.randrange(keys)  # some null keys too
        records.append((key, b"m%03d %s" % (i, kind.encode()), None))
    produce(kafka_bootstrap, source, records)
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy=POLICY)
    args = cu.write_manifests(tmp_path, name="proc", namespace="tests", bootstrap=kafka_bootstrap,
                              source=source, handler="tests.integration.handlers:flaky_upper",
                              policy=POLICY, sink=sink, max_batch=30,
                              extra={"ordering": "Key", "maxHeldPerKey": 1000})
    log = tmp_path / "consumer.log"

    proc = start(stack, calls_dir, log, args)
    # Killed while messages are held behind their key's message in retry-1 (and the source
    # is still being read: 30 a batch).
    wait_until(lambda: held_records(kafka_bootstrap, s.topics.retry[0]) >= 10, 180, proc, log,
               "10 held records in retry-1")
    kill9(proc)
    finish(stack, calls_dir, log, args)

    src = read_all(kafka_bootstrap, source)
    assert len(src) == n
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)  # fails on a duplicate
    bad = {(r.partition, r.offset) for r in src if b"poison" in r.value}
    assert set(poison) == bad
    assert {h["antidote.reason"] for _, h in poison.values()} == {"max-attempts"}
    outputs = read_all(kafka_bootstrap, sink)
    assert {r.value for r in outputs} == {r.value.upper() for r in src if b"poison" not in r.value}
    # Per key: the outputs (first occurrences: a batch cut by the kill ran again, at least
    # once) are in the source order of the key's processed messages.
    for key in {r.key for r in src if r.key is not None}:
        expected = [r.value.upper() for r in sorted(src, key=lambda r: (r.partition, r.offset))
                    if r.key == key and b"poison" not in r.value]
        got = list(dict.fromkeys(r.value for r in outputs if r.key == key))
        assert got == expected, key
    # The holding really happened (without it, a message failing once is overtaken by the
    # key's next one), and nothing is held any more.
    assert held_records(kafka_bootstrap, s.topics.retry[0]) >= 10
    state = load_state(kafka_bootstrap, f"{source}.ledger-tests.proc")
    assert state.held and all(chains == {} for chains in state.held.values()), state.held


def test_a_key_past_max_held_per_key_moves_its_further_messages_to_poison(
        stack, kafka_bootstrap, topic_factory, tmp_path, calls_dir) -> None:
    """maxHeldPerKey 1: while k's first message is in its retry cycles, k's next message is
    held and the ones after it go to the poison topic with reason held-overflow (never
    dropped, never a second outcome); the other key is neither held nor moved."""
    source, sink = topic_factory(partitions=1), topic_factory("-out")
    values = [(b"k", b"k0 poison"), (b"j", b"j0 ok"), (b"k", b"k1 ok"), (b"j", b"j1 ok"),
              (b"k", b"k2 ok"), (b"k", b"k3 ok"), (b"j", b"j2 ok")]
    produce(kafka_bootstrap, source, [(k, v, None) for k, v in values])
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy=POLICY)
    args = cu.write_manifests(tmp_path, name="bound", namespace="tests", bootstrap=kafka_bootstrap,
                              source=source, handler="tests.integration.handlers:flaky_upper",
                              policy=POLICY, sink=sink, max_batch=30,
                              extra={"ordering": "Key", "maxHeldPerKey": 1})
    finish(stack, calls_dir, tmp_path / "consumer.log", args)

    src = {r.value: (r.partition, r.offset) for r in read_all(kafka_bootstrap, source)}
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)  # fails on a duplicate
    reasons = {at: h["antidote.reason"] for at, (_, h) in poison.items()}
    assert reasons == {src[b"k0 poison"]: "max-attempts", src[b"k2 ok"]: "held-overflow",
                       src[b"k3 ok"]: "held-overflow"}
    outputs = [r.value for r in read_all(kafka_bootstrap, sink)]
    assert sorted(set(outputs)) == [b"J0 OK", b"J1 OK", b"J2 OK", b"K1 OK"]
    # k1 waited for k0's outcome: it was held (a record in retry-1), then processed.
    assert held_records(kafka_bootstrap, s.topics.retry[0]) >= 1
    state = load_state(kafka_bootstrap, f"{source}.ledger-tests.bound")
    assert all(chains == {} for chains in state.held.values()), state.held


def test_messages_held_behind_one_failing_key_do_not_trip_the_failure_ratio(
        stack, kafka_bootstrap, topic_factory, tmp_path, calls_dir) -> None:
    """One key's first message fails and 30 of its messages are held behind it, beside 10
    messages of other keys. With failureRatio 0.5 over 10 messages the batch is 1 failure in
    11 attempted messages, not 31 in 41: the held ones were never attempted (before, they
    counted as failures and the queue was disabled, SystemicFailure, for one bad key)."""
    source, sink = topic_factory(partitions=1), topic_factory("-out")
    values = [(b"k", b"k0 poison")] + [(b"k", b"k%d ok" % i) for i in range(1, 31)]
    values += [(b"j%d" % i, b"j%d ok" % i) for i in range(10)]
    produce(kafka_bootstrap, source, [(k, v, None) for k, v in values])
    policy = {"retries": {"immediate": 0, "cycles": 1, "cycleDelay": "1s"},
              "queueDisable": {"failureRatio": {"threshold": 0.5, "minMessages": 10}}}
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy=policy)
    args = cu.write_manifests(tmp_path, name="ratio", namespace="tests", bootstrap=kafka_bootstrap,
                              source=source, handler="tests.integration.handlers:flaky_upper",
                              policy=policy, sink=sink, max_batch=100,
                              extra={"ordering": "Key", "maxHeldPerKey": 1000})
    finish(stack, calls_dir, tmp_path / "consumer.log", args)

    src = {r.value: (r.partition, r.offset) for r in read_all(kafka_bootstrap, source)}
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)  # fails on a duplicate
    assert {at: h["antidote.reason"] for at, (_, h) in poison.items()} == {src[b"k0 poison"]: "max-attempts"}
    outputs = [r.value for r in read_all(kafka_bootstrap, sink)]
    assert sorted(set(outputs)) == sorted(v.upper() for _, v in values if b"poison" not in v)
    # The key's messages were held behind k0 (records in retry-1), then processed in order.
    assert held_records(kafka_bootstrap, s.topics.retry[0]) >= 1
    assert list(dict.fromkeys(o for o in outputs if o.startswith(b"K"))) == [
        b"K%d OK" % i for i in range(1, 31)]
    state = load_state(kafka_bootstrap, f"{source}.ledger-tests.ratio")
    assert state.disabled is None and all(chains == {} for chains in state.held.values()), state
