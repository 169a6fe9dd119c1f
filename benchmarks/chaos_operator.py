"""Chaos for the operator (the consumer's own chaos is chaos.py; the stack's processes
restarted under them, chaos_restarts.py):

- operator kills: `antidote operator` is SIGKILLed right after each action's first visible
  effect (plus a random delay) while consumers are created, paused, resumed (the annotation
  and spec change `antidote resume` makes), drained (the annotation `antidote drain` sets)
  and their policy changes; it is restarted each time. Afterwards: one reader Job per drain
  request, no more Events per consumer and reason than transitions happened, and every
  consumer's children and conditions as its final spec says. No pod runs (no kubelet): the
  Deployments and Jobs are API objects, which is what is counted; a drain Job is finished
  the way the Job controller would (its status), so the next drain may start.

Run by `make chaos` through chaos.py; the small versions are in tests/integration.
"""

from __future__ import annotations

import random
import signal
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.chaos_kit import log
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from antidote_testkit.operators import (Cluster, Operator, consumer, install_crds, policy,
                                             wait_for)
import yaml

from antidote_api.names import drain_job_name
from antidote_api.semantics import EffectiveSettings
from antidote_api.types import POISON_POLICIES, QUEUE_CONSUMERS
from antidote_api.wire import DRAIN_ANNOTATION
from antidote_api.wire import RESUME_ANNOTATION
from antidote_devstack import stack as devstack
from antidote_operator.builders.reader_job import REQUEST_ANNOTATION

# The reasons an action's transition posts (one Event each, at most).
REASONS = ("Paused", "Resumed", "ReaderJobStarted", "ReaderJobSucceeded")
ACTIONS = ("create", "pause", "resume", "drain", "policy")


def _api(kubeconfig: str) -> client.ApiClient:
    return config.new_client_from_config(config_file=kubeconfig)


def _namespace(api: client.ApiClient, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def _annotations(k: Cluster, name: str) -> dict[str, str]:
    return (k.qc(name) or {}).get("metadata", {}).get("annotations") or {}


def _reader_jobs(k: Cluster, name: str) -> list[Any]:
    batch = client.BatchV1Api(k.core.api_client)
    return batch.list_namespaced_job(
        k.ns, label_selector=f"antidote.dev/consumer={name},app.kubernetes.io/component=reader").items


def _finish_job(k: Cluster, job: str) -> None:
    """What the Job controller writes when a Job's pod succeeded (the stack runs none)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    batch = client.BatchV1Api(k.core.api_client)
    batch.patch_namespaced_job_status(job, k.ns, {"status": {"startTime": now, "active": 1}})
    conds = [{"type": t, "status": "True", "reason": "CompletionsReached", "lastTransitionTime": now}
             for t in ("SuccessCriteriaMet", "Complete")]
    batch.patch_namespaced_job_status(job, k.ns, {"status": {
        "active": 0, "succeeded": 1, "completionTime": now, "conditions": conds}})


def _settings(k: Cluster, name: str) -> EffectiveSettings | None:
    try:
        cm = k.core.read_namespaced_config_map(f"{name}-settings", k.ns)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    return EffectiveSettings.model_validate(yaml.safe_load(cm.data["settings.yaml"]))


def own_children(k: Cluster, name: str) -> dict[str, list[str]]:
    """The consumer's children by kind, with the reader's (created by its first drain) under
    "reader"."""
    out: dict[str, list[str]] = {"reader": []}
    for kind, names in k.children(name).items():
        out[kind] = sorted(n for n in names if not n.endswith("-reader"))
        out["reader"] += sorted(f"{kind}/{n}" for n in names if n.endswith("-reader"))
    return out


def _reader_entry(k: Cluster, name: str, job: str) -> dict[str, Any] | None:
    entries = ((k.qc(name) or {}).get("status") or {}).get("readerJobs") or []
    return next((e for e in entries if e.get("name") == job), None)


@dataclass
class Want:
    """What one consumer should be, and the transitions it went through."""

    paused: bool = False
    # Its children once settled after its creation (by kind, reader's apart): what every
    # later reconcile must leave, neither doubled nor missing.
    children: dict[str, list[str]] | None = None
    drains: list[str] = field(default_factory=list)
    transitions: Counter = field(default_factory=Counter)


@dataclass
class OperatorChaos:
    kills: int = 0
    actions: Counter = field(default_factory=Counter)
    duplicate_jobs: int = 0
    missing_jobs: int = 0
    events_beyond_transitions: int = 0
    events_missing: int = 0  # an Event whose status was stored just before a kill is lost
    unexpected_events: list = field(default_factory=list)
    wrong_state: list = field(default_factory=list)
    died_by_itself: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not (self.duplicate_jobs or self.missing_jobs or self.events_beyond_transitions
                    or self.unexpected_events or self.wrong_state or self.died_by_itself)

    def lines(self) -> list[str]:
        acts = ", ".join(f"{n} {a}" for a, n in sorted(self.actions.items()))
        return [
            f"SIGKILLs of the operator: {self.kills} ({acts}), {self.seconds:.0f}s",
            f"duplicate reader Jobs: {self.duplicate_jobs} (missing: {self.missing_jobs})",
            f"Events beyond transitions: {self.events_beyond_transitions} (lost in a kill, "
            f"allowed: {self.events_missing}; unexpected: {len(self.unexpected_events)}"
            + (f" e.g. {self.unexpected_events[:3]}" if self.unexpected_events else "") + ")",
            "final state: " + ("ok" if not self.wrong_state else f"WRONG {self.wrong_state[:5]}"),
            f"operator exits other than our kills: {self.died_by_itself}",
        ]


class _OperatorRun:
    """The action/effect/kill/restart loop against one namespace."""

    def __init__(self, k: Cluster, kubeconfig: str, bootstrap: str, folder: Path, rng: random.Random,
                 jitter: float):
        self.k, self.kubeconfig, self.bootstrap, self.folder = k, kubeconfig, bootstrap, folder
        self.rng, self.jitter = rng, jitter
        self.want: dict[str, Want] = {}
        self.immediate = 0
        self.result = OperatorChaos()
        self.op: Operator | None = None
        self.deck: list[str] = []

    def start_operator(self) -> None:
        self.op = Operator(self.kubeconfig, self.k.ns, self.folder / "operator.log").start()

    def kill_operator(self) -> None:
        assert self.op is not None and self.op.proc is not None
        if self.op.proc.poll() is not None:
            self.result.died_by_itself += 1
            log(f"the operator had exited {self.op.proc.returncode} by itself; see {self.op.log_path}")
        else:
            self.op.proc.send_signal(signal.SIGKILL)
            self.op.proc.wait(30)
            self.result.kills += 1

    # --- actions ---

    def choose(self, max_consumers: int) -> str:
        """The next action: every kind once per shuffled deck (so a short run covers them
        all), skipping the kinds that do not apply now."""
        if not self.want:
            return "create"
        applies = {"create": len(self.want) < max_consumers, "drain": True, "policy": True,
                   "pause": any(not w.paused for w in self.want.values()),
                   "resume": any(w.paused for w in self.want.values())}
        for _ in range(2):
            if not self.deck:
                self.deck = self.rng.sample(ACTIONS, len(ACTIONS))
            for action in self.deck:
                if applies[action]:
                    self.deck.remove(action)
                    return action
            self.deck = []
        return "drain"

    def act(self, action: str) -> tuple[Any, list[str]]:
        """Apply `action`; (a check of its first visible effect, the consumers it changes)."""
        k = self.k
        if action == "create":
            name = f"c{len(self.want)}"
            self.want[name] = Want()
            k.create(consumer(name, "p", self.bootstrap, f"chaos-op-{name}"))
            return (lambda: any(k.children(name).values())), [name]
        if action == "pause":
            name = self.rng.choice([n for n, w in self.want.items() if not w.paused])
            self.want[name].paused = True
            self.want[name].transitions["Paused"] += 1
            k.patch(QUEUE_CONSUMERS, name, {"spec": {"paused": True}})
            return (lambda: k.replicas(name) == 0 or k.condition(name, "Paused") == ("True", "UserRequested"),
                    [name])
        if action == "resume":  # what `antidote resume` writes for a paused consumer
            name = self.rng.choice([n for n, w in self.want.items() if w.paused])
            self.want[name].paused = False
            self.want[name].transitions["Resumed"] += 1
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            k.patch(QUEUE_CONSUMERS, name, {"metadata": {"annotations": {RESUME_ANNOTATION: stamp}},
                                             "spec": {"paused": False}})
            return (lambda: k.replicas(name) == 1 or RESUME_ANNOTATION not in _annotations(k, name),
                    [name])
        if action == "drain":  # what `antidote drain -n NS NAME` writes
            name = self.rng.choice(sorted(self.want))
            rid = f"r{sum(len(w.drains) for w in self.want.values()) + 1}"
            self.want[name].drains.append(rid)
            self.want[name].transitions.update(["ReaderJobStarted", "ReaderJobSucceeded"])
            k.patch(QUEUE_CONSUMERS, name, {"metadata": {"annotations": {DRAIN_ANNOTATION: rid}}})
            job = drain_job_name(name, rid)
            return (lambda: any(j.metadata.name == job for j in _reader_jobs(k, name)),
                    [name])
        if action == "policy":  # a reconcile of every consumer at once
            self.immediate = (self.immediate % 3) + 1
            k.patch(POISON_POLICIES, "p", {"spec": {"retries": {"immediate": self.immediate}}})
            names = sorted(self.want)
            return (lambda: any((s := _settings(k, n)) is not None and s.retries.immediate == self.immediate
                                for n in names)), names
        raise ValueError(action)

    def finish_jobs(self) -> None:
        """Complete every drain Job that exists and is not complete (the Job controller's part)."""
        for name in self.want:
            for job in _reader_jobs(self.k, name):
                if not (job.status and job.status.succeeded):
                    _finish_job(self.k, job.metadata.name)

    def state_ok(self, name: str) -> list[str]:
        """What is wrong with consumer `name` against what it should be ([] if nothing)."""
        k, w = self.k, self.want[name]
        wrong = []
        kids = own_children(k, name)
        readers = bool(kids.pop("reader"))
        if (kids != w.children if w.children is not None else not all(kids.values())) \
                or readers != bool(w.drains):
            wrong.append(f"{name}: children {kids} (reader's: {readers}), want {w.children} "
                         f"(reader's: {bool(w.drains)})")
        if k.replicas(name) != (0 if w.paused else 1):
            wrong.append(f"{name}: replicas {k.replicas(name)}, paused={w.paused}")
        want_paused = ("True", "UserRequested") if w.paused else ("False", "NotPaused")
        if k.condition(name, "Paused") != want_paused:
            wrong.append(f"{name}: Paused {k.condition(name, 'Paused')}, want {want_paused}")
        qc = k.qc(name) or {}
        if (qc.get("status") or {}).get("observedGeneration") != qc.get("metadata", {}).get("generation"):
            wrong.append(f"{name}: observedGeneration behind")
        left = {DRAIN_ANNOTATION, RESUME_ANNOTATION} & set(_annotations(k, name))
        if left:
            wrong.append(f"{name}: annotations not consumed: {sorted(left)}")
        s = _settings(k, name)
        if s is None or s.retries.immediate != self.immediate:
            wrong.append(f"{name}: settings immediate {s and s.retries.immediate}, want {self.immediate}")
        for rid in w.drains:
            entry = _reader_entry(k, name, drain_job_name(name, rid))
            if entry is None or entry.get("phase") != "Succeeded":
                wrong.append(f"{name}: drain {rid}: status {entry and entry.get('phase')}")
        return wrong

    def check(self) -> None:
        r = self.result
        for name, w in self.want.items():
            r.wrong_state += self.state_ok(name)
            by_request = Counter((j.metadata.annotations or {}).get(REQUEST_ANNOTATION, j.metadata.name)
                                 for j in _reader_jobs(self.k, name))
            r.duplicate_jobs += sum(n - 1 for n in by_request.values()) + max(0, len(by_request) - len(w.drains))
            names = {j.metadata.name for j in _reader_jobs(self.k, name)}
            r.missing_jobs += sum(1 for rid in w.drains if drain_job_name(name, rid) not in names)
            got = Counter()
            for e in self.k.events(name):
                got[e.reason] += e.count or 1
            for reason, n in got.items():
                if reason not in REASONS:
                    r.unexpected_events.append((name, reason, n))
                r.events_beyond_transitions += max(0, n - w.transitions[reason])
            r.events_missing += sum(max(0, n - got[reason]) for reason, n in w.transitions.items())


def run_operator_chaos(s: devstack.Stack, *, kills: int, seed: int, jitter: float, folder: Path,
                       max_consumers: int = 3, round_timeout: float = 90.0) -> OperatorChaos:
    """`kills` rounds of action, first visible effect, random delay, SIGKILL, restart, full
    effect; then a settled operator and the audit of Jobs, Events and state."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    api = _api(s.kubeconfig)
    install_crds(api)
    k = Cluster(api, _namespace(api, "chaos-operator"))
    run = _OperatorRun(k, s.kubeconfig, s.kafka_bootstrap, folder, rng, jitter)
    k.create(policy("p", {"reader": {"action": "Hold"}, "retries": {"immediate": 0}}))
    started = time.monotonic()
    run.start_operator()
    try:
        for i in range(kills):
            action = run.choose(max_consumers)
            run.result.actions[action] += 1
            first, changed = run.act(action)
            wait_for(first, f"round {i + 1} ({action}): its first effect", round_timeout, 0.05,
                     errors=(ApiException,))
            time.sleep(rng.uniform(0, jitter))  # the random moment of the kill, after the effect
            run.kill_operator()
            run.finish_jobs()
            run.start_operator()
            _until_right(lambda: [w for n in changed for w in run.state_ok(n)],
                         f"round {i + 1} ({action}): its whole effect after the restart", round_timeout)
            if action == "create":
                name = f"c{len(run.want) - 1}"  # the one just created
                run.want[name].children = _settled_children(k, name)
            if (i + 1) % 5 == 0:
                log(f"operator: {i + 1}/{kills} rounds")
        # The last operator is left alone: the state must stay put, and nothing more be posted.
        _settle(k, sorted(run.want))
        run.check()
    finally:
        if run.op is not None:
            run.op.stop()
        api.close()
    run.result.seconds = time.monotonic() - started
    return run.result


def _settled_children(k: Cluster, name: str, quiet: float = 2.0, timeout: float = 30.0) -> dict[str, list[str]]:
    last, since = own_children(k, name), time.monotonic()
    while time.monotonic() - since < quiet:
        if time.monotonic() - since > timeout:
            raise AssertionError(f"{name}'s children never settled: {last}")
        time.sleep(0.5)
        now = own_children(k, name)
        if now != last:
            last, since = now, time.monotonic()
    last.pop("reader")
    return last


def _until_right(problems: Any, what: str, timeout: float) -> None:
    """Poll `problems()` until it returns []; fail with the last problems."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            last = problems()
        except ApiException as err:
            last = [f"API: {err.status} {err.reason}"]
        if not last:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}: {last}")
        time.sleep(0.2)


def _settle(k: Cluster, names: list[str], quiet: float = 3.0, timeout: float = 60.0) -> None:
    """Until the consumers, their Deployments and Events stop changing for `quiet` seconds."""
    def versions() -> list[Any]:
        out: list[Any] = []
        for n in names:
            out.append((k.qc(n) or {}).get("metadata", {}).get("resourceVersion"))
            d = k.deployment(n)
            out.append(d.metadata.resource_version if d else None)
            out.append(len(k.events(n)))
        return out

    last, since = versions(), time.monotonic()
    while time.monotonic() - since < quiet:
        if time.monotonic() - since > timeout:
            raise AssertionError("the consumers never settled")
        time.sleep(0.5)
        now = versions()
        if now != last:
            last, since = now, time.monotonic()
