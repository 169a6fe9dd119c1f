"""Running `antidote operator` as a subprocess against the real stack, and reading what it
wrote (objects, conditions, Events) through the API server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from antidote_devstack.procs import free_port

ROOT = Path(__file__).resolve().parents[2]
ANTIDOTE = str(Path(sys.executable).with_name("antidote"))
GROUP, VERSION = "antidote.dev", "v1alpha1"
T = TypeVar("T")


def install_crds(api_client: client.ApiClient, *, replace: bool = False) -> None:
    """This checkout's CRDs, created if missing; with `replace`, also put over existing ones
    (a test of new fields, on a stack whose CRDs another checkout installed)."""
    ext = client.ApiextensionsV1Api(api_client)
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        try:
            ext.create_custom_resource_definition(body)
        except ApiException as err:
            if err.status != 409:
                raise
            if replace:
                name = body["metadata"]["name"]
                body["metadata"]["resourceVersion"] = \
                    ext.read_custom_resource_definition(name).metadata.resource_version
                ext.replace_custom_resource_definition(name, body)
    objs = client.CustomObjectsApi(api_client)
    wait_for(lambda: objs.list_namespaced_custom_object(GROUP, VERSION, "default", "queueconsumers")
             is not None and objs.list_namespaced_custom_object(GROUP, VERSION, "default", "poisonpolicies")
             is not None, "CRDs to be served", errors=(ApiException,))


def wait_for(fn: Callable[[], T], what: str, timeout: float = 60.0, interval: float = 0.2,
             errors: tuple[type[BaseException], ...] = ()) -> T:
    """Poll `fn` until it returns something truthy; fail naming `what` and the last value."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = fn()
            if last:
                return last
        except errors as err:
            last = err
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


class Operator:
    """`antidote operator -n NS` as a subprocess; stopped with SIGTERM like a pod."""

    def __init__(self, kubeconfig: str, namespace: str, log_path: Path, *extra: str,
                 env: dict[str, str] | None = None, finalizer: bool = True):
        self.metrics_port = free_port()
        # --finalizer: the local stack has no garbage collector to delete a consumer's children.
        self.argv = [ANTIDOTE, "operator", "--namespace", namespace, "--metrics-port", str(self.metrics_port),
                     "--scrape-interval", "0.5", "--poison-event-interval", "5",
                     *(["--finalizer"] if finalizer else []), *extra]
        # The test's PYTHONPATH after the repository: a checkout (a git worktree) runs its own
        # operator, not the one the venv was installed from.
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        self.env = {**os.environ, "KUBECONFIG": kubeconfig, "PYTHONPATH": path, **(env or {})}
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Operator:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        log.close()
        return self

    def stop(self, timeout: float = 90.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def operator_metric(port: int, line_prefix: str) -> float:
    """The sum of the operator's metric lines that start with `line_prefix`."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(line_prefix))


def consumer_readiness(metrics_url: str, namespace: str) -> dict[str, tuple[str, float]]:
    """antidote_operator_consumer_ready as an operator serves it at `metrics_url`, for
    `namespace`: consumer -> (reason, value); one series per consumer, or it fails."""
    from prometheus_client.parser import text_string_to_metric_families

    from antidote_api.wire import OperatorMetric

    text = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    found: dict[str, tuple[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == OperatorMetric.CONSUMER_READY and s.labels["namespace"] == namespace:
                assert s.labels["consumer"] not in found, f"two series for {s.labels['consumer']}"
                found[s.labels["consumer"]] = (s.labels["reason"], s.value)
    return found


RECONCILES = 'antidote_operator_reconciles_total{kind="QueueConsumer"'
ROUNDS = "antidote_operator_scrape_round_seconds_count"


def reconciles(op: Operator) -> float:
    """QueueConsumer reconciles the operator finished (any result)."""
    return operator_metric(op.metrics_port, RECONCILES)


def wait_settled(op: Operator, *, reconciled_past: float | None = None, rounds: int = 3,
                 timeout: float = 60.0) -> None:
    """Before asserting that the operator did *not* do something: wait until it has looked.
    With `reconciled_past` (`reconciles(op)` read before the test's change, or 0 for a
    restarted operator), until a QueueConsumer reconcile has ended since (Kopf's handler for
    the change, or a start's resume, ran to its end); then until the metrics watcher has
    ended `rounds` more rounds, each of which scrapes every running consumer, syncs what
    that shows and runs the time-based work (reader-Job triggers, schedules). Whatever the
    operator would do about the change, it has done by then."""
    if reconciled_past is not None:
        wait_for(lambda: reconciles(op) > reconciled_past, "a reconcile by the operator", timeout=timeout,
                 errors=(OSError,))
    start = wait_for(lambda: operator_metric(op.metrics_port, ROUNDS) or None, "the operator's metrics watcher",
                     timeout=timeout, errors=(OSError,))
    wait_for(lambda: operator_metric(op.metrics_port, ROUNDS) >= start + rounds,
             f"{rounds} more rounds of the operator's metrics watcher", timeout=timeout, errors=(OSError,))


@contextmanager
def operator(kubeconfig: str, namespace: str, tmp_path: Path, *extra: str, **kw: Any) -> Iterator[Operator]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    op = Operator(kubeconfig, namespace, tmp_path / "operator.log", *extra, **kw).start()
    try:
        yield op
    finally:
        op.stop()


class Cluster:
    """Reading and writing Antidote's kinds and the children in one namespace."""

    def __init__(self, api_client: client.ApiClient, namespace: str):
        self.ns = namespace
        self.objs = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.rbac = client.RbacAuthorizationV1Api(api_client)

    # Antidote's kinds
    def create(self, doc: dict[str, Any]) -> dict[str, Any]:
        plural = {"PoisonPolicy": "poisonpolicies", "QueueConsumer": "queueconsumers"}[doc["kind"]]
        doc = {"apiVersion": f"{GROUP}/{VERSION}", **doc}
        return self.objs.create_namespaced_custom_object(GROUP, VERSION, self.ns, plural, doc)

    def qc(self, name: str) -> dict[str, Any] | None:
        try:
            return self.objs.get_namespaced_custom_object(GROUP, VERSION, self.ns, "queueconsumers", name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def ppol(self, name: str) -> dict[str, Any]:
        return self.objs.get_namespaced_custom_object(GROUP, VERSION, self.ns, "poisonpolicies", name)

    def patch(self, plural: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.objs.patch_namespaced_custom_object(GROUP, VERSION, self.ns, plural, name, body)

    def delete(self, plural: str, name: str) -> None:
        self.objs.delete_namespaced_custom_object(GROUP, VERSION, self.ns, plural, name)

    def conditions(self, name: str) -> dict[str, dict[str, Any]]:
        qc = self.qc(name) or {}
        return {c["type"]: c for c in (qc.get("status") or {}).get("conditions", [])}

    def condition(self, name: str, type_: str) -> tuple[str, str] | None:
        c = self.conditions(name).get(type_)
        return (c["status"], c["reason"]) if c else None

    def wait_condition(self, name: str, type_: str, status: str, reason: str | None = None,
                       timeout: float = 60.0) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            c = self.conditions(name).get(type_)
            ok = c is not None and c["status"] == status and (reason is None or c["reason"] == reason)
            return c if ok else None
        return wait_for(check, f"{name}: {type_}={status} {reason or ''}", timeout)

    def events(self, name: str) -> list[Any]:
        evs = self.core.list_namespaced_event(self.ns, field_selector=f"involvedObject.name={name}").items
        # eventTime has microseconds; creationTimestamp only seconds.
        return sorted(evs, key=lambda e: e.event_time or e.metadata.creation_timestamp)

    def event_reasons(self, name: str) -> list[str]:
        return [e.reason for e in self.events(name)]

    # children
    def deployment(self, name: str) -> Any:
        try:
            return self.apps.read_namespaced_deployment(name, self.ns)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def replicas(self, name: str) -> int | None:
        d = self.deployment(name)
        return None if d is None else d.spec.replicas

    def children(self, consumer: str) -> dict[str, list[str]]:
        """Every object labelled for `consumer`, by kind (to count duplicates)."""
        sel = f"antidote.dev/consumer={consumer}"
        return {
            "ConfigMap": [o.metadata.name for o in self.core.list_namespaced_config_map(self.ns, label_selector=sel).items],
            "ServiceAccount": [o.metadata.name for o in self.core.list_namespaced_service_account(self.ns, label_selector=sel).items],
            "Secret": [o.metadata.name for o in self.core.list_namespaced_secret(self.ns, label_selector=sel).items],
            "RoleBinding": [o.metadata.name for o in self.rbac.list_namespaced_role_binding(self.ns, label_selector=sel).items],
            "Service": [o.metadata.name for o in self.core.list_namespaced_service(self.ns, label_selector=sel).items],
            "Deployment": [o.metadata.name for o in self.apps.list_namespaced_deployment(self.ns, label_selector=sel).items],
        }


def policy(name: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"kind": "PoisonPolicy", "metadata": {"name": name}, "spec": spec or {}}


def consumer(name: str, policy_name: str, bootstrap: str, topic: str, **spec: Any) -> dict[str, Any]:
    body = {"policyRef": {"name": policy_name},
            "source": {"kafka": {"bootstrapServers": bootstrap, "topic": topic}},
            "handler": "tests.integration.handlers:upper", "checkpoint": {"location": f"/tmp/antidote-ckpt/{name}"}}
    body.update(spec)
    return {"kind": "QueueConsumer", "metadata": {"name": name}, "spec": body}
