"""What a consumer's own spec adds to the pods where its handler runs (the driver and the
executors) and to its reader Jobs: the handler's environment (spec.env, spec.envFrom, Secret
and ConfigMap volumes) and placement and identity (spec.spark's imagePullSecrets,
nodeSelector, tolerations, affinity, priorityClassName, ServiceAccount annotations). Pure data.
"""

from __future__ import annotations

from typing import Any, Literal

from antidote_api.placement import Placement, effective
from antidote_api.semantics import EffectiveSettings
from antidote_api.wire import USER_ANNOTATIONS

from .common import EXECUTOR_PULL_SECRETS_ANNOTATION

# The pods' name of a user's Secret or ConfigMap volume: prefixed, as claims are ("claim-"),
# so it never meets one of the operator's ("settings", "tmp", "spark-auth", "secret-<i>").
USER_VOLUME_PREFIX = "user-"

Side = Literal["driver", "executor"]


def env(settings: EffectiveSettings) -> list[dict[str, Any]]:
    """spec.env as container env entries (the models' wire form is Kubernetes' EnvVar)."""
    return [e.wire() for e in settings.env or []]


def env_from(settings: EffectiveSettings) -> list[dict[str, Any]]:
    return [e.wire() for e in settings.env_from or []]


def volumes(settings: EffectiveSettings) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The Secret and ConfigMap volumes of spec.volumes and their (read-only) mounts."""
    vols: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    for v in settings.volumes or []:
        if not v.handler_side:
            continue
        name = f"{USER_VOLUME_PREFIX}{v.name}"
        if v.secret is not None:
            vols.append({"name": name, "secret": v.secret.wire()})
        elif v.config_map is not None:
            vols.append({"name": name, "configMap": v.config_map.wire()})
        mounts.append({"name": name, "mountPath": v.mount_path, "readOnly": True})
    return vols, mounts


def referenced_secrets(settings: EffectiveSettings) -> list[str]:
    """Every Secret the handler's environment reads (env, envFrom, volumes), sorted."""
    names = {e.value_from.secret_key_ref.name for e in settings.env or []
             if e.value_from is not None and e.value_from.secret_key_ref is not None}
    names |= {e.secret_ref.name for e in settings.env_from or [] if e.secret_ref is not None}
    names |= {v.secret.secret_name for v in settings.volumes or [] if v.secret is not None}
    return sorted(names)


def referenced_config_maps(settings: EffectiveSettings) -> list[str]:
    names = {e.value_from.config_map_key_ref.name for e in settings.env or []
             if e.value_from is not None and e.value_from.config_map_key_ref is not None}
    names |= {e.config_map_ref.name for e in settings.env_from or [] if e.config_map_ref is not None}
    names |= {v.config_map.name for v in settings.volumes or [] if v.config_map is not None}
    return sorted(names)


def add_to_container(container: dict[str, Any], settings: EffectiveSettings) -> None:
    """The handler's env, envFrom and volume mounts, after what the container already has."""
    extra = env(settings)
    if extra:
        container["env"] = [*container.get("env", []), *extra]
    sources = env_from(settings)
    if sources:
        container["envFrom"] = sources
    _, mounts = volumes(settings)
    if mounts:
        container["volumeMounts"] = [*container.get("volumeMounts", []), *mounts]


def add_volumes(pod_spec: dict[str, Any], settings: EffectiveSettings) -> None:
    vols, _ = volumes(settings)
    if vols:
        pod_spec["volumes"] = [*pod_spec.get("volumes", []), *vols]


def placement(settings: EffectiveSettings, side: Side) -> Placement:
    spark = settings.spark
    return effective(spark, spark.driver if side == "driver" else spark.executor)


def add_placement(pod_spec: dict[str, Any], settings: EffectiveSettings, side: Side) -> None:
    """imagePullSecrets and the side's placement, as pod spec fields (unset ones left out, so a
    consumer that sets none has the pod spec it had before they existed)."""
    pull = settings.spark.image_pull_secrets
    if pull:
        pod_spec["imagePullSecrets"] = [r.wire() for r in pull]
    pod_spec.update(placement(settings, side).wire())


def service_account_annotations(settings: EffectiveSettings, side: Side) -> dict[str, str]:
    """The side's spec.spark.<side>.serviceAccountAnnotations, and which keys they are
    (USER_ANNOTATIONS) when there are any."""
    own = settings.spark.driver if side == "driver" else settings.spark.executor
    out = dict(own.service_account_annotations or {})
    if out:
        out[USER_ANNOTATIONS] = ",".join(sorted(out))
    return out


def executor_annotations(settings: EffectiveSettings) -> dict[str, str]:
    """What the driver's ServiceAccount says of its executors' pull secrets, for the chart's
    admission policy (the executor-* annotations, builders/common.py)."""
    # Always written, "" for none: a pull secret taken out of the spec is taken out here too
    # (apply patches annotations that differ, and removes none).
    pull = settings.spark.image_pull_secrets or []
    return {EXECUTOR_PULL_SECRETS_ANNOTATION: ",".join(sorted({r.name for r in pull}))}


# Fields added to the settings after consumers existed: left out of the settings document
# while unset, so its hash (which rolls the driver) stays what it was for a consumer that does
# not use them, and an operator upgrade restarts no driver.
_NEW_TOP = ("volumes", "env", "envFrom", "routes")
_NEW_AGE = ("maxAge",)  # in retries and validation
_NEW_SPARK = ("imagePullSecrets", "nodeSelector", "tolerations", "affinity", "priorityClassName")
_NEW_SIDE = ("nodeSelector", "tolerations", "affinity", "priorityClassName", "serviceAccountAnnotations")
_NEW_VOLUME = ("claimName", "secret", "configMap")
_NEW_SOURCE = ("valueFormat", "keyFormat", "schemaRegistry")
_NEW_SINK_KAFKA = ("valueFormat", "schemaRegistry")


def without_unset_new(doc: dict[str, Any]) -> dict[str, Any]:
    """The settings document (wire form, with nulls) without the new fields that are null."""
    def drop(d: dict[str, Any], keys: tuple[str, ...]) -> None:
        for k in keys:
            if k in d and d[k] is None:
                del d[k]
    drop(doc, _NEW_TOP)
    drop(doc.get("retries") or {}, _NEW_AGE)
    drop(doc.get("validation") or {}, _NEW_AGE)
    drop(doc.get("source") or {}, _NEW_SOURCE)
    drop((doc.get("sink") or {}).get("kafka") or {}, _NEW_SINK_KAFKA)
    spark = doc.get("spark") or {}
    drop(spark, _NEW_SPARK)
    for side in ("driver", "executor"):
        drop(spark.get(side) or {}, _NEW_SIDE)
    for v in doc.get("volumes") or []:
        drop(v, _NEW_VOLUME)
    return doc
