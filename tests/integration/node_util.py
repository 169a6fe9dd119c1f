"""Pods on the stack's node for the tests that start one (test_node.py, test_images.py):
restricted containers, and waiting for a pod's phase."""

from __future__ import annotations

import time
from collections.abc import Callable

from kubernetes import client

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
