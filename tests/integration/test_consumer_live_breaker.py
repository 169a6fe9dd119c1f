"""The systemic-failure breaker judged while the batch runs (issue 46 item 1), on Kafka and
local Spark: a downstream whose calls hang and then fail disables the queue within a minute
of the first call, abandoning the batch's running attempts, quarantining nothing and leaving
the batch unconsumed; resumed, every message is processed exactly once. A healthy batch with
a few failing messages is judged live too, and not disabled."""

from __future__ import annotations

import logging
import time
from collections import Counter

from antidote_api.wire import ExitCode

from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce, read_all


class DisabledAt(logging.Handler):
    """When the consumer logged that it disabled its queue (the log record's own time)."""

    def __init__(self) -> None:
        super().__init__()
        self.at: float | None = None
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        self.lines.append(line)
        if self.at is None and line.startswith("queue disabled (SystemicFailure)"):
            self.at = record.created


def test_a_downstream_whose_calls_hang_disables_the_queue_within_a_minute(
        spark, kafka_bootstrap, topic_factory, tmp_path, calls_dir) -> None:
    source, sink = topic_factory(partitions=2), topic_factory("-out")
    n = 300
    produce(kafka_bootstrap, source, [(b"k%d" % i, b"m%d" % i, None) for i in range(n)])
    # Three attempts a message (immediate 2), each hanging 4 s: judged at the batch's end,
    # 300 messages x 12 s on two task slots took 30 minutes before the queue was disabled.
    policy = {"retries": {"immediate": 2, "cycles": 1, "cycleDelay": "1s"},
              "queueDisable": {"failureRatio": {"threshold": 0.5, "window": "5m", "minMessages": 10}}}
    s = cu.settings(kafka_bootstrap, source, tmp_path, handler="hang_then_fail", sink=sink, policy=policy,
                    name="live-breaker", max_batch=n)
    log = logging.getLogger("antidote.consumer")
    seen = DisabledAt()
    log.addHandler(seen)
    try:
        code, m = cu.run(spark, s, deadline=600)
    finally:
        log.removeHandler(seen)
    returned = time.time()

    calls = cu.call_log(calls_dir, source)
    assert code == ExitCode.SYSTEMIC_FAILURE, seen.lines[-5:]
    assert cu.metric(m, "antidote_queue_disabled", reason="SystemicFailure") == 1
    assert seen.at is not None
    first = min(t for _, t in calls)
    took, exited = seen.at - first, returned - first
    print(f"disabled {took:.1f}s after the first handler call, returned after {exited:.1f}s; "
          f"{len(calls)} calls on {len(set(w for w, _ in calls))} messages")
    assert took < 60, f"disabled {took:.1f}s after the first call"
    # The running attempts were abandoned: far fewer calls than the batch's 900 attempts.
    assert len(calls) < 100
    # Nothing quarantined, nothing retried, nothing written.
    for topic in (s.topics.poison, s.topics.dlq, *s.topics.retry, sink):
        assert read_all(kafka_bootstrap, topic, missing_ok=True) == [], topic
    assert cu.metric(m, "antidote_messages_total", outcome="processed") == 0

    # The downstream fixed, the queue resumed: every message once, the batch whole.
    (calls_dir / f"{source}.fixed").touch()
    before = len(calls)
    code, m = cu.run(spark, cu.resumed(s), deadline=600)
    assert code == ExitCode.OK
    out = Counter(r.value for r in read_all(kafka_bootstrap, sink))  # read_committed
    assert out == Counter(b"M%d" % i for i in range(n))
    after = Counter(w for w, _ in cu.call_log(calls_dir, source)[before:])
    assert len(after) == n and set(after.values()) == {1}
    for topic in (s.topics.poison, s.topics.dlq, *s.topics.retry):
        assert read_all(kafka_bootstrap, topic, missing_ok=True) == [], topic


def test_a_healthy_batch_with_a_few_failing_messages_is_judged_live_and_not_disabled(
        spark, kafka_bootstrap, topic_factory, tmp_path) -> None:
    source, sink = topic_factory(partitions=2), topic_factory("-out")
    n = 300
    poison = {i for i in range(n) if i % 37 == 20}  # 8, none among the first 20
    produce(kafka_bootstrap, source, [(b"k%d" % i, b"poison" if i in poison else b"m%d" % i, None)
                                      for i in range(n)])
    policy = {"retries": {"immediate": 0, "cycles": 0},
              "queueDisable": {"failureRatio": {"threshold": 0.5, "window": "5m", "minMessages": 10}}}
    s = cu.settings(kafka_bootstrap, source, tmp_path, handler="slow_upper", sink=sink, policy=policy,
                    name="live-healthy", max_batch=n)
    breakers = []
    code, m = cu.run(spark, s, recovered=lambda c: breakers.append(c.runtime.live))

    assert code == ExitCode.OK
    (live,) = breakers
    # The tasks reported while they ran (the first failing message's report, at least), and
    # the judge saw the failures; the ratio stayed far below the threshold.
    assert live.judged_reports > 0
    assert 1 <= live.most_failed[0] <= len(poison) and live.most_failed[1] >= 10, live.most_failed
    assert cu.metric(m, "antidote_queue_disabled", reason="SystemicFailure") == 0
    assert len(cu.quarantined(kafka_bootstrap, s.topics.poison)) == len(poison)
    assert len(read_all(kafka_bootstrap, sink)) == n - len(poison)
