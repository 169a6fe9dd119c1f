"""Pods on the stack's node for the tests that start one (test_node.py,
test_node_consumers.py): restricted namespaces and containers, waiting for a pod's phase,
and the test handlers' image."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

from kubernetes import client

from antidote_devstack import project_images

HERE = Path(__file__).resolve().parent
# tests/integration/handlers.py in an image derived from the consumer image (handlers_image/).
HANDLERS_IMAGE = "localhost/antidote/test-handlers:0"

RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}


def restricted_container(name: str, image: str, command: list[str] | None = None) -> dict:
    return {
        "name": name, "image": image, "imagePullPolicy": "Never", "command": command,
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                            "capabilities": {"drop": ["ALL"]},
                            "seccompProfile": {"type": "RuntimeDefault"}},
    }


def pod(name: str, container: dict, restart: str = "Never") -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": restart, "containers": [container],
                     "automountServiceAccountToken": False,
                     "terminationGracePeriodSeconds": 1}}


def wait(what: str, check: Callable[[], object], timeout: float) -> object:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"{what}: not after {timeout:.0f}s (last: {last!r})")


def phase(core: client.CoreV1Api, ns: str, name: str, phases: set[str]) -> Callable[[], object]:
    def check() -> object:
        pod = core.read_namespaced_pod(name, ns)
        return pod.status.phase if pod.status.phase in phases else None
    return check


def restricted_namespace(core: client.CoreV1Api, prefix: str) -> str:
    ns = f"{prefix}-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns, "labels": RESTRICTED}})
    # The controller-manager creates the default ServiceAccount, which admission requires.
    wait("default ServiceAccount", lambda: core.list_namespaced_service_account(
        ns, field_selector="metadata.name=default").items, 60)
    return ns


def handlers_image() -> tuple[str, Path]:
    """(name, OCI archive) of the test handlers' image, built on the consumer image."""
    consumer, _ = project_images.consumer_image(archive=False)
    return project_images.build_image(
        HANDLERS_IMAGE, HERE / "handlers_image/Containerfile", "test-handlers",
        {"CONSUMER_IMAGE": consumer}, [project_images.image_key(consumer) or ""], context=HERE)
