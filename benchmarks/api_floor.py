"""The API server's floor under the operator's figures: the same requests, made by a bare
client with no operator, no Kopf and no watch.

`operator_scale.py` runs this in the same run as the operator and prints the operator's
figures against it. Each consumer's requests are those the server counted for one
consumer's first reconcile by the operator as the chart runs it (its children created,
two status writes and one Event; no finalizer: see docs/operator.md, "Deleting a
QueueConsumer"; Kopf's record of the handled spec is kept in the operator's memory), with
bodies of the same kind and size: the children come from the operator's own builders, the
status (and any Kopf annotations, which an operator before 2026-11-26 wrote) is copied from
a consumer the operator reconciled. They go through the
operator's own API client (`kube.Kube`) with its 16 calls in flight, in the same order per
consumer, consumers side by side. What is left between the operator and this floor is the
operator's own cost: its CPU taken from the API server on the same cores, Kopf's watch
events, waiting for a trigger. The floor itself is the API server and etcd on this machine.
"""

from __future__ import annotations

import asyncio
import copy
import secrets
import time
from collections.abc import Mapping
from typing import Any

import kopf

from antidote_api import PoisonPolicySpec, QueueConsumerSpec, resolve
from antidote_operator import kube
from antidote_operator.builders import driver
from antidote_operator.builders.common import RenderOptions
from antidote_operator.kube_login import login

def consumer_children(qc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What the operator creates for `qc`: its children and the Spark auth Secret."""
    meta = qc["metadata"]
    settings = resolve(QueueConsumerSpec.model_validate(qc["spec"]), PoisonPolicySpec.model_validate({}),
                       name=meta["name"], namespace=meta["namespace"])
    children = driver.build_children(qc, settings, replicas=1, opts=RenderOptions())
    secret = driver.build_spark_auth_secret(meta["name"], secrets.token_bytes(32))
    kopf.adopt(secret, owner=dict(qc))  # type: ignore[arg-type]
    return [secret, *children]


async def _first_reconcile(k: kube.Kube, qc: Mapping[str, Any], record: Mapping[str, str],
                           status: Mapping[str, Any]) -> None:
    meta = qc["metadata"]
    ns, name = meta["namespace"], meta["name"]
    for child in consumer_children(qc):
        await k.create(kube.BY_KIND[child["kind"]], ns, child)
    await k.patch(kube.QUEUE_CONSUMER, ns, name, {"status": dict(status)}, subresource="status")
    if record:  # as the operator does: none since Kopf's record is kept in its memory
        await k.patch(kube.QUEUE_CONSUMER, ns, name, {"metadata": {"annotations": dict(record)}})
    # The first metrics sample: a second status write, and the Event it brings.
    later = copy.deepcopy(dict(status))
    later["observedAt"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    await k.patch(kube.QUEUE_CONSUMER, ns, name, {"status": later}, subresource="status")
    await k.post_event(qc, type="Normal", reason="PoisonDetected", message="3 messages moved to the poison queue",
                       component="api-floor", instance="api-floor")


async def first_reconcile(consumers: list[Mapping[str, Any]], record: Mapping[str, str],
                          status: Mapping[str, Any]) -> float:
    """Seconds for every consumer's first-reconcile requests, `Kube`'s 16 in flight."""
    k = kube.Kube(login)
    try:
        t0 = time.monotonic()
        await asyncio.gather(*(_first_reconcile(k, qc, record, status) for qc in consumers))
        return time.monotonic() - t0
    finally:
        await k.close()


async def scale_to_zero(namespace: str, deployments: list[str]) -> list[float]:
    """All Deployments scaled to 0 at once through the urgent slots (16 in flight) and the
    scale subresource, as the operator scales a burst of disabled consumers: each one's
    seconds from the start."""
    k = kube.Kube(login)
    t0 = time.monotonic()
    done: list[float] = []

    async def one(name: str) -> None:
        await k.patch(kube.DEPLOYMENT, namespace, name, {"spec": {"replicas": 0}}, subresource="scale",
                      urgent=True)
        done.append(time.monotonic() - t0)

    try:
        await asyncio.gather(*(one(d) for d in deployments))
        return done
    finally:
        await k.close()
