"""Building effective settings and running a consumer in-process, or as a process, for tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import yaml

from antidote_api.consumer import QueueConsumerSpec
from antidote_api.policy import PoisonPolicySpec
from antidote_api.semantics import EffectiveSettings, resolve
from antidote_devstack.paths import code_path

from antidote_testkit.kafka_io import read_all

REPO = Path(__file__).resolve().parents[2]
# For processes started from the checkout (a worktree runs its own code): the layers' folders.
CODE_PATH = code_path()


def run(spark, s: EffectiveSettings, retry_sleep: float = 0.1, deadline: float = 300, recovered=None):
    """Run a consumer in this process until idle; (exit code, its Metrics). A consumer not
    idle after `deadline` seconds is stopped (as by SIGTERM) and the test fails, instead of
    hanging until pytest's timeout. `recovered(consumer)` runs once its ledger is loaded."""
    import threading

    from antidote_consumer.driver.metrics import Metrics
    from antidote_consumer.driver.consumer import Consumer

    metrics = Metrics(s.namespace, s.consumer)
    consumer = Consumer(s, spark, metrics, trigger_interval=0.2)
    consumer.runtime.retry_sleep = retry_sleep
    fired: list[bool] = []
    timer = threading.Timer(deadline, lambda: (fired.append(True), consumer.request_stop()))
    timer.daemon = True
    timer.start()
    try:
        code = consumer.run(until_idle=True,
                            recovered=None if recovered is None else lambda: recovered(consumer))
    finally:
        timer.cancel()
    assert not fired, f"consumer {s.consumer} was not idle after {deadline:g}s; stopped it"
    return code, metrics


# Retry cycles by path: "local" (read by the driver, run in its local worker: the default for
# cycles below 10,000 records) or "executors" (planned from offsets, read and run by Spark).
RETRY_PATHS = {"local": None, "executors": {"spark.antidote.retry.localMaxRecords": "0"}}


def resumed(s: EffectiveSettings) -> EffectiveSettings:
    """`s` as the operator renders it after a resume: a restart alone keeps a queue disabled."""
    import uuid

    return s.model_copy(update={"resume_token": f"test-{uuid.uuid4().hex}"})


def metric(m, name: str, **labels) -> float:
    return m.registry.get_sample_value(name, {**m.ids, **labels}) or 0.0


def settings(bootstrap: str, topic: str, tmp_path: Path, *, handler: str = "upper",
             policy: dict | None = None, sink: str | None = None, name: str = "c",
             max_batch: int = 1000, spark_conf: dict[str, str] | None = None,
             delivery: str = "ExactlyOnce") -> EffectiveSettings:
    qc = QueueConsumerSpec.model_validate({
        "policyRef": {"name": "p"},
        "source": {"kafka": {"bootstrapServers": bootstrap, "topic": topic,
                             "maxMessagesPerBatch": max_batch}},
        "handler": f"tests.integration.handlers:{handler}",
        **({"sink": {"kafka": {"topic": sink, "delivery": delivery}}} if sink else {}),
        **({"spark": {"conf": spark_conf}} if spark_conf else {}),
        "checkpoint": {"location": str(tmp_path / f"ckpt-{name}")},
    })
    pp = PoisonPolicySpec.model_validate(policy or {})
    return resolve(qc, pp, name=name, namespace="tests")


def calls(calls_dir: Path, topic: str) -> Counter:
    """Handler calls per "topic/partition/offset" of messages first read from `topic`."""
    return Counter(where for where, _ in call_log(calls_dir, topic))


def call_log(calls_dir: Path, topic: str) -> list[tuple[str, float]]:
    """(topic/partition/offset, unix time) of every handler call, in call order."""
    path = calls_dir / f"{topic}.calls"
    if not path.exists():
        return []
    return [(w, float(t)) for w, t in (line.split() for line in path.read_text().splitlines())]


def quarantined(bootstrap: str, topic: str) -> dict[tuple[int, int], tuple]:
    """(original partition, original offset) -> (record, headers as a dict) for a topic of
    Antidote's; fails on a duplicate, since every offset has exactly one outcome."""
    out: dict[tuple[int, int], tuple] = {}
    for r in read_all(bootstrap, topic):
        hdrs = {k: v.decode() for k, v in r.headers if k.startswith("antidote.")}
        key = (int(hdrs["antidote.original.partition"]), int(hdrs["antidote.original.offset"]))
        assert key not in out, f"{topic}: offset {key} quarantined twice"
        out[key] = (r, hdrs)
    return out


def write_manifests(folder: Path, *, name: str, namespace: str, bootstrap: str, source: str,
                    handler: str, policy: dict, sink: str | None = None,
                    max_batch: int | None = None, extra: dict | None = None) -> list[str]:
    """A QueueConsumer (policyRef `pp`) and its PoisonPolicy as files in `folder`, for
    `antidote consumer`: the arguments that name them."""
    kafka: dict = {"bootstrapServers": bootstrap, "topic": source}
    if max_batch is not None:
        kafka["maxMessagesPerBatch"] = max_batch
    spec: dict = {"policyRef": {"name": "pp"}, "source": {"kafka": kafka}, "handler": handler,
                  "checkpoint": {"location": str(folder / "ckpt")}}
    if sink is not None:
        spec["sink"] = {"kafka": {"topic": sink}}
    spec.update(extra or {})  # more QueueConsumer spec fields
    qc = {"apiVersion": "antidote.dev/v1alpha1", "kind": "QueueConsumer",
          "metadata": {"name": name, "namespace": namespace}, "spec": spec}
    pp = {"apiVersion": "antidote.dev/v1alpha1", "kind": "PoisonPolicy",
          "metadata": {"name": "pp", "namespace": namespace}, "spec": policy}
    (folder / "qc.yaml").write_text(yaml.safe_dump(qc))
    (folder / "pp.yaml").write_text(yaml.safe_dump(pp))
    return ["--consumer", str(folder / "qc.yaml"), "--policy", str(folder / "pp.yaml")]


def start(stack, calls_dir: Path, log: Path, args: list[str], **env: str) -> subprocess.Popen:
    """`antidote consumer` as a process on `stack`, its output appended to `log`."""
    environ = {**os.environ, **stack.env(), "PYTHONPATH": str(REPO),
               "ANTIDOTE_TEST_CALLS_DIR": str(calls_dir), "SPARK_LOCAL_IP": "127.0.0.1", **env}
    # A session of its own, so SIGKILL reaches the Spark JVM as well as the Python driver. The
    # child keeps its own copy of the log's descriptor; this process's closes here.
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "antidote_cli.main", "consumer",
                                 "--trigger-interval", "0.3", *args], cwd=REPO, env=environ,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
