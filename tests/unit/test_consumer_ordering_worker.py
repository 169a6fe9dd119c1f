"""ordering Key in the executor's hot loop (`worker.executor.process`): which rows run, which
are held, and the chains a task hands back; without Spark or Kafka."""

from __future__ import annotations

import json

import pyarrow as pa

from antidote_consumer.kafka import headers as h
from antidote_consumer.worker.executor import INPUT_FIELDS, WorkerConfig, arrow_schema, process
from antidote_consumer.worker.message import Message
from antidote_consumer.worker.ordering import key_text

seen: list[bytes] = []


def handler(msg: Message):
    """`bad:*` fails; anything else succeeds. Records the values it ran, in order."""
    seen.append(msg.value)
    if msg.value.startswith(b"bad"):
        raise ValueError("bad")
    return msg.value


def cfg(chains: dict | None = None, max_held: int = 10) -> WorkerConfig:
    return WorkerConfig(handler=f"{__name__}:handler", source_topic="src", immediate=0, cycles=2,
                        non_retryable=frozenset(), validation=None, sink_kafka=None,
                        emit_outputs=True, max_held=max_held, chains=json.dumps(chains or {}),
                        delays=(1000, 5000))


def run(config: WorkerConfig, rows: list[tuple]) -> list[dict]:
    """rows: (key, value, topic, partition, offset, headers)."""
    seen.clear()
    cols = {"key": [r[0] for r in rows], "value": [r[1] for r in rows], "topic": [r[2] for r in rows],
            "partition": [r[3] for r in rows], "offset": [r[4] for r in rows],
            "ts": [0] * len(rows), "headers": [r[5] for r in rows]}
    batch = pa.RecordBatch.from_pydict(cols, schema=arrow_schema(INPUT_FIELDS))
    return [r for b in process(config, iter([batch])) for r in b.to_pylist()]


def retry_headers(offset: int, cycle: int, held: bool) -> list[dict]:
    hdrs = h.failure_headers(origin=h.Origin("src", 0, offset, 0), attempts=0 if held else 1,
                             cycle=cycle, first_failure=1, last_failure=1, reason=None,
                             error_class=None, error_message=None, stack=None, consumer="ns/c",
                             policy="p", due=1)
    if held:
        hdrs.append((h.HELD, b"1"))
    return [{"key": k, "value": v} for k, v in hdrs]


def test_a_failed_message_holds_its_key_and_only_its_key() -> None:
    rows = run(cfg(), [(b"a", b"bad:0", "src", 0, 0, None), (b"a", b"ok:1", "src", 0, 1, None),
                       (b"b", b"ok:2", "src", 0, 2, None), (None, b"bad:3", "src", 0, 3, None),
                       (None, b"ok:4", "src", 0, 4, None), (b"a", b"ok:5", "src", 0, 5, None)])
    assert seen == [b"bad:0", b"ok:2", b"bad:3", b"ok:4"]  # a's later messages did not run
    kinds = [(r["kind"], r["offset"], r["cycle"]) for r in rows
             if r["kind"] in ("retry", "held", "ok", "final")]
    assert kinds == [("retry", 0, 0), ("held", 1, 1), ("ok", 2, 0), ("retry", 3, 0), ("ok", 4, 0),
                     ("held", 5, 1)]
    held = [r for r in rows if r["kind"] == "held"]
    assert {r["attempts"] for r in held} == {0}
    (chains,) = [r for r in rows if r["kind"] == "chains"]
    assert chains["partition"] == 0
    chain = json.loads(chains["error_message"])[key_text(b"a")]
    assert chain["front"] == 0 and chain["cycle"] == 1 and [m[0] for m in chain["held"]] == [1, 5]
    # Held rows are due with the front (the due the worker computed for it).
    assert {r["last_failure"] for r in held} == {chain["due"]}


def test_held_messages_run_in_order_once_the_front_succeeds() -> None:
    chains = {"0": {key_text(b"a"): {"cycle": 1, "due": 1, "front": 0, "held": [[1, 1, 1], [5, 1, 1]]}}}
    rows = run(cfg(chains), [(b"a", b"ok:0", "retry-1", 0, 7, retry_headers(0, 1, held=False)),
                             (b"a", b"ok:1", "retry-1", 0, 8, retry_headers(1, 1, held=True)),
                             (b"a", b"ok:5", "retry-1", 0, 9, retry_headers(5, 1, held=True))])
    assert seen == [b"ok:0", b"ok:1", b"ok:5"]
    oks = [r for r in rows if r["kind"] == "ok"]
    # A released message is a first delivery: cycle 0, one attempt.
    assert [(r["ooffset"], r["cycle"], r["attempts"]) for r in oks] == [(0, 1, 2), (1, 0, 1), (5, 0, 1)]
    (c,) = [r for r in rows if r["kind"] == "chains"]
    assert json.loads(c["error_message"]) == {}


def test_held_messages_follow_a_front_that_fails_again() -> None:
    chains = {"0": {key_text(b"a"): {"cycle": 1, "due": 1, "front": 0, "held": [[1, 1, 1]]}}}
    rows = run(cfg(chains), [(b"a", b"bad:0", "retry-1", 0, 7, retry_headers(0, 1, held=False)),
                             (b"a", b"ok:1", "retry-1", 0, 8, retry_headers(1, 1, held=True))])
    assert seen == [b"bad:0"]
    assert [(r["kind"], r["ooffset"], r["cycle"]) for r in rows if r["kind"] in ("retry", "held")] == [
        ("retry", 0, 1), ("held", 1, 2)]


def test_past_the_bound_the_message_overflows() -> None:
    rows = run(cfg(max_held=1), [(b"a", b"bad:0", "src", 0, 0, None), (b"a", b"ok:1", "src", 0, 1, None),
                                 (b"a", b"ok:2", "src", 0, 2, None)])
    assert seen == [b"bad:0"]
    (over,) = [r for r in rows if r["kind"] == "overflow"]
    assert (over["offset"], over["reason"]) == (2, "held-overflow")


def test_without_ordering_nothing_is_held() -> None:
    rows = run(cfg(max_held=0), [(b"a", b"bad:0", "src", 0, 0, None), (b"a", b"ok:1", "src", 0, 1, None)])
    assert seen == [b"bad:0", b"ok:1"]
    assert not [r for r in rows if r["kind"] in ("held", "chains")]
