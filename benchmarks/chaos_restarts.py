"""Chaos for the stack under the consumer and the operator (run by `make chaos` through
chaos.py; the small versions are in tests/integration/test_chaos_operator.py):

- broker restart: a consumer (`--until-idle`, poison through retry cycles) runs while the
  Kafka broker is SIGKILLed and restarted in place mid-stream; it must finish by itself, and
  the audit of every source offset must show 0 lost / 0 duplicated quarantine / 0 wrong
  attempts.
- API server restart: the operator runs while the API server is SIGKILLed and restarted
  mid-reconcile; it must finish those reconciles and pick up a change made after the
  restart by itself (its watches resume).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from benchmarks.chaos_kit import (CYCLES, PARTITIONS, Audit, audit, log, manifests, start, write_source,
                                  written)
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic
from kubernetes.client.rest import ApiException
from antidote_testkit.operators import (Cluster, Operator, consumer, install_crds, policy,
                                             wait_for)

from antidote_api.types import QUEUE_CONSUMERS
from antidote_devstack import stack as devstack
from benchmarks.chaos_operator import _api, _namespace, own_children


@dataclass
class Restart:
    what: str
    outage_seconds: float = 0.0  # SIGKILL to answering again
    recovery_seconds: float = 0.0  # answering again to the consumer done / the operator caught up
    recovered: bool = False
    detail: str = ""
    audit: Audit | None = None

    @property
    def ok(self) -> bool:
        return self.recovered and (self.audit is None or self.audit.ok)

    def lines(self) -> list[str]:
        how = f" ({self.recovery_seconds:.1f}s after it was back)" if self.recovered else ""
        out = [f"{self.what}: down {self.outage_seconds:.1f}s, recovered by itself: "
               f"{'yes' if self.recovered else 'NO'}{how}" + (f" ({self.detail})" if self.detail else "")]
        if self.audit is not None:
            out += [f"  {line}" for line in self.audit.lines()]
        return out


def run_broker_restart(s: devstack.Stack, *, messages: int, poison_rate: float, seed: int, folder: Path,
                       max_batch: int = 300, jitter: float = 3.0, down_for: float = 2.0,
                       timeout: float = 600.0) -> Restart:
    """A consumer over `messages` (poison through retry cycles) while the broker is SIGKILLed
    and restarted once it wrote something, plus a random delay. It must finish by itself."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    admin = AdminClient({"bootstrap.servers": s.kafka_bootstrap})
    tag = uuid.uuid4().hex[:6]
    source, sink = f"chaos-broker-{tag}", f"chaos-broker-{tag}-out"
    for fut in admin.create_topics([NewTopic(source, PARTITIONS, 1), NewTopic(sink, PARTITIONS, 1)]).values():
        fut.result(60)
    del admin  # an idle client would log every reconnect attempt during the outage
    write_source(s.kafka_bootstrap, source, messages, poison_rate)
    args = manifests(folder, s.kafka_bootstrap, source, sink, max_batch)
    env = {**os.environ, **s.env(), "SPARK_LOCAL_IP": "127.0.0.1"}
    outputs = [sink, f"{source}.poison"] + [f"{source}.retry-{k}" for k in range(1, CYCLES + 1)]
    r = Restart("broker SIGKILL + restart mid-stream")
    watch = Consumer({"bootstrap.servers": s.kafka_bootstrap, "group.id": "chaos-watch"})
    with open(folder / "consumer.log", "ab") as out:
        proc = start(env, args, out)
        try:
            while proc.poll() is None and written(watch, outputs) == 0:
                time.sleep(0.2)
            watch.close()
            time.sleep(rng.uniform(0, jitter))
            if proc.poll() is not None:
                r.detail = f"the consumer ended (exit {proc.returncode}) before the broker was killed"
                return r
            r.outage_seconds = devstack.restart(Path(s.dir), "kafka", down_for=down_for)
            log(f"broker back after {r.outage_seconds:.1f}s; waiting for the consumer to finish")
            back = time.monotonic()
            code = proc.wait(timeout)
            r.recovery_seconds = time.monotonic() - back
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
            r.detail = f"the consumer did not finish within {timeout:g}s (killed); see {folder / 'consumer.log'}"
            return r
        except BaseException:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            raise
    r.recovered = code == 0
    if code != 0:
        r.detail = f"the consumer exited {code}; see {folder / 'consumer.log'}"
    r.audit = audit(s.kafka_bootstrap, source, sink, f"{source}.poison")
    return r


def run_apiserver_restart(s: devstack.Stack, *, folder: Path, consumers: int = 3, down_for: float = 2.0,
                          timeout: float = 120.0) -> Restart:
    """The operator reconciling new consumers while the API server is SIGKILLed (as soon as
    the first child exists) and restarted; it must finish them, then reconcile a consumer
    created and one paused after the restart, without being restarted itself."""
    folder.mkdir(parents=True, exist_ok=True)
    api = _api(s.kubeconfig)
    install_crds(api)
    k = Cluster(api, _namespace(api, "chaos-apiserver"))
    k.create(policy("p"))
    r = Restart("API server SIGKILL + restart mid-reconcile")
    op = Operator(s.kubeconfig, k.ns, folder / "operator.log").start()
    names = [f"a{i}" for i in range(consumers)]
    try:
        for n in names:
            k.create(consumer(n, "p", s.kafka_bootstrap, f"chaos-api-{n}"))
        wait_for(lambda: any(k.children(names[0]).values()), "the first child", timeout, 0.05)
        r.outage_seconds = devstack.restart(Path(s.dir), "kube-apiserver", down_for=down_for)
        back = time.monotonic()
        k.create(consumer("after", "p", s.kafka_bootstrap, "chaos-api-after"))
        k.patch(QUEUE_CONSUMERS, names[0], {"spec": {"paused": True}})
        try:
            for n in names + ["after"]:
                wait_for(lambda n=n: all(v for kind, v in own_children(k, n).items() if kind != "reader")
                         and k.replicas(n) == (0 if n == names[0] else 1), f"{n}'s children", timeout,
                         errors=(ApiException,))
            k.wait_condition(names[0], "Paused", "True", "UserRequested", timeout)
            k.wait_condition("after", "Ready", "False", "Starting", timeout)
            r.recovered = op.alive()
            r.recovery_seconds = time.monotonic() - back
            if not r.recovered:
                r.detail = f"the operator exited {op.proc and op.proc.returncode}; see {op.log_path}"
        except AssertionError as err:
            r.detail = f"{err}; operator {'alive' if op.alive() else 'exited'}, see {op.log_path}"
    finally:
        op.stop()
        api.close()
    return r
