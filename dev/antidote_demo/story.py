"""The demo's story, step by step, against the real local stack, on its node (the operator,
drivers, executors and reader Job as pods: platform_node.py) or with the operator's dev
runner (local processes: platform_dev.py):

1. stack, CRDs, the operator; a PoisonPolicy and a QueueConsumer;
2. 300 expense reports: most approved, invalid ones quarantined at once (validation),
   reports for an unknown cost center retried, cycled and quarantined (max-attempts);
3. the accounts service goes down: every report fails, the consumer disables its queue
   (SystemicFailure) instead of quarantining them, the operator pauses it and says why;
4. the service is fixed, the queue resumed: the reports that waited are approved;
5. a reader Job drains the poison topic to a Parquet archive;
6. a report, and a ledger check against Kafka: every report is in exactly one place.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from antidote_api.types import GROUP, POISON_POLICIES, QUEUE_CONSUMERS, VERSION
from antidote_consumer.examples import expenses

from .balance import Balance, balance
from .errors import DemoError
from .narrate import Narrator
from .platform_dev import DevPlatform
from .platform_node import NodePlatform
from .reads import ClusterReads

NS = "antidote-demo"
CONSUMER = "expenses"
POLICY = "expense-reports"
SOURCE = "expenses"
FAILURE_WINDOW_S = 10


@dataclass
class Demo(ClusterReads):
    workdir: Path
    narrator: Narrator
    keep: bool = False  # leave the stack running at the end
    node: bool = False  # on the stack's node, as pods (else the dev runner's processes)
    stack_dir: Path | None = None
    produced: list[bytes] = field(default_factory=list)
    _started_stack: bool = False
    suffix: str = ""  # on a stack that is not the demo's own, names get a run id

    def __post_init__(self) -> None:
        self._name(self.suffix)
        self.platform = NodePlatform(self) if self.node else DevPlatform(self)

    def _name(self, suffix: str) -> None:
        self.ns, self.consumer, self.policy = NS + suffix, CONSUMER + suffix, POLICY + suffix
        self.source = SOURCE + suffix
        self.sink = self.source + ".approved"

    # --- set-up ---------------------------------------------------------------------------
    def run(self) -> int:
        say = self.narrator
        try:
            self._stack()
            self.platform.install()
            self._apply()
            self.phase_reports()
            self.phase_outage()
            self.phase_resume()
            self.phase_drain()
            result = self._report()
        except DemoError as err:
            say.fail(str(err))
            for line in self.platform.hints():
                say.hint(line)
            return 1
        finally:
            self._teardown()
        return 0 if result.ok else 1

    def _stack(self) -> None:
        from antidote_devstack import stack as devstack
        from antidote_devstack.paths import cache_dir

        say = self.narrator
        reuse = os.environ.get("ANTIDOTE_STACK_DIR")
        st = devstack.running(Path(reuse)) if reuse else None
        if st is not None and self.node and not st.node:
            raise DemoError(f"the stack in {reuse} ($ANTIDOTE_STACK_DIR) has no node: start it with "
                            f"`antidote dev up --node --dir {reuse}`, or unset ANTIDOTE_STACK_DIR")
        if st is None:
            self.stack_dir = self.stack_dir or cache_dir() / ("demo-node-stack" if self.node else "demo-stack")
            say.step("Starting the local stack (Kubernetes API server, etcd, Kafka"
                     + (", a node: kubelet, containerd, CoreDNS" if self.node else "")
                     + ") — the first run builds them, later runs take seconds")
            # With Prometheus when its binary is there (a second's start): the report ends
            # with queries to paste. The demo runs without it. On the node the operator is a
            # pod, whose /metrics the stack's Prometheus (file-based discovery) does not see.
            st = devstack.up(self.stack_dir, node=self.node,
                             prometheus=not self.node and shutil.which("prometheus") is not None)
            self._started_stack = True
        else:
            self.suffix = self.suffix or "-" + uuid.uuid4().hex[:4]
            self._name(self.suffix)
            say.step(f"Using the running stack in {reuse} (names end in {self.suffix})")
        self.st = st
        from kubernetes import client, config

        self.api = config.new_client_from_config(st.kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.objs = client.CustomObjectsApi(self.api)
        self.batch = client.BatchV1Api(self.api)
        say.ok(f"API server {st.server}, Kafka {st.kafka_bootstrap}"
               + (f", Prometheus {st.prometheus_url}" if st.prometheus_url else ""))

    def _namespace(self, name: str | None = None, exist_ok: bool = False) -> None:
        """Labelled `restricted`: the API server's Pod Security admission judges every pod
        in it (on the node; the dev runner's processes are not pods)."""
        from kubernetes import client

        name = name or self.ns
        try:
            self.core.create_namespace({"metadata": {"name": name, "labels": {
                "pod-security.kubernetes.io/enforce": "restricted"}}})
        except client.ApiException as err:
            if err.status != 409:
                raise
            if exist_ok:
                return
            raise DemoError(f"namespace {name} already exists on this stack (an earlier demo?): "
                            f"run `antidote dev down` then the demo again")
        # The controller-manager creates the default ServiceAccount, which admission requires
        # (without a controller-manager, as with the dev runner, none is needed).
        if self.node:
            self._wait(lambda: self.core.list_namespaced_service_account(
                name, field_selector="metadata.name=default").items, f"namespace {name}'s ServiceAccount", 60)

    def _served(self) -> bool:
        from kubernetes import client

        try:
            self.objs.list_namespaced_custom_object(GROUP, VERSION, "default", QUEUE_CONSUMERS)
            return True
        except client.ApiException:
            return False

    def _apply(self) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        say = self.narrator
        admin = AdminClient({"bootstrap.servers": self.st.kafka_bootstrap})
        for fut in admin.create_topics([NewTopic(self.source, 2, 1), NewTopic(self.sink, 2, 1)]).values():
            try:
                fut.result(30)
            except Exception as err:  # noqa: BLE001
                if "TOPIC_ALREADY_EXISTS" not in str(err):
                    raise
        policy = {
            "retries": {"immediate": 2, "cycles": 1, "cycleDelay": "3s"},
            "validation": {"format": "json", "jsonSchema": expenses.POLICY_SCHEMA},
            "disposition": "Move",
            "queueDisable": {"failureRatio": {"threshold": 0.5, "window": f"{FAILURE_WINDOW_S}s",
                                              "minMessages": 20}},
            "reader": {"action": "Archive", "archive": {"path": self.platform.archive, "format": "parquet"}},
        }
        qc = {
            "policyRef": {"name": self.policy},
            "source": {"kafka": {"bootstrapServers": self.st.kafka_bootstrap, "topic": self.source,
                                 "maxMessagesPerBatch": 200}},
            "handler": "antidote_consumer.examples.expenses:approve",
            "sink": {"kafka": {"topic": self.sink}},
            **self.platform.spec(),
        }
        self.objs.create_namespaced_custom_object(GROUP, VERSION, self.ns, POISON_POLICIES, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "PoisonPolicy",
            "metadata": {"name": self.policy}, "spec": policy})
        self.objs.create_namespaced_custom_object(GROUP, VERSION, self.ns, QUEUE_CONSUMERS, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "QueueConsumer",
            "metadata": {"name": self.consumer}, "spec": qc})
        say.step(f"Applied PoisonPolicy {self.policy} (3 attempts x 2 passes, cycle delay 3s, JSON "
                 f"schema, disposition Move, pause when >50% fail) and QueueConsumer {self.consumer}")
        self._wait(lambda: (self._condition("Ready") or ("",))[0] == "True",
                   "the consumer to be Ready (its Spark driver starting)", 420 if self.node else 240)
        say.ok("consumer Ready: Spark driver running, reading topic " + self.source)
        self.platform.show_pods()

    # --- the story ----------------------------------------------------------------------
    def phase_reports(self) -> None:
        say = self.narrator
        batch = expenses.reports(300)
        n_invalid = sum(r.fate == "invalid" for r in batch)
        n_unknown = sum(r.fate == "unknown-cost-center" for r in batch)
        say.step(f"Producing 300 expense reports: {n_invalid} without an employee id, "
                 f"{n_unknown} for a cost center that does not exist")
        self._produce(batch)
        self._follow(lambda c: c.get("processed", 0) + c.get("poisoned", 0) >= 300,
                     "all 300 reports to reach an outcome", 240)
        c = self._counts()
        say.ok(f"{c.get('processed', 0)} approved; {c.get('poisoned', 0)} quarantined in "
               f"{self.source}.poison: the invalid ones at once (reason validation, no handler call), "
               f"the unknown cost centers after 3 attempts, a 3s retry cycle and 3 more "
               f"(reason max-attempts)")
        say.step(f"Waiting {FAILURE_WINDOW_S}s so the failure-ratio window holds only new reports")
        time.sleep(FAILURE_WINDOW_S + 1)

    def phase_outage(self) -> None:
        say = self.narrator
        self.platform.accounts(up=False)
        batch = expenses.reports(150, start=300, invalid_every=10**9, unknown_every=10**9)
        say.step("The accounts service's database goes DOWN (every lookup answers 503); "
                 "producing 150 more reports")
        self._produce(batch)
        self._wait(lambda: self._condition("QueueDisabled") == ("True", "SystemicFailure"),
                   "the queue to be disabled (SystemicFailure)", 180, follow=True)
        self._wait(lambda: self._replicas() == 0, "the operator to pause the consumer", 60)
        ev = self._wait(lambda: next((e for e in self._events() if e.reason == "QueueDisabled"), None),
                        "the QueueDisabled Event", 60)
        say.ok(f"queue disabled, consumer paused (0 replicas). Event {ev.type} {ev.reason}: {ev.message}")
        c = self._counts()
        say.ok(f"nothing was quarantined for the outage: poisoned is still {c.get('poisoned', 0)}; "
               f"the 150 reports wait, unconsumed, in {self.source}")
        if self.node:
            self._wait(lambda: not self.core.list_namespaced_pod(
                self.ns, label_selector=f"antidote.dev/consumer={self.consumer}").items,
                "the driver and executor pods to be gone", 180)
            self.platform.show_pods()

    def phase_resume(self) -> None:
        say = self.narrator
        self.platform.accounts(up=True)
        say.step("The accounts service is back; on call resumes the queue")
        self._cli("resume", self.consumer, "-n", self.ns)
        self._wait(lambda: (self._condition("QueueDisabled") or ("",))[0] == "False",
                   "the queue to be re-enabled", 60)
        self._follow(lambda c: c.get("processed", 0) + c.get("poisoned", 0) >= 450,
                     "the 150 waiting reports to be processed", 240)
        c = self._counts()
        say.ok(f"resumed: {c.get('processed', 0)} approved in all, still {c.get('poisoned', 0)} quarantined")

    def phase_drain(self) -> None:
        say = self.narrator
        say.step("Draining the poison topic: a reader Job with the policy's action (Archive -> Parquet)")
        self._cli("drain", self.consumer, "-n", self.ns)
        job = self._wait(lambda: self._reader_job(), "the reader Job to be created", 60)
        say.ok(f"reader Job {job['name']} created")
        done = self._wait(lambda: (j := self._reader_job()) and j.get("phase") in ("Succeeded", "Failed") and j,
                          f"reader Job {job['name']} to finish", 300)
        if done["phase"] != "Succeeded":
            raise DemoError(f"reader Job {done['name']} failed: {done.get('message', '')}")
        self.reader_job = done
        say.ok(f"reader Job {done['name']} Succeeded: {done.get('messages', 0)} messages; "
               f"{done.get('message', '')}")
        files = sorted(self.platform.archive_on_host.rglob("*.parquet"))
        say.ok(f"archive: {len(files)} Parquet file(s) in {self.platform.archive_on_host}")
        self.platform.show_pods()

    # --- the end --------------------------------------------------------------------------
    def _report(self) -> Balance:
        from .kafka_read import keys_of

        say = self.narrator
        poison_topic = f"{self.source}.poison"
        result = balance(self.produced, keys_of(self.st.kafka_bootstrap, self.sink),
                         keys_of(self.st.kafka_bootstrap, poison_topic))
        c = self._counts()
        kubectl = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or "kubectl"
        get = subprocess.run([kubectl, "get", "qc", "-n", self.ns], capture_output=True, text=True,
                             env={**os.environ, "KUBECONFIG": self.st.kubeconfig})
        say.report("Report", [
            f"reports produced            {result.produced}",
            f"  processed (approved)      {c.get('processed', 0)}   in topic {self.sink}: {result.processed}"
            " (read_committed: exactly-once)",
            f"  moved to {poison_topic:<16} {c.get('moved', 0)}   in the topic: {result.quarantined}",
            f"  rejected / dropped        {c.get('rejected', 0)} / {c.get('dropped', 0)}",
            f"  retry cycles scheduled    {c.get('retried', 0)}",
            "",
            "$ kubectl get qc -n " + self.ns,
            *get.stdout.rstrip().splitlines(),
            "",
            "Events:",
            *[f"  {e.type:<8}{e.reason:<22}{(e.message or '')[:110]}" for e in self._events()],
            "",
            ("ledger: BALANCED — every report is in exactly one place" if result.ok else
             f"ledger: NOT BALANCED — missing {result.missing[:5]}, twice {result.twice[:5]}, "
             f"unknown {result.unknown[:5]}"),
            "",
            "Where to look next:",
            f"  antidote inspect {self.consumer} -n {self.ns}      the quarantined reports and why",
            f"  archive (Parquet)                        {self.platform.archive_on_host}",
            *self.platform.where_to_look(),
            "  docs/consumer.md, docs/operator.md, docs/alerts.md",
            *self._prometheus_hints(),
        ])
        return result

    def _prometheus_hints(self) -> list[str]:
        url = self.st.prometheus_url
        if not url:
            return []
        ns = self.ns
        return [
            "",
            f"Prometheus {url}" + ("   (stops with the stack now: `antidote demo --keep` leaves it running)"
                                   if self._started_stack and not self.keep else ""),
            "  paste into its query page:",
            f'  sum by (outcome) (antidote_messages_total{{namespace="{ns}"}})',
            f'  sum by (reason, disposition) (antidote_poison_messages_total{{namespace="{ns}"}})',
            f'  max_over_time(antidote_operator_queue_disabled{{namespace="{ns}"}}[1h])',
        ]

    def _teardown(self) -> None:
        say = self.narrator
        # With --keep the pods stay for a look; the dev runner's processes cannot outlive it.
        if not (self.keep and self.platform.node):
            self.platform.stop()
        if self._started_stack and not self.keep:
            from antidote_devstack import stack as devstack

            devstack.down(self.stack_dir)
            say.step("Stopped everything the demo started")
        elif self._started_stack:
            say.step(f"The stack keeps running (--keep): antidote dev env --dir {self.stack_dir}")
        elif self.keep:
            say.step(f"Namespace {self.ns} left on the stack (--keep)")
        else:
            self._cleanup_namespace()

    def _cleanup_namespace(self) -> None:
        try:
            self.core.delete_namespace(self.ns)
        except Exception:  # noqa: BLE001 - best effort on a stack we did not start
            pass

    # --- helpers ------------------------------------------------------------------------
    def _cli(self, *args: str) -> None:
        """An on-call command, as a user types it (docs/cli.md), narrated with its output."""
        antidote = str(Path(sys.executable).with_name("antidote"))
        self.narrator.hint("$ antidote " + " ".join(args))
        out = subprocess.run([antidote, *args], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "KUBECONFIG": self.st.kubeconfig})
        for line in (out.stdout + out.stderr).strip().splitlines():
            self.narrator.hint("  " + line)
        if out.returncode != 0:
            raise DemoError(f"`antidote {' '.join(args)}` exited {out.returncode}")

    def _produce(self, batch: list[expenses.Report]) -> None:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.st.kafka_bootstrap, "linger.ms": 20})
        for r in batch:
            p.produce(self.source, key=r.key, value=r.value)
        if p.flush(60):
            raise DemoError(f"could not produce to {self.source}")
        self.produced += [r.key for r in batch]

    def _follow(self, done: Callable[[dict[str, int]], bool], what: str, timeout: float) -> None:
        self._wait(lambda: done(self._counts()), what, timeout, follow=True)

    def _wait(self, fn: Callable[[], Any], what: str, timeout: float, follow: bool = False) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            self.platform.check(what)
            value = fn()
            if value:
                self.narrator.clear()
                return value
            if follow:
                qc = self._qc()  # one read for the whole status line
                c, ready = self._counts(qc), self._condition("Ready", qc) or ("?", "")
                self.narrator.live(
                    f"processed {c.get('processed', 0):>4} · retried {c.get('retried', 0):>3} · "
                    f"quarantined {c.get('poisoned', 0):>3} · Ready={ready[0]} {ready[1] or ''}")
            if time.monotonic() > deadline:
                self.narrator.clear()
                raise DemoError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(0.5)


def run_demo(keep: bool = False, workdir: Path | None = None, node: bool = False) -> int:
    workdir = workdir or Path(tempfile.mkdtemp(prefix="antidote-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    return Demo(workdir, Narrator(sys.stdout), keep=keep, node=node).run()

