"""Tasks do not cross the network between driver and executors in clear text (issue 43,
item 14): with the operator's Spark settings (`spark.authenticate` and
`spark.network.crypto.enabled` from builders.driver.spark_defaults), a secret carried in a
task's parameters, as Spark's Kafka source carries its `kafka.*` options, is not on the wire.

Spark runs `local-cluster` here: a real executor JVM in its own process that talks to the
driver over TCP, as an executor pod does over the pod network (the node path, where
executors are pods, needs root and `antidote dev up --node`; the settings are the same
keys, and Spark passes `spark.network.*` and `spark.authenticate*` to an executor at its
start on Kubernetes too). A packet socket on the loopback interface records every TCP
segment to and from the driver's RPC and block-manager ports. The control run, with
encryption off, finds the secret in those segments: the capture sees what it must.
Only the secret file is swapped for `spark.authenticate.secret`, which is what
non-Kubernetes masters take."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
from collections import defaultdict
from pathlib import Path

import pytest

from antidote_api import PoisonPolicySpec, QueueConsumerSpec, resolve
from antidote_operator.builders import driver as builders
from antidote_operator.builders.common import RenderOptions

pytestmark = pytest.mark.integration

SENTINEL = "sasl-password-" + "f1c3e0b8a2d4"  # never spelt whole in this file's bytes on the wire
JOB = r"""
import json, sys
from pyspark.sql import SparkSession
conf = json.loads(sys.argv[1])
b = SparkSession.builder.master("local-cluster[1,1,1024]")
for k, v in conf.items():
    b = b.config(k, v)
spark = b.getOrCreate()
secret = sys.argv[2]
# The secret travels in the task (the closure), as kafka.* options do in Spark's Kafka source,
# and comes back in the result.
rows = spark.sparkContext.parallelize(range(4), 2).map(lambda x: (x, len(secret), secret[:4])).collect()
assert len(rows) == 4, rows
print("OK")
spark.stop()
"""


SOL_PACKET, PACKET_STATISTICS = 263, 6  # <linux/if_packet.h>: struct tpacket_stats
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Capture:
    """TCP payloads on `lo` to or from `ports`, per connection, in order."""

    def __init__(self, ports: set[int]):
        self.ports = ports
        self.streams: dict[tuple, bytearray] = defaultdict(bytearray)
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(0x0003))
        # A loaded machine (the suite runs in parallel) can leave this thread behind the
        # frames: a large kernel buffer keeps them, and `drops` says whether any were lost,
        # since a capture with holes proves nothing either way.
        self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)
        self.sock.bind(("lo", 0))
        self.sock.settimeout(0.2)
        self.drops = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.is_set():
            try:
                frame, addr = self.sock.recvfrom(262144)
            except TimeoutError:
                continue
            if addr[2] == socket.PACKET_OUTGOING:
                continue  # loopback shows each frame twice: keep the incoming copy
            if len(frame) < 34 or frame[12:14] != b"\x08\x00" or frame[23] != 6:
                continue  # IPv4 TCP only
            ihl = (frame[14] & 0x0F) * 4
            tcp = 14 + ihl
            sport, dport = struct.unpack("!HH", frame[tcp:tcp + 4])
            if sport not in self.ports and dport not in self.ports:
                continue
            total = struct.unpack("!H", frame[16:18])[0]
            data_off = (frame[tcp + 12] >> 4) * 4
            payload = frame[tcp + data_off:14 + total]
            if payload:
                self.streams[(sport, dport)] += payload

    def stop(self) -> dict[tuple, bytes]:
        self.stopped.set()
        self.thread.join(timeout=5)
        _packets, self.drops = struct.unpack("II", self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
        self.sock.close()
        return {k: bytes(v) for k, v in self.streams.items()}


def _operators_conf() -> dict[str, str]:
    settings = resolve(QueueConsumerSpec.model_validate({
        "policyRef": {"name": "p"}, "handler": "shop.orders:handle",
        "source": {"kafka": {"bootstrapServers": "kafka:9092", "topic": "orders"}},
        "checkpoint": {"location": "/tmp/ckpt"}}), PoisonPolicySpec(), name="orders", namespace="shop")
    conf = builders.spark_defaults(settings, RenderOptions())
    return {k: v for k, v in conf.items() if k.startswith(("spark.authenticate", "spark.network.crypto"))}


def _run(conf: dict[str, str], tmp_path: Path) -> tuple[int, dict[tuple, bytes]]:
    import json

    driver, blocks = _free_port(), _free_port()
    conf = {**conf, "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.port": str(driver), "spark.driver.blockManager.port": str(blocks),
            "spark.ui.enabled": "false",
            # The task travels in a broadcast, lz4-compressed by default: uncompressed, the
            # secret is on the wire as its own bytes unless encryption hides it.
            "spark.broadcast.compress": "false"}
    cap = Capture({driver, blocks})
    try:
        proc = subprocess.run([sys.executable, "-c", JOB, json.dumps(conf), SENTINEL], capture_output=True,
                              text=True, timeout=600)
    finally:
        streams = cap.stop()
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]
    assert cap.drops == 0, f"the capture lost {cap.drops} frames: it cannot tell what crossed"
    return sum(len(v) for v in streams.values()), streams


@pytest.mark.skipif(not hasattr(socket, "AF_PACKET") or os.geteuid() != 0,
                    reason="a packet socket on lo needs Linux and root (the node tests' requirement too)")
def test_a_secret_in_a_task_is_not_on_the_wire_between_driver_and_executor(tmp_path: Path) -> None:
    conf = _operators_conf()
    assert conf["spark.authenticate"] == "true" and conf["spark.network.crypto.enabled"] == "true"
    assert conf["spark.network.crypto.cipher"] == "AES/GCM/NoPadding"  # the job runs with it
    secret = "0123456789abcdef" * 4
    conf.pop("spark.authenticate.secret.file")  # read on Kubernetes only
    conf["spark.authenticate.secret"] = secret
    needle = SENTINEL.encode()

    # Control: encryption off. The capture sees the task, and the secret in it.
    seen, streams = _run({**conf, "spark.network.crypto.enabled": "false"}, tmp_path)
    assert seen > 0 and any(needle in s for s in streams.values()), "the capture saw no task in clear"

    # The operator's settings: the same job, the same capture, no secret on the wire.
    seen, streams = _run(conf, tmp_path)
    assert seen > 10_000, seen  # the job did talk (tasks, results, executor registration)
    assert not any(needle in s for s in streams.values()), "a task's secret crossed the network in clear"
