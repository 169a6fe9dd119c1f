"""The kubelet's part for a container's environment, on this machine: `valueFrom`
(secretKeyRef, configMapKeyRef, fieldRef) and `envFrom` resolved by reading the Secrets and
ConfigMaps through the API, as the kubelet does before it starts a container; a missing one
(not optional) is refused, as the kubelet's CreateContainerConfigError is."""

from __future__ import annotations

import base64
import binascii
import socket
from collections.abc import Mapping
from typing import Any

from antidote_operator import kube

SECRET = kube.Kind("/api/v1", "secrets")

# What a fieldRef reads of the pod the process stands for (a local process has no pod IP).
LOCAL_IP = "127.0.0.1"


class MissingRef(RuntimeError):
    """A Secret, ConfigMap or key the environment needs does not exist (the kubelet's
    CreateContainerConfigError): the container is not started."""


async def _data(k: kube.Kube, cache: dict[tuple[str, str], dict[str, str] | None], namespace: str,
                kind: str, name: str) -> dict[str, str] | None:
    """The object's keys and values (a Secret's decoded), or None when it does not exist."""
    if (kind, name) not in cache:
        obj = await k.get(SECRET if kind == "Secret" else kube.CONFIGMAP, namespace, name)
        if obj is None:
            cache[(kind, name)] = None
        elif kind == "Secret":
            try:
                cache[(kind, name)] = {key: base64.b64decode(v).decode("utf-8")
                                       for key, v in (obj.get("data") or {}).items()}
            except (binascii.Error, UnicodeDecodeError) as err:
                raise MissingRef(f"Secret {namespace}/{name} has a value that is not UTF-8 text: {err}") from err
        else:
            cache[(kind, name)] = dict(obj.get("data") or {})
    return cache[(kind, name)]


def field_value(path: str, *, pod_name: str, namespace: str, uid: str, service_account: str) -> str:
    """A fieldRef's value for a local process standing for pod `pod_name`."""
    return {"metadata.name": pod_name, "metadata.namespace": namespace, "metadata.uid": uid,
            "spec.nodeName": socket.gethostname(), "spec.serviceAccountName": service_account,
            "status.hostIP": LOCAL_IP, "status.podIP": LOCAL_IP}.get(path, "")


async def resolve(k: kube.Kube, namespace: str, pod_spec: Mapping[str, Any], container: Mapping[str, Any],
                  *, pod_name: str, uid: str = "", skip: frozenset[str] = frozenset()) -> dict[str, str]:
    """The container's environment from `envFrom`, then `env` (a later entry wins, as in a
    pod), without the names in `skip` (the runner sets those itself). Raises MissingRef naming
    the variable and the object when a ref that is not optional cannot be resolved."""
    cache: dict[tuple[str, str], dict[str, str] | None] = {}
    out: dict[str, str] = {}
    for i, source in enumerate(container.get("envFrom") or []):
        kind, ref = ("Secret", source["secretRef"]) if "secretRef" in source else ("ConfigMap", source["configMapRef"])
        data = await _data(k, cache, namespace, kind, ref["name"])
        if data is None:
            if ref.get("optional"):
                continue
            raise MissingRef(f"envFrom[{i}]: {kind} {namespace}/{ref['name']} not found")
        prefix = source.get("prefix") or ""
        out.update({prefix + key: value for key, value in data.items()})
    for e in container.get("env") or []:
        name = e["name"]
        if name in skip:
            continue
        if "valueFrom" not in e:
            out[name] = str(e.get("value", ""))
            continue
        source = e["valueFrom"]
        if "fieldRef" in source:
            out[name] = field_value(source["fieldRef"]["fieldPath"], pod_name=pod_name, namespace=namespace,
                                    uid=uid, service_account=pod_spec.get("serviceAccountName", "default"))
            continue
        kind, ref = (("Secret", source["secretKeyRef"]) if "secretKeyRef" in source
                     else ("ConfigMap", source["configMapKeyRef"]))
        data = await _data(k, cache, namespace, kind, ref["name"])
        if data is None or ref["key"] not in data:
            if ref.get("optional"):
                continue
            what = (f"{kind} {namespace}/{ref['name']} not found" if data is None
                    else f"key {ref['key']} not found in {kind} {namespace}/{ref['name']}")
            raise MissingRef(f"env {name}: {what}")
        out[name] = data[ref["key"]]
    return out
