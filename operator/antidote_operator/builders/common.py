"""What every child of a QueueConsumer shares: the operator-wide render options, the labels,
the names and paths the driver's and executors' pods are laid out with. Pure data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from antidote_api.semantics import EffectiveSettings

# Labels on every child; LABEL_CONSUMER is also how the operator finds Deployments and Pods.
LABEL_CONSUMER = "antidote.dev/consumer"
MANAGED_BY = "antidote-operator"
SETTINGS_HASH = "antidote.dev/settings-hash"
# On the driver's ServiceAccount: what its executor pods look like. The chart's admission
# policy (templates/admission/) reads them (the ServiceAccount is its param) and lets the
# driver's token create only such pods; the driver cannot edit its ServiceAccount.
EXECUTOR_SA_ANNOTATION = "antidote.dev/executor-service-account"
EXECUTOR_IMAGE_ANNOTATION = "antidote.dev/executor-image"
EXECUTOR_SECRETS_ANNOTATION = "antidote.dev/executor-secrets"  # comma-separated names
# spec.spark's imagePullSecrets (comma-separated; "" for none): the policy lets executor pods
# name exactly these.
EXECUTOR_PULL_SECRETS_ANNOTATION = "antidote.dev/executor-image-pull-secrets"

SPARK_DEFAULTS_KEY = "spark-defaults.conf"
EXECUTOR_TEMPLATE_KEY = "executor-pod-template.yaml"
SECRETS_DIR = "/etc/antidote/secrets"
# The per-consumer secret of Spark's RPC authentication, mounted in the driver and executors.
SPARK_AUTH_DIR = "/etc/antidote/spark-auth"
SPARK_AUTH_KEY = "secret"
CONTAINER = "driver"
EXECUTOR_CONTAINER = "executor"
# The root filesystem is read-only; these are the writable emptyDirs (the JVM's and Python's
# temporary files, and Spark's local dir on the driver, which defaults to java.io.tmpdir).
# Executors also get an emptyDir per spark.local.dir from Spark itself.
TMP_DIR = "/tmp"
# The API server as seen from a pod; the driver runs Spark in client mode against it.
K8S_MASTER = "k8s://https://kubernetes.default.svc"


@dataclass(frozen=True)
class RenderOptions:
    """Operator-wide choices that shape every consumer's children."""

    # The chart passes its consumer.image; this default is the same image at this version.
    image: str = "ghcr.io/antidote-dev/antidote-consumer:0.1.0"
    image_pull_policy: str = "IfNotPresent"
    metrics_port: int = 9090
    driver_port: int = 7078
    block_manager_port: int = 7079
    # The driver's endpoint for the executors' attempt reports (the live systemic-failure
    # breaker, consumer/antidote_consumer/driver/live_breaker.py).
    reports_port: int = 4044
    # The driver finishes its batch on SIGTERM (the consumer waits up to 120 s for it).
    termination_grace_seconds: int = 150
    # The ClusterRole (shipped by the chart) bound to each driver's ServiceAccount in its
    # namespace: the operator holds `bind` on it, not the permissions it grants.
    driver_cluster_role: str = "antidote-spark-driver"
    # The consumer image's non-root user (docker/consumer.Dockerfile), set explicitly so the
    # kubelet can verify runAsNonRoot for images whose USER is a name.
    run_as_user: int = 10001


def antidote_container(name: str, settings: EffectiveSettings, opts: RenderOptions,
                       args: list[str]) -> dict[str, Any]:
    """A container running `antidote <args>` in the consumer's image (the driver, the reader)."""
    return {"name": name, "image": settings.spark.image or opts.image,
            "imagePullPolicy": opts.image_pull_policy, "command": ["antidote"], "args": args}


def labels(consumer: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "antidote-consumer", "app.kubernetes.io/instance": consumer,
            "app.kubernetes.io/component": "driver", "app.kubernetes.io/managed-by": MANAGED_BY,
            LABEL_CONSUMER: consumer}


def selector(consumer: str) -> dict[str, str]:
    return {LABEL_CONSUMER: consumer}


def driver_host(consumer: str, namespace: str) -> str:
    """The headless Service's DNS name: executors reach the driver there."""
    return f"{consumer}.{namespace}.svc"


def metrics_url(consumer: str, namespace: str, opts: RenderOptions = RenderOptions()) -> str:
    return f"http://{driver_host(consumer, namespace)}:{opts.metrics_port}/metrics"


def _meta(name: str, consumer: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "labels": labels(consumer), **extra}
