"""antidote.testing tells the truth: the same handler, run by the real consumer (Kafka, Spark,
retry cycles) and by `antidote.testing` in-process, reaches the same outcome for every message,
with the same records: the sink's output, each retry record and each quarantined record with
the same headers (but the times and the stack's frames, which the run's clock and the worker's
call site set)."""

from __future__ import annotations

import json

from antidote_api import headers as names
from antidote_api.consumer import QueueConsumerSpec
from antidote_api.policy import PoisonPolicy
from antidote_api.semantics import resolve
from antidote_api.wire import ExitCode
from antidote.testing import message, run_all

from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce, read_all

HANDLER = "tests.integration.handlers_testing:handle"
POLICY = PoisonPolicy.model_validate({"metadata": {"name": "truth"}, "spec": {
    "retries": {"immediate": 1, "cycles": 2, "cycleDelay": "1s", "backoff": 2, "maxCycleDelay": "3s",
                "nonRetryable": ["Declined"]},
    "validation": {"format": "json", "jsonSchema": {"type": "object", "required": ["do"]}},
    "nativeHeaders": ["Connect"]}})
CONSUMER = "tests/antidote-testing"
# Set by the clock or by where the call was made, not by the outcome.
TIMES = {names.FIRST_FAILURE, names.LAST_FAILURE, names.DUE}
STACKS = {names.ERROR_STACK, names.CONNECT_STACK}


def _comparable(headers) -> dict[str, str | None]:
    out = {}
    for k, v in headers:
        text = None if v is None else v.decode()
        if k in STACKS:  # its exception line: the frames above differ (the inline first call)
            text = text.rstrip("\n").rsplit("\n", 1)[-1]
        if k not in TIMES:
            out[k] = text
    return out


def _at(records, offset: int):
    found = [r for r in records if dict(r.headers).get(names.ORIGINAL_OFFSET) == str(offset).encode()]
    assert len(found) == 1, f"offset {offset}: {len(found)} records"
    return found[0]


def test_the_real_consumer_does_what_antidote_testing_predicts(
        spark, kafka_bootstrap, topic_factory, tmp_path) -> None:
    source, sink = topic_factory(), topic_factory("-out")
    todo = ["ok", "fail-3", "bad", "declined", "never", "later"]
    produce(kafka_bootstrap, source, [(b"k-" + d.encode(), json.dumps({"do": d}).encode(), [("trace", d.encode())])
                                      for d in todo] + [(b"k-invalid", b"not json", None)])
    qc = QueueConsumerSpec.model_validate({
        "policyRef": {"name": "truth"}, "handler": HANDLER,
        "source": {"kafka": {"bootstrapServers": kafka_bootstrap, "topic": source}},
        "sink": {"kafka": {"topic": sink}},
        "checkpoint": {"location": str(tmp_path / "ckpt")}})
    s = resolve(qc, POLICY.spec, namespace="tests", name="antidote-testing")

    # The prediction, from the records as Kafka holds them (their offsets and timestamps).
    predicted = {r.offset: run_all(HANDLER, message(r.value, key=r.key, headers=r.headers, topic=r.topic,
                                                    partition=r.partition, offset=r.offset,
                                                    timestamp=r.timestamp), POLICY, consumer=CONSUMER)
                 for r in read_all(kafka_bootstrap, source)}
    outcomes = {json.loads(p[0].value)["do"] if p[0].value != b"not json" else "invalid":
                [x.outcome for x in p] for p in predicted.values()}
    assert outcomes == {"ok": ["processed"], "fail-3": ["retried", "processed"],
                        "bad": ["retried", "retried", "moved"], "declined": ["moved"],
                        "never": ["moved"], "later": ["retried", "retried", "moved"], "invalid": ["moved"]}

    code, _ = cu.run(spark, s)
    assert code == ExitCode.OK

    out = read_all(kafka_bootstrap, sink)
    retries = [read_all(kafka_bootstrap, t, missing_ok=True) for t in s.topics.retry]
    poison = read_all(kafka_bootstrap, s.topics.poison)
    assert read_all(kafka_bootstrap, s.topics.dlq, missing_ok=True) == []
    processed = {p[-1].output for p in predicted.values() if p[-1].processed}
    assert sorted(r.value for r in out) == sorted(processed)  # the handler's outputs, byte for byte
    assert len(poison) == sum(p[-1].outcome == "moved" for p in predicted.values())
    assert [len(r) for r in retries] == [sum(len(p) > k + 1 for p in predicted.values()) for k in range(2)]
    for offset, passes in predicted.items():
        for p in passes:
            if p.processed:
                continue
            written = poison if p.outcome == "moved" else retries[p.cycle]
            assert p.topic == (s.topics.poison if p.outcome == "moved" else s.topics.retry[p.cycle])
            real = _at(written, offset)
            assert (real.key, real.value) == (p.key, p.value)
            assert _comparable(real.headers) == _comparable(p.headers), f"offset {offset}, {p.outcome} in cycle {p.cycle}"
            if p.retried:  # due when the settle committed it: at least the predicted delay later
                hdrs = dict(real.headers)
                waited = int(hdrs[names.DUE]) - int(hdrs[names.LAST_FAILURE])
                assert p.delay_ms <= waited < p.delay_ms + 30_000, (offset, waited, p.delay_ms)
