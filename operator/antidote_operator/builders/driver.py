"""Pure builders of a QueueConsumer's child objects: plain dicts in, plain dicts out.

Nothing here talks to the API server, so every manifest is unit-tested as data. Owner
references come from `kopf.adopt` in `build_children` (also pure: it edits the dicts).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

import kopf
import yaml

from antidote_api.semantics import EffectiveSettings
from antidote_api.names import child_names
from antidote_api.wire import CONFIG_DIR, HEALTH_PATH, SETTINGS_KEY

# The shared layout (common.py), also reachable from here for the modules that import it so.
from . import handler_pods
from .common import (  # noqa: F401
    LABEL_CONSUMER, SETTINGS_HASH, EXECUTOR_SA_ANNOTATION, EXECUTOR_IMAGE_ANNOTATION,
    EXECUTOR_SECRETS_ANNOTATION, EXECUTOR_PULL_SECRETS_ANNOTATION, SPARK_DEFAULTS_KEY, EXECUTOR_TEMPLATE_KEY,
    SECRETS_DIR, SPARK_AUTH_DIR, SPARK_AUTH_KEY, CONTAINER, EXECUTOR_CONTAINER, TMP_DIR,
    K8S_MASTER, RenderOptions, antidote_container, labels, selector, driver_host,
    metrics_url, _meta)

# libyaml when present: the pure-Python dumper is most of a reconcile's CPU.
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


# --- settings --------------------------------------------------------------------------

def settings_document(settings: EffectiveSettings) -> str:
    # Full dump with nulls: EffectiveSettings has required-but-nullable fields (sink,
    # validation), so the exclude_none `wire()` form would not load back.
    # Fields added later are left out while unset, so the document (and the settings hash
    # that rolls the driver) of a consumer that does not use them stays what it was.
    doc = settings.model_dump(mode="json", by_alias=True)
    return yaml.dump(handler_pods.without_unset_new(doc), Dumper=_Dumper, sort_keys=False)


_SPARK_BYTES = {"": 1 << 20, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def spark_mib(memory: str) -> int:
    """Spark's byte string (`512m`, `2g`, `1024k`; no unit = MiB) in MiB, rounded up."""
    m = re.fullmatch(r"([0-9]+)([kKmMgGtTpP]?)[bB]?", memory)
    if m is None:
        raise ValueError(f"not a Spark memory size: {memory!r}")
    nbytes = int(m.group(1)) * _SPARK_BYTES[m.group(2).lower()]
    return -(-nbytes // (1 << 20))


def container_memory_mib(memory: str) -> int:
    # Spark's own rule for a JVM container: heap + max(384 MiB, 10 %) of overhead.
    heap = spark_mib(memory)
    return heap + max(384, heap // 10)


def quantity_mib(mib: int) -> str:
    # The API server stores quantities in canonical form; write that form so the stored
    # object compares equal and is not patched again.
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def secret_names(settings: EffectiveSettings) -> list[str]:
    """Secrets the consumer reads Kafka client properties (and the Schema Registry's
    credentials, the HMAC key of quarantine.hashKeyRef) from, by reference, never copied."""
    refs: list = [settings.source.secret_ref]
    if settings.quarantine is not None:
        refs.append(settings.quarantine.hash_key_ref)
    if settings.source.schema_registry is not None:
        refs.append(settings.source.schema_registry.secret_ref)
    if settings.sink is not None and settings.sink.kafka is not None:
        refs.append(settings.sink.kafka.secret_ref)
        if settings.sink.kafka.schema_registry is not None:
            refs.append(settings.sink.kafka.schema_registry.secret_ref)
    return sorted({r.name for r in refs if r is not None})


def spark_defaults(settings: EffectiveSettings, opts: RenderOptions) -> dict[str, str]:
    """Cluster-mode Spark configuration of the driver (client mode, executors as pods).

    It lives in `spark-defaults.conf` next to the settings rather than in them: the
    settings stay what the user wrote plus the policy, and the dev runner drops this file.
    The user's `spec.spark.conf` (applied by the consumer) may add to it but not override
    it: the keys set here are in `antidote_api.spark_conf.OWNED`, which the CRD refuses.
    """
    name, ns = settings.consumer, settings.namespace
    spark = settings.spark
    n = child_names(name)
    conf = {
        "spark.submit.deployMode": "client",
        "spark.kubernetes.namespace": ns,
        "spark.kubernetes.container.image": spark.image or opts.image,
        "spark.kubernetes.container.image.pullPolicy": opts.image_pull_policy,
        # Executors are owned by the driver pod, so they go when it goes.
        "spark.kubernetes.driver.pod.name": "${env:POD_NAME}",
        # The driver runs in client mode under its pod's ServiceAccount; executors under
        # their own, which has no permissions and no token (the pod template says so too).
        "spark.kubernetes.authenticate.executor.serviceAccountName": n.executor_service_account,
        "spark.kubernetes.executor.podTemplateFile": f"{CONFIG_DIR}/{EXECUTOR_TEMPLATE_KEY}",
        "spark.kubernetes.executor.podTemplateContainerName": EXECUTOR_CONTAINER,
        # Client mode has no driver Service of Spark's, and with volume keys refused there are
        # no on-demand claims: Spark is told not to delete either (both default to true in
        # Spark 4.0, a deletecollection at stop), so its Role needs no such permission.
        "spark.kubernetes.driver.service.deleteOnTermination": "false",
        "spark.kubernetes.driver.ownPersistentVolumeClaim": "false",
        "spark.kubernetes.driver.reusePersistentVolumeClaim": "false",
        "spark.kubernetes.executor.podNamePrefix": name,
        f"spark.kubernetes.executor.label.{LABEL_CONSUMER}": name,
        "spark.kubernetes.executor.label.app.kubernetes.io/component": "executor",
        "spark.driver.host": driver_host(name, ns),
        "spark.driver.bindAddress": "0.0.0.0",
        "spark.driver.port": str(opts.driver_port),
        "spark.driver.blockManager.port": str(opts.block_manager_port),
        "spark.driver.cores": str(spark.driver.cores),
        # The root filesystem is read-only and Spark's in-memory catalog creates its default
        # warehouse directory (./spark-warehouse, in the image's home) on first use.
        "spark.sql.warehouse.dir": f"{TMP_DIR}/spark-warehouse",
        "spark.executor.instances": str(spark.executor.instances),
        "spark.executor.cores": str(spark.executor.cores),
        "spark.executor.memory": spark.executor.memory,
    }
    for secret in secret_names(settings):
        conf[f"spark.kubernetes.executor.secrets.{secret}"] = f"{SECRETS_DIR}/{secret}"
    # RPC between driver and executors is authenticated with the consumer's own secret, read
    # from a file on both sides: with a file Spark does not put the secret in the executor
    # pods' environment (readable by anyone who may get pods).
    conf["spark.authenticate"] = "true"
    conf["spark.authenticate.secret.file"] = f"{SPARK_AUTH_DIR}/{SPARK_AUTH_KEY}"
    # ...and encrypted (AES, keys agreed from that secret): Spark's Kafka source ships its
    # `kafka.*` options (a Secret's SASL password, TLS key) to the executors inside tasks,
    # and blocks carry messages, across the pod network. Spark 4.2's defaults are kept for
    # old peers, which a consumer has none of: the second key exchange (a KDF over its
    # output), GCM (authenticated: a task cannot be altered in transit, as CTR's can), and
    # no fallback to SASL, whose traffic is not encrypted.
    conf["spark.network.crypto.enabled"] = "true"
    conf["spark.network.crypto.authEngineVersion"] = "2"
    conf["spark.network.crypto.cipher"] = "AES/GCM/NoPadding"
    conf["spark.network.crypto.saslFallback"] = "false"
    conf[f"spark.kubernetes.executor.secrets.{n.spark_auth_secret}"] = SPARK_AUTH_DIR
    return conf


def render_spark_defaults(conf: Mapping[str, str]) -> str:
    return "".join(f"{k} {v}\n" for k, v in conf.items())


def pod_security_context(opts: RenderOptions) -> dict[str, Any]:
    """The `restricted` Pod Security Standard, pod level (driver and executors)."""
    uid = opts.run_as_user
    return {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid, "fsGroup": uid,
            "seccompProfile": {"type": "RuntimeDefault"}}


def container_security_context() -> dict[str, Any]:
    """The `restricted` Pod Security Standard, container level, and a read-only root."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True, "runAsNonRoot": True}


def tmp_volume() -> tuple[dict[str, Any], dict[str, Any]]:
    return {"name": "tmp", "emptyDir": {}}, {"name": "tmp", "mountPath": TMP_DIR}


def executor_pod_template(settings: EffectiveSettings, opts: RenderOptions) -> dict[str, Any]:
    """What Spark starts each executor pod from (`spark.kubernetes.executor.podTemplateFile`).

    Spark fills in the image, command, resources, env, ports and its conf volume; the
    security context, the ServiceAccount without a token and the writable /tmp come from here.
    """
    name = settings.consumer
    volume, mount = tmp_volume()
    container = {"name": EXECUTOR_CONTAINER, "workingDir": TMP_DIR,
                 "securityContext": container_security_context(), "volumeMounts": [mount]}
    # The handler's environment and volumes (spec.env, envFrom, Secret and ConfigMap volumes):
    # Spark keeps the template container's env, envFrom and mounts and adds its own.
    handler_pods.add_to_container(container, settings)
    spec = {
        "serviceAccountName": child_names(name).executor_service_account,
        "automountServiceAccountToken": False,
        "securityContext": pod_security_context(opts),
        "containers": [container],
        "volumes": [volume],
    }
    handler_pods.add_volumes(spec, settings)
    handler_pods.add_placement(spec, settings, "executor")
    # Labels come from spark.kubernetes.executor.label.* (Spark adds its own too).
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": spec}


def config_data(settings: EffectiveSettings, opts: RenderOptions) -> dict[str, str]:
    return {SETTINGS_KEY: settings_document(settings),
            SPARK_DEFAULTS_KEY: render_spark_defaults(spark_defaults(settings, opts)),
            EXECUTOR_TEMPLATE_KEY: yaml.dump(executor_pod_template(settings, opts), Dumper=_Dumper,
                                             sort_keys=False)}


def settings_hash(data: Mapping[str, str]) -> str:
    """Changes whenever the ConfigMap does; on the pod template it rolls the driver."""
    return hashlib.sha256(json.dumps(dict(data), sort_keys=True).encode()).hexdigest()[:16]


# --- the children ----------------------------------------------------------------------

def build_configmap(settings: EffectiveSettings, opts: RenderOptions) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _meta(child_names(settings.consumer).configmap, settings.consumer),
            "data": config_data(settings, opts)}


def executor_secrets(settings: EffectiveSettings) -> list[str]:
    """The Secrets an executor pod may use: those Spark mounts in each executor
    (`spark.kubernetes.executor.secrets.*`) and those the handler's environment reads."""
    return sorted({*secret_names(settings), child_names(settings.consumer).spark_auth_secret,
                   *handler_pods.referenced_secrets(settings)})


def build_service_account(settings: EffectiveSettings, opts: RenderOptions) -> dict[str, Any]:
    """The driver's: its pod mounts a token, which the RoleBinding lets manage executors.
    Its annotations describe those executors, for the chart's admission policy: the same
    ServiceAccount, image and Secrets `spark_defaults` gives Spark."""
    consumer = settings.consumer
    # The user's (spec.spark.driver.serviceAccountAnnotations, never under antidote.dev/), then
    # the operator's own.
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": _meta(child_names(consumer).service_account, consumer, annotations={
                **handler_pods.service_account_annotations(settings, "driver"),
                **handler_pods.executor_annotations(settings),
                EXECUTOR_SA_ANNOTATION: child_names(consumer).executor_service_account,
                EXECUTOR_IMAGE_ANNOTATION: settings.spark.image or opts.image,
                EXECUTOR_SECRETS_ANNOTATION: ",".join(executor_secrets(settings))})}


def build_executor_service_account(settings: EffectiveSettings) -> dict[str, Any]:
    """The executors': bound to nothing, and no token is mounted from it (whatever identity
    annotations spec.spark.executor.serviceAccountAnnotations gives it)."""
    consumer = settings.consumer
    annotations = handler_pods.service_account_annotations(settings, "executor")
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": _meta(child_names(consumer).executor_service_account, consumer,
                              **({"annotations": annotations} if annotations else {})),
            "automountServiceAccountToken": False}


# What a Spark 4.0 driver in client mode does with the API server, and no more (read from
# Spark's KubernetesClusterSchedulerBackend and ExecutorPodsAllocator): it gets its own pod
# (owner of the executors), creates, watches, lists, labels (patch) and deletes executor
# pods, deleting what is left by label at stop (deletecollection), and creates one ConfigMap
# of executor conf files, deleted by label at stop (nothing reads it through the API). No Services (client mode; deleteOnTermination
# is off), no PersistentVolumeClaims (volume keys are refused in spec.spark.conf, and owning
# and reusing claims is off). tests/integration/test_pod_security.py runs a real Spark
# driver under exactly these rules and fails on any 403 in its log.
# The chart ships these rules as the driver ClusterRole; a test keeps the two equal.
DRIVER_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["pods"],
     "verbs": ["get", "list", "watch", "create", "patch", "delete", "deletecollection"]},
    {"apiGroups": [""], "resources": ["configmaps"],
     "verbs": ["create", "deletecollection"]},
]


def build_role_binding(consumer: str, opts: RenderOptions) -> dict[str, Any]:
    """The chart's driver ClusterRole, bound in the consumer's namespace only."""
    n = child_names(consumer)
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": _meta(n.role_binding, consumer),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": opts.driver_cluster_role},
            "subjects": [{"kind": "ServiceAccount", "name": n.service_account}]}


def build_spark_auth_secret(consumer: str, secret: bytes) -> dict[str, Any]:
    """The consumer's secret for Spark's RPC authentication. Not pure data like the others
    (`secret` is random): the operator creates it once and never reads it back."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": _meta(child_names(consumer).spark_auth_secret, consumer),
            "data": {SPARK_AUTH_KEY: base64.b64encode(secret).decode()}}


def _ports(opts: RenderOptions) -> list[tuple[str, int]]:
    return [("driver", opts.driver_port), ("blockmanager", opts.block_manager_port),
            ("metrics", opts.metrics_port), ("reports", opts.reports_port)]


def build_service(consumer: str, opts: RenderOptions) -> dict[str, Any]:
    """Headless: its DNS name resolves to the driver pod (driver host, metrics target)."""
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": _meta(child_names(consumer).service, consumer),
            # The driver pod only: executors carry the consumer label too (Spark's
            # executor.label conf), and the driver host must not resolve to them.
            "spec": {"clusterIP": "None",
                     "selector": {**selector(consumer), "app.kubernetes.io/component": "driver"},
                     # Executors connect while the driver is still starting.
                     "publishNotReadyAddresses": True,
                     "ports": [{"name": n, "port": p, "targetPort": p, "protocol": "TCP"}
                               for n, p in _ports(opts)]}}


def consumer_args(opts: RenderOptions) -> list[str]:
    return ["consumer", "--settings", f"{CONFIG_DIR}/{SETTINGS_KEY}",
            "--metrics-port", str(opts.metrics_port), "--reports-port", str(opts.reports_port),
            "--master", K8S_MASTER]


def settings_volumes(settings: EffectiveSettings, *, only_settings: bool = False
                     ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Volumes and mounts of the settings ConfigMap (only settings.yaml when `only_settings`)
    and of each secretRef, at the paths the consumer and the reader read them from, and the
    consumer's own claims (spec.volumes), at the paths it names."""
    secrets = secret_names(settings)
    configmap: dict[str, Any] = {"name": child_names(settings.consumer).configmap}
    if only_settings:
        configmap["items"] = [{"key": SETTINGS_KEY, "path": SETTINGS_KEY}]
    volumes = [{"name": "settings", "configMap": configmap}] + [
        {"name": f"secret-{i}", "secret": {"secretName": s}} for i, s in enumerate(secrets)]
    mounts = [{"name": "settings", "mountPath": CONFIG_DIR, "readOnly": True}] + [
        {"name": f"secret-{i}", "mountPath": f"{SECRETS_DIR}/{s}", "readOnly": True}
        for i, s in enumerate(secrets)]
    # Prefixed, so a user's volume name never meets one of the operator's ("settings", "tmp").
    for v in settings.volumes or []:
        if v.handler_side:  # Secrets and ConfigMaps: where the handler runs (handler_pods)
            continue
        volumes.append({"name": f"claim-{v.name}", "persistentVolumeClaim": {
            "claimName": v.claim_name, **({"readOnly": True} if v.read_only else {})}})
        mounts.append({"name": f"claim-{v.name}", "mountPath": v.mount_path,
                       **({"readOnly": True} if v.read_only else {})})
    return volumes, mounts


def build_deployment(settings: EffectiveSettings, *, replicas: int, opts: RenderOptions,
                     config_hash: str) -> dict[str, Any]:
    name = settings.consumer
    n = child_names(name)
    driver = settings.spark.driver
    memory = quantity_mib(container_memory_mib(driver.memory))
    volumes, mounts = settings_volumes(settings)
    tmp, tmp_mount = tmp_volume()
    volumes += [tmp, {"name": "spark-auth", "secret": {"secretName": n.spark_auth_secret,
                                                       "defaultMode": 0o440}}]
    mounts += [tmp_mount, {"name": "spark-auth", "mountPath": SPARK_AUTH_DIR, "readOnly": True}]
    container = {
        **antidote_container(CONTAINER, settings, opts, consumer_args(opts)),
        # Spark creates directories in its working directory (the session's `artifacts`),
        # and the image's home is on the read-only root: work in the writable /tmp.
        "workingDir": TMP_DIR,
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "SPARK_CONF_DIR", "value": CONFIG_DIR},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
        ],
        "ports": [{"name": pn, "containerPort": p, "protocol": "TCP"} for pn, p in _ports(opts)],
        "resources": {"requests": {"cpu": str(driver.cores), "memory": memory},
                      "limits": {"memory": memory}},
        # /metrics is up before Spark starts. /healthz fails when a batch's run (a Spark job,
        # a local retry run) is past its bound from the settings, or with none in flight
        # after max(10m, 10 x attemptTimeout) without progress (a ledger commit or the retry
        # pump hung; docs/consumer.md, "Liveness"): a slow batch does not get it killed.
        "readinessProbe": {"httpGet": {"path": "/metrics", "port": "metrics"},
                           "periodSeconds": 10},
        "livenessProbe": {"httpGet": {"path": HEALTH_PATH, "port": "metrics"},
                          "periodSeconds": 30, "timeoutSeconds": 10, "failureThreshold": 3},
        # A driver that refuses its settings (exit 2) says why in one line: the kubelet keeps
        # it as the termination message, which the operator puts in the Ready condition.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": mounts,
        "securityContext": container_security_context(),
    }
    handler_pods.add_to_container(container, settings)
    pod_spec = {
        "serviceAccountName": n.service_account,
        # Spark's Kubernetes client in the driver needs the token (see
        # docs/operator.md, "Security", for what else in the pod can read it).
        "automountServiceAccountToken": True,
        "terminationGracePeriodSeconds": opts.termination_grace_seconds,
        "securityContext": pod_security_context(opts),
        "containers": [container],
        "volumes": volumes,
    }
    handler_pods.add_volumes(pod_spec, settings)
    handler_pods.add_placement(pod_spec, settings, "driver")
    pod_labels = labels(name)
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": _meta(n.deployment, name),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector(name)},
            # Never two drivers of one consumer: they would share a checkpoint and a
            # transactional id. Recreate stops the old one before the new one starts.
            "strategy": {"type": "Recreate"},
            "template": {
                "metadata": {"labels": pod_labels,
                             "annotations": {SETTINGS_HASH: config_hash,
                                             "prometheus.io/scrape": "true",
                                             "prometheus.io/port": str(opts.metrics_port)}},
                "spec": pod_spec,
            },
        },
    }


def build_children(owner: Mapping[str, Any], settings: EffectiveSettings, *, replicas: int,
                   opts: RenderOptions) -> list[dict[str, Any]]:
    """Every child of the QueueConsumer `owner` (its body), owned by it, in creation order."""
    cm = build_configmap(settings, opts)  # its data, rendered once, is also what the hash is of
    children = [
        cm,
        build_service_account(settings, opts),
        build_executor_service_account(settings),
        build_role_binding(settings.consumer, opts),
        build_service(settings.consumer, opts),
        build_deployment(settings, replicas=replicas, opts=opts, config_hash=settings_hash(cm["data"])),
    ]
    # Owner references let a real cluster's garbage collector remove the children; the
    # operator also deletes them itself (the local stack runs no garbage collector). Kopf
    # types the owner as its Body (a view of an event's body); it only reads a mapping.
    kopf.adopt(children, owner=dict(owner))  # type: ignore[arg-type]
    return children
