"""Where the demo's story runs on the stack's node (`antidote demo --node`, root): the
project's images loaded into the node, the chart installed with the values kind uses
(hack/local-images.values.yaml), the QueueConsumer in a `restricted` namespace, its driver,
executors and reader Job as pods, the accounts service as a Deployment and Service beside
them (its outage staged through its admin endpoint: examples/accounts.py says why it is not
stopped), the checkpoint and the archive on a PersistentVolumeClaim."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from .errors import DemoError

SYSTEM_NS = "antidote-system"
RELEASE = "antidote"
ACCOUNTS = "accounts"
DATA = "/var/lib/antidote"  # where the claim is mounted in the driver and reader pods
# The images' user (docker/*.Dockerfile): a hostPath volume ignores fsGroup, so the host
# directory behind the demo's PersistentVolume is given to it.
IMAGE_UID = 10001
# Small enough for the node's two CPUs: the driver asks for one, the reader Job half of one.
SPARK = {"driver": {"memory": "512m"},
         "executor": {"instances": 2, "memory": "512m"},
         "conf": {"spark.kubernetes.executor.request.cores": "100m"}}


class NodePlatform:
    node = True
    label = "node"

    def __init__(self, demo: Any):
        self.demo = demo
        self.workdir: Path = demo.workdir
        self.volume_dir = self.workdir / "volume"
        self.installed_release = False
        self.pv = ""
        self.consumer_image = ""

    def _env(self) -> dict[str, str]:
        return {**os.environ, **self.demo.st.env()}

    def _run(self, *cmd: str, timeout: float = 600) -> str:
        out = subprocess.run(list(cmd), capture_output=True, text=True, env=self._env(), timeout=timeout)
        if out.returncode != 0:
            raise DemoError(f"`{' '.join(cmd)}` exited {out.returncode}: {(out.stderr or out.stdout).strip()[-1500:]}")
        return out.stdout

    # --- the operator --------------------------------------------------------------------
    def install(self) -> None:
        from antidote_devstack import project_images

        d, say = self.demo, self.demo.narrator
        say.step("Loading the operator and consumer images into the node (built with buildah "
                 "on the first run, cached after)")
        loaded = project_images.load_into_node(Path(d.st.dir))  # as `antidote dev load-images`
        operator, self.consumer_image = loaded["operator"], loaded["consumer"]
        say.ok(f"{operator}, {self.consumer_image}")
        release = self._release()
        if release:
            say.step(f"Using the chart already installed: release {release['name']} in {release['namespace']}")
        else:
            say.step(f"helm install {RELEASE} charts/antidote -n {SYSTEM_NS} -f "
                     "hack/local-images.values.yaml: the operator runs as a pod under the chart's "
                     "ServiceAccount and RBAC, in a `restricted` namespace")
            d._namespace(SYSTEM_NS, exist_ok=True)
            root = project_images.ROOT
            self._run("helm", "install", RELEASE, str(root / "charts/antidote"), "-n", SYSTEM_NS,
                      "-f", str(root / "hack/local-images.values.yaml"), "--wait", "--timeout", "300s")
            self.installed_release = True
            say.ok("operator pod Running")
        d._wait(d._served, "the CRDs to be served", 60)
        d._namespace(d.ns)
        self._claim()
        self._accounts_service()

    def _release(self) -> dict[str, Any] | None:
        releases = json.loads(self._run("helm", "list", "-A", "-o", "json") or "[]")
        return next((r for r in releases if r.get("chart", "").startswith("antidote-")), None)

    def _claim(self) -> None:
        """A PersistentVolume on a directory of the host (the workdir), bound to the claim
        the QueueConsumer mounts: the checkpoint and the archive outlive their pods, and the
        archive can be read from the host."""
        d = self.demo
        self.volume_dir.mkdir(parents=True, exist_ok=True)
        os.chown(self.volume_dir, IMAGE_UID, IMAGE_UID)
        self.pv = f"{d.ns}-data"
        d.core.create_persistent_volume({
            "metadata": {"name": self.pv, "labels": {"app.kubernetes.io/part-of": "antidote-demo"}},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                     "hostPath": {"path": str(self.volume_dir), "type": "Directory"},
                     "claimRef": {"namespace": d.ns, "name": "data"}}})
        d.core.create_namespaced_persistent_volume_claim(d.ns, {
            "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": self.pv,
                     "resources": {"requests": {"storage": "1Gi"}}}})
        d._wait(lambda: d.core.read_namespaced_persistent_volume_claim("data", d.ns).status.phase == "Bound",
                "the PersistentVolumeClaim `data` to be Bound", 60)
        d.narrator.ok(f"PersistentVolumeClaim data Bound (host directory {self.volume_dir})")

    def _accounts_service(self) -> None:
        from kubernetes import client

        from antidote_consumer.examples import accounts

        d = self.demo
        labels = {"app.kubernetes.io/name": ACCOUNTS, "app.kubernetes.io/part-of": "antidote-demo"}
        container = {
            "name": ACCOUNTS, "image": self.consumer_image, "imagePullPolicy": "Never",
            "command": ["python3", "-m", "antidote_consumer.examples.accounts", "--port", str(accounts.PORT)],
            "ports": [{"name": "http", "containerPort": accounts.PORT}],
            "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 1},
            "resources": {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                "readOnlyRootFilesystem": True, "runAsNonRoot": True},
        }
        # A plain dict: the client serialises it as its V1Deployment (whose type it names).
        client.AppsV1Api(d.api).create_namespaced_deployment(d.ns, {  # type: ignore[arg-type]
            "metadata": {"name": ACCOUNTS, "labels": labels},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": {
                         "automountServiceAccountToken": False, "terminationGracePeriodSeconds": 1,
                         "securityContext": {"runAsNonRoot": True, "runAsUser": IMAGE_UID,
                                             "seccompProfile": {"type": "RuntimeDefault"}},
                         "containers": [container]}}}})
        d.core.create_namespaced_service(d.ns, {
            "metadata": {"name": ACCOUNTS, "labels": labels},
            "spec": {"selector": labels, "ports": [{"name": "http", "port": accounts.PORT,
                                                     "targetPort": "http"}]}})
        self._wait_accounts()
        d.narrator.ok(f"accounts service up: Deployment and Service `{ACCOUNTS}` "
                      f"(http://{ACCOUNTS}:{accounts.PORT} from the consumer's pods)")

    def _ready_endpoints(self) -> int:
        from kubernetes import client

        d = self.demo
        slices = client.DiscoveryV1Api(d.api).list_namespaced_endpoint_slice(
            d.ns, label_selector=f"kubernetes.io/service-name={ACCOUNTS}").items
        return sum(1 for s in slices for e in (s.endpoints or []) if e.conditions and e.conditions.ready)

    def _wait_accounts(self) -> None:
        self.demo._wait(lambda: self._ready_endpoints() == 1, "the accounts service to answer", 180)

    def _pods(self, name: str) -> list[Any]:
        d = self.demo
        return d.core.list_namespaced_pod(d.ns, label_selector=f"app.kubernetes.io/name={name}").items

    def check(self, what: str) -> None:
        """The operator is a pod the kubelet restarts; nothing to watch from here."""

    # --- the accounts service ------------------------------------------------------------
    def accounts(self, up: bool) -> None:
        """Its database down (every lookup answers 503) or back, through its pod's address,
        which the host reaches on the node's bridge."""
        from antidote_consumer.examples import accounts

        (pod,) = [p for p in self._pods(ACCOUNTS) if p.status.phase == "Running"]
        accounts.set_outage(f"http://{pod.status.pod_ip}:{accounts.PORT}", not up)

    # --- what the story needs to know ----------------------------------------------------
    def spec(self) -> dict[str, Any]:
        return {"checkpoint": {"location": f"{DATA}/checkpoint"},
                "volumes": [{"name": "data", "claimName": "data", "mountPath": DATA}],
                "spark": SPARK}

    @property
    def archive(self) -> str:
        return f"{DATA}/archive"

    @property
    def archive_on_host(self) -> Path:
        return self.volume_dir / "archive"

    def show_pods(self) -> None:
        say = self.demo.narrator
        say.hint(f"$ kubectl get pods -n {self.demo.ns}")
        out = self._run("kubectl", "get", "pods", "-n", self.demo.ns, timeout=60)
        for line in out.rstrip().splitlines():
            say.hint("  " + line)

    def _kubectl_hint(self) -> str:
        return f'eval "$(antidote dev env --dir {self.demo.st.dir})"'

    def hints(self) -> list[str]:
        ns = self.demo.ns
        return [f"{self._kubectl_hint()}; kubectl get pods,events -n {ns}; "
                f"kubectl logs -n {ns} deploy/{self.demo.consumer}; "
                f"kubectl logs -n {SYSTEM_NS} deploy/{RELEASE}"]

    def where_to_look(self) -> list[str]:
        ns = self.demo.ns
        if self.demo._started_stack and not self.demo.keep:
            return ["  the pods, their logs and Events          `antidote demo --node --keep` leaves the "
                    "cluster running to look at"]
        return [f"  the cluster (while it runs)              {self._kubectl_hint()}",
                f"  the driver's log                         kubectl logs -n {ns} deploy/{self.demo.consumer}",
                f"  the operator's log                       kubectl logs -n {SYSTEM_NS} deploy/{RELEASE}"]

    def stop(self) -> None:
        """On a stack the demo did not start: what outlives the namespace (the
        PersistentVolume, the release it installed)."""
        d = self.demo
        if d._started_stack:
            return
        if self.pv:
            try:
                d.core.delete_persistent_volume(self.pv)
            except Exception:  # noqa: BLE001 - best effort on a stack we did not start
                pass
        if self.installed_release:
            subprocess.run(["helm", "uninstall", RELEASE, "-n", SYSTEM_NS, "--wait", "--timeout", "180s"],
                           env=self._env(), capture_output=True, timeout=240)
