"""ordering Key with one key holding maxHeldPerKey messages (issue 43, item 9): the
partition's chains outgrow the broker's 1 MB record limit (one key holding 36,200 messages
did, measured), and the ledger commits them in parts instead of refusing every commit of the
batch and disabling the queue."""

from __future__ import annotations

import urllib.request

from antidote_api.names import ledger_names
from antidote_consumer.driver.held_parts import PARTS
from antidote_consumer.driver.ledger import load_state
from antidote_consumer.worker.ordering import held_count
from antidote_devstack.procs import free_port

from antidote_testkit import consumers as cu
from antidote_testkit.consumers import start
from antidote_testkit.kafka_io import produce, read_all
from .test_consumer_process import kill9, wait_until

MAX_HELD = 40_000  # x ~29 bytes a held message: ~1.16 MB of chains in one partition
# The worktree's packages first (the venv's editable install may point at another checkout).
PYTHONPATH = cu.CODE_PATH


def _held_metric(port: int) -> float:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("antidote_held_messages{"):
                    return float(line.rsplit(" ", 1)[1])
    except OSError:
        pass  # not serving yet
    return 0.0


def test_a_key_holding_max_held_per_key_messages_commits_its_chains(
        stack, kafka_bootstrap, topic_factory, tmp_path, calls_dir) -> None:
    source, sink = topic_factory(), topic_factory("-out")
    # The key's first message fails once (parked in retry-1 for 10 minutes); the next
    # MAX_HELD are held behind it; one more is past the bound (held-overflow).
    # And 100 messages of other keys, processed: held messages count toward the failure
    # ratio, which stays below its threshold of 1.0 so (as in test_consumer_ordering).
    values = [b"front flaky-1"] + [b"m%d" % i for i in range(MAX_HELD)] + [b"overflow"]
    records = [(b"customer-42", v, None) for v in values] + [(b"other-%d" % i, b"ok", None) for i in range(100)]
    produce(kafka_bootstrap, source, records)
    policy = {"retries": {"immediate": 0, "cycles": 1, "cycleDelay": "10m"},
              "queueDisable": {"failureRatio": {"threshold": 1.0}}}
    args = cu.write_manifests(tmp_path, name="held", namespace="tests", bootstrap=kafka_bootstrap,
                              source=source, handler="tests.integration.handlers:flaky_upper",
                              policy=policy, sink=sink, max_batch=len(records),
                              extra={"ordering": "Key", "maxHeldPerKey": MAX_HELD})
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy=policy, name="held")
    log = tmp_path / "consumer.log"
    port = free_port()
    proc = start(stack, calls_dir, log, [*args, "--metrics-port", str(port)], PYTHONPATH=PYTHONPATH)
    try:
        wait_until(lambda: _held_metric(port) == MAX_HELD, 600, proc, log,
                   f"{MAX_HELD} held messages committed")
    finally:
        kill9(proc)
    ledger = ledger_names(s).topic
    state = load_state(kafka_bootstrap, ledger)  # as a restarted driver reads it: parts joined
    assert held_count(state.held) == MAX_HELD
    (chain,) = state.held["0"].values()
    assert chain["front"] == 0 and [o for o, _c, _d in chain["held"]] == list(range(1, MAX_HELD + 1))
    assert state.positions[f"{source}:0"] == len(records)
    # It was committed in parts, none near the broker's limit.
    records = {r.key.decode(): r.value for r in read_all(kafka_bootstrap, ledger) if r.key}
    assert PARTS.encode() in records["held:0"]
    assert max(len(v) for v in records.values()) < 300 * 1024
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    assert set(poison) == {(0, MAX_HELD + 1)}
    assert poison[(0, MAX_HELD + 1)][1]["antidote.reason"] == "held-overflow"
