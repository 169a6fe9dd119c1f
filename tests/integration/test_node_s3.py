"""A consumer whose checkpoint is on the local S3 server (SeaweedFS on the node bridge's
gateway, where the pods reach Kafka too), through the consumer image's own S3A jars, with
its AWS keys from a Secret (`spec.env`, `valueFrom.secretKeyRef`): its driver pod is
killed mid-stream, and the new driver goes on from Spark's checkpoint on S3, losing nothing
and quarantining nothing twice. Markers as test_node_consumers.py (root, one node)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path


from antidote_devstack import stack as devstack

from antidote_testkit.kafka_io import produce, read_all
from .node_cluster import NODE_IMAGES, SPARK, Cluster
from .node_util import wait
from .s3_util import S3
from .test_node_consumers import _audit

pytestmark = NODE_IMAGES


def test_a_consumer_with_its_checkpoint_on_s3_survives_a_driver_pod_kill(cluster: Cluster) -> None:
    c = cluster
    stack = devstack.add_s3(Path(c.stack.dir))  # stopped with the node's stack
    s3 = S3(stack.s3, stack.s3_jars)
    assert stack.host in s3.server.endpoint  # the bridge's gateway: the pods reach it
    c.core.create_namespaced_secret(c.ns, {
        "metadata": {"name": "s3-keys"}, "type": "Opaque",
        "stringData": {"access-key": s3.server.access_key, "secret-key": s3.server.secret_key}})
    env = [{"name": var, "valueFrom": {"secretKeyRef": {"name": "s3-keys", "key": key}}}
           for var, key in (("AWS_ACCESS_KEY_ID", "access-key"), ("AWS_SECRET_ACCESS_KEY", "secret-key"))]
    folder = s3.prefix("node")
    source = f"s3kill-{uuid.uuid4().hex[:6]}"
    sink = f"{source}-out"
    c.topics(source, sink, partitions=2)
    n = 2000
    produce(c.bootstrap, source, [(b"k%d" % i, b"poison-%d" % i if i % 200 == 100 else b"m%d" % i, None)
                                  for i in range(n)])
    commits = f"{folder}/checkpoint/commits"

    def committed() -> list[int]:
        return sorted(int(k.rsplit("/", 1)[1]) for k in s3.keys(commits) if k.rsplit("/", 1)[1].isdigit())

    with c.consumer("s3kill", source, "antidote_test_handlers:slow_upper",
                    {"retries": {"immediate": 0, "cycles": 0}}, sink={"kafka": {"topic": sink}},
                    max_batch=200, checkpoint={"location": f"s3a://{folder}/checkpoint"},
                    spark={"conf": {**SPARK["conf"], **s3.spark_conf()}}, env=env):
        (driver,) = wait("the driver pod Running", lambda: c.running("s3kill", "driver", 1), 300)
        written = wait("400 outputs in the sink and batches committed to the checkpoint on S3",
                       lambda: (k := len(read_all(c.bootstrap, sink))) >= 400 and len(committed()) >= 2 and k, 300)
        before = committed()
        c.kubectl("delete", "pod", driver.metadata.name, "-n", c.ns, "--grace-period=0", "--force")
        assert written < n - 10, f"the stream had ended ({written} outputs) before the kill"
        (new,) = wait("a new driver pod Running", lambda: (p := c.running("s3kill", "driver", 1))
                      and p[0].metadata.name != driver.metadata.name and p, 300)

        def settled() -> bool:
            src, outputs, quarantined = _audit(c, source, sink)
            return all(w in outputs or w in quarantined for w in src)

        wait("every source offset in the sink or the poison topic", settled, 600)
        # The new driver read Spark's checkpoint back from S3: its first batch id goes on
        # from the killed driver's last commits instead of starting at 0 again.
        log = c.kubectl("logs", new.metadata.name, "-n", c.ns)
        first = re.search(r"batch (\d+): \d+ messages", log)
        assert first and int(first.group(1)) >= before[-1], log[-3000:]
        assert committed()[-1] > before[-1]
    src, outputs, quarantined = _audit(c, source, sink)
    poison = {w for w, r in src.items() if r.value.startswith(b"poison")}
    assert len(src) == n and len(poison) == n // 200
    assert set(quarantined) == poison, sorted(set(quarantined) ^ poison)
    assert [w for w, k in quarantined.items() if k > 1] == [], "quarantined twice"
    assert not set(outputs) & poison
    assert [w for w in src if w not in outputs and w not in quarantined] == []  # none lost
    print(f"driver killed after {written} of {n} outputs and {len(before)} batches committed "
          f"on S3; the new driver's first batch: {first.group(1)}")
