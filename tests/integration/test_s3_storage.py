"""`s3a://` for real: a consumer whose checkpoint and file sink are on the local S3 server
(SeaweedFS, `antidote dev up --s3`), through the S3A jars the consumer image carries
(hack/s3/pom.xml), with credentials from the environment's AWS variables and the endpoint
in `spec.spark.conf`. Killed with SIGKILL mid-batch and restarted, it loses nothing and
quarantines nothing twice; then the reader archives what it quarantined to S3. Real
broker, real local Spark, real S3 server."""

from __future__ import annotations

import pytest
import json
import os
import subprocess
import sys
from collections import Counter

from antidote_api.names import ledger_topic
from antidote_consumer.driver.ledger import load_state

from antidote_testkit import consumers as cu
from antidote_testkit.consumers import start
from antidote_testkit.kafka_io import produce, read_all
from .test_consumer_process import exited, kill9, wait_until

CODE_PATH = cu.CODE_PATH
POLICY = {"retries": {"immediate": 0, "cycles": 0}}


@pytest.mark.slow  # `make test-slow` (docs/testing.md): ~100 s; make test keeps test_s3_examples' s3a:// runs
def test_a_consumer_with_its_checkpoint_and_sink_on_s3_survives_sigkill_and_quarantines_once_then_is_archived(
        stack, s3, kafka_bootstrap, topic_factory, tmp_path, calls_dir) -> None:
    source = topic_factory(partitions=2)
    n, gate = 120, 70
    produce(kafka_bootstrap, source, [
        (b"k%d" % i, b"poison" if i % 20 == 7 else b"m%d gate" % i if i == gate else b"m%d" % i, None)
        for i in range(n)])
    src = {(r.partition, r.offset): r for r in read_all(kafka_bootstrap, source)}
    bad = {w for w, r in src.items() if r.value == b"poison"}
    (at,) = [w for w, r in src.items() if b"gate" in r.value]
    folder = s3.prefix("s3-consumer")
    ckpt, out = f"s3a://{folder}/checkpoint", f"s3a://{folder}/out"
    archive = {"action": "Archive", "archive": {"path": f"s3a://{folder}/archive"}}
    args = cu.write_manifests(
        tmp_path, name="s3proc", namespace="tests", bootstrap=kafka_bootstrap, source=source,
        handler="tests.integration.handlers:gated_slow_upper", policy={**POLICY, "reader": archive},
        max_batch=15,
        extra={"checkpoint": {"location": ckpt}, "sink": {"path": out, "format": "parquet"},
               "spark": {"conf": s3.spark_conf()}})
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy=POLICY, name="s3proc")
    env = {**s3.env(stack), "PYTHONPATH": CODE_PATH, "ANTIDOTE_TEST_DELAY": "0.02"}
    log = tmp_path / "consumer.log"
    held = calls_dir / f"{source}.gate"  # the batch holding the gate message waits while it exists
    held.touch()

    proc = start(stack, calls_dir, log, args, **env)

    def held_with_commits_on_s3() -> bool:
        # Spark has committed batches to the checkpoint on S3, and the held one has begun.
        commits = [k for k in s3.keys(f"{folder}/checkpoint/commits") if k.rsplit("/", 1)[1].isdigit()]
        return bool(commits) and cu.calls(calls_dir, source)[f"{source}/{at[0]}/{at[1]}"] > 0
    wait_until(held_with_commits_on_s3, 300, proc, log, "committed batches on S3 and the held batch")
    kill9(proc)
    held.unlink()
    committed_before = load_state(kafka_bootstrap, ledger_topic(source, s.namespace, s.consumer))
    assert sum(committed_before.positions.values()) < n  # the kill cut the run short

    proc = start(stack, calls_dir, log, [*args, "--until-idle"], **env)
    assert exited(proc, 300) == 0, log.read_text()[-3000:]

    # Spark read its checkpoint back from S3 (its batch ids go on) and nothing is on disk.
    keys = s3.keys(f"{folder}/checkpoint")
    assert any("/checkpoint/offsets/" in k for k in keys) and any("/checkpoint/commits/" in k for k in keys)
    assert not list(tmp_path.glob("ckpt*"))
    # Every poison message quarantined exactly once (quarantined() fails on a duplicate).
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    assert set(poison) == bad and len(bad) == n // 20
    # Every good message's output in the Parquet sink on S3, each once: a replayed batch
    # overwrites its own folder (batches.py, _write_path_outputs), and an output the killed
    # run left uncommitted stays under _temporary, which no reader of the sink reads.
    expected = Counter(r.value.upper() for w, r in src.items() if w not in bad)
    assert Counter(s3.parquet_values(f"{folder}/out")) == expected
    state = load_state(kafka_bootstrap, ledger_topic(source, s.namespace, s.consumer))
    assert (state.counts["processed"], state.counts["moved"]) == (n - len(bad), len(bad))

    # The reader's Archive (its own local Spark, the same settings) writes the poison topic
    # to Parquet on S3: every quarantined message once, with its original position.
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "antidote_cli.main", "reader", *args, "-o", "json",
                           "--report-file", str(report)], cwd=cu.REPO, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(report.read_text())["archived"] == len(bad)
    archived = s3.parquet_values(f"{folder}/archive", "original_offset")
    assert sorted(archived) == sorted(o for _, o in bad)
