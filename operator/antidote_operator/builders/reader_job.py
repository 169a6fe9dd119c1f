"""The poison reader's Job and ServiceAccount for one QueueConsumer (pure: dicts in, dicts
out). The Job runs `antidote reader` in the consumer's image with its settings ConfigMap;
when and why one is started is `antidote_operator.reader_jobs`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kopf

from antidote_api.drain import DrainRequest
from antidote_api.names import reader_service_account
from antidote_api.semantics import EffectiveSettings
from antidote_api.wire import CONFIG_DIR, SETTINGS_KEY

from .common import LABEL_CONSUMER, MANAGED_BY, RenderOptions, antidote_container
from . import handler_pods
from .driver import container_memory_mib, pod_security_context, quantity_mib, settings_volumes

TRIGGER_LABEL = "antidote.dev/reader-trigger"
ACTION_ANNOTATION = "antidote.dev/reader-action"
DEPTH_ANNOTATION = "antidote.dev/poison-depth"
REQUEST_ANNOTATION = "antidote.dev/drain-request"
COMPONENT = "reader"
CONTAINER = "reader"
TERMINATION_LOG = "/dev/termination-log"


@dataclass(frozen=True)
class JobOptions:
    """Operator-wide limits of reader Jobs."""

    active_deadline_seconds: int = 3600
    ttl_seconds_after_finished: int = 7 * 86400
    backoff_limit: int = 0  # a failed reader is reported, not retried behind on-call's back
    schedule_deadline_seconds: int = 300  # a slot missed by more than this is skipped


def labels(consumer: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "antidote-consumer", "app.kubernetes.io/instance": consumer,
            "app.kubernetes.io/component": COMPONENT, "app.kubernetes.io/managed-by": MANAGED_BY,
            LABEL_CONSUMER: consumer}


def build_reader_service_account(consumer: str) -> dict[str, Any]:
    """The reader talks to Kafka only: no Role, and no API token in its pod."""
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": reader_service_account(consumer), "labels": labels(consumer)},
            "automountServiceAccountToken": False}


def reader_args(request: DrainRequest | None) -> list[str]:
    return (["reader", "--settings", f"{CONFIG_DIR}/{SETTINGS_KEY}", "--report-file", TERMINATION_LOG]
            + (request.args() if request is not None else []))


def build_reader_job(settings: EffectiveSettings, opts: RenderOptions, *, trigger: str, name: str,
                     request: DrainRequest | None = None, depth: int | None = None,
                     job_opts: JobOptions = JobOptions()) -> dict[str, Any]:
    consumer = settings.consumer
    memory = quantity_mib(container_memory_mib(settings.spark.driver.memory))
    action = (request.action if request and request.action else None) or settings.reader.action
    job_labels = {**labels(consumer), TRIGGER_LABEL: trigger}
    annotations = {ACTION_ANNOTATION: action}
    if depth is not None:
        annotations[DEPTH_ANNOTATION] = str(depth)
    if request is not None:
        annotations[REQUEST_ANNOTATION] = request.annotation()
    volumes, mounts = settings_volumes(settings, only_settings=True)
    container = {
        **antidote_container(CONTAINER, settings, opts, reader_args(request)),
        # No SPARK_CONF_DIR: the cluster-mode spark-defaults would ask for executor pods,
        # which this ServiceAccount may not create; an Archive runs Spark in the pod. The
        # consumer's env and envFrom too (not its Secret/ConfigMap volumes: no handler runs
        # here): an archive on object storage needs the credentials the checkpoint has.
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}, *handler_pods.env(settings)],
        **({"envFrom": handler_pods.env_from(settings)} if settings.env_from else {}),
        "resources": {"requests": {"cpu": "500m", "memory": memory}, "limits": {"memory": memory}},
        "volumeMounts": mounts,
        # The JSON report goes to the termination log; logs' tail if it crashed before.
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                            "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    }
    pod_spec = {
        "serviceAccountName": reader_service_account(consumer),
        "automountServiceAccountToken": False,
        "restartPolicy": "Never",
        # The driver's (fsGroup among it): a claim in spec.volumes that the
        # driver can write, the reader can write too.
        "securityContext": pod_security_context(opts),
        "containers": [container],
        "volumes": volumes,
    }
    # The consumer's image and the driver's placement.
    handler_pods.add_placement(pod_spec, settings, "driver")
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": job_labels, "annotations": annotations},
        "spec": {
            "backoffLimit": job_opts.backoff_limit,
            "activeDeadlineSeconds": job_opts.active_deadline_seconds,
            "ttlSecondsAfterFinished": job_opts.ttl_seconds_after_finished,
            "template": {
                "metadata": {"labels": {**job_labels}, "annotations": {ACTION_ANNOTATION: action}},
                "spec": pod_spec,
            },
        },
    }


def adopt(owner: Mapping[str, Any], *objs: dict[str, Any]) -> None:
    """Owned by the QueueConsumer; its labels on the Job and the pod template."""
    # Kopf types the owner as its Body (a view of an event's body); it only reads a mapping.
    kopf.adopt(list(objs), owner=dict(owner), nested="spec.template")  # type: ignore[arg-type]
