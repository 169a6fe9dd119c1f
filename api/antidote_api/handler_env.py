"""The handler's environment on a QueueConsumer (spec.env, spec.envFrom, and the Secret and
ConfigMap volumes of spec.volumes), in Kubernetes' own shapes (core/v1 EnvVar, EnvFromSource).

Refs name objects of the consumer's own namespace: the shapes have no namespace field, and
unknown fields are refused (the models) or pruned (the server), so none can get in.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import ApiModel, Rule
from .types import ObjectName

# Environment variables the operator, Spark or the kubelet set in the driver and executor
# containers (builders/driver.py, Spark's executor pod, the consumer image, the dev runner):
# a handler's spec.env may not set them. One list: the CEL rules, the models, the builders'
# tests and the docs read it. An entry ending in `*` is a prefix.
RESERVED_ENV: tuple[str, ...] = (
    "SPARK_*", "PYSPARK_*", "ANTIDOTE_*", "KUBERNETES_*",
    "POD_NAME", "PYTHONPATH", "PYTHONHOME", "PYTHONUNBUFFERED", "JAVA_HOME", "PATH",
)
RESERVED_PREFIXES = tuple(e[:-1] for e in RESERVED_ENV if e.endswith("*"))
RESERVED_NAMES = tuple(e for e in RESERVED_ENV if not e.endswith("*"))


def reserved(name: str) -> bool:
    """Whether `name` is an environment variable the operator sets itself."""
    return name in RESERVED_NAMES or name.startswith(RESERVED_PREFIXES)


def _cel_list(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{i}'" for i in items) + "]"


_RESERVED_CEL = (f"!(self.name in {_cel_list(RESERVED_NAMES)}) && "
                 f"!{_cel_list(RESERVED_PREFIXES)}.exists(p, self.name.startsWith(p))")
_RESERVED_TEXT = ", ".join(RESERVED_ENV)
RESERVED_MESSAGE = f"is set by the operator or Spark (reserved: {_RESERVED_TEXT})"

# Kubernetes' own rule for environment variable names (apimachinery IsEnvVarName).
ENV_NAME_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
# A Secret's or ConfigMap's key (apimachinery IsConfigMapKey).
KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
# The fields of the pod a fieldRef may read (the kubelet's downward API, env form).
FIELD_PATHS = ("metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName",
               "spec.serviceAccountName", "status.hostIP", "status.podIP")


class SecretKeySelector(ApiModel):
    name: ObjectName = Field(description="The Secret, in the consumer's namespace.")
    key: str = Field(min_length=1, max_length=253, pattern=KEY_PATTERN, description="Its key.")
    optional: bool | None = Field(
        None, description="Start without the variable when the Secret or key is missing. "
                          "Default: false (the driver does not start; see docs/consumer.md).")


class ConfigMapKeySelector(ApiModel):
    name: ObjectName = Field(description="The ConfigMap, in the consumer's namespace.")
    key: str = Field(min_length=1, max_length=253, pattern=KEY_PATTERN, description="Its key.")
    optional: bool | None = Field(
        None, description="Start without the variable when the ConfigMap or key is missing. "
                          "Default: false.")


class FieldSelector(ApiModel):
    field_path: Literal[FIELD_PATHS] = Field(  # type: ignore[valid-type]
        description="The pod's field: " + ", ".join(f"`{p}`" for p in FIELD_PATHS) + ".")


class EnvVarSource(ApiModel):
    secret_key_ref: SecretKeySelector | None = Field(None, description="A key of a Secret.")
    config_map_key_ref: ConfigMapKeySelector | None = Field(None, description="A key of a ConfigMap.")
    field_ref: FieldSelector | None = Field(
        None, description="A field of the pod the handler runs in (the driver's or an executor's).")

    rules = (
        Rule("[has(self.secretKeyRef), has(self.configMapKeyRef), has(self.fieldRef)]"
             ".filter(x, x).size() == 1",
             "needs exactly one of secretKeyRef, configMapKeyRef or fieldRef",
             lambda s: [s.secret_key_ref, s.config_map_key_ref, s.field_ref].count(None) == 2),
    )


class EnvVar(ApiModel):
    name: str = Field(min_length=1, max_length=256, pattern=ENV_NAME_PATTERN,
                      description="Name of the variable; not one the operator sets: " + _RESERVED_TEXT
                                  + " (`*`: any suffix).")
    value: str | None = Field(None, max_length=32768, description="Its value.")
    value_from: EnvVarSource | None = Field(None, description="Where its value comes from.")

    rules = (
        Rule(_RESERVED_CEL, RESERVED_MESSAGE, lambda e: not reserved(e.name), field="name",
             message_cel=f"self.name + ' {RESERVED_MESSAGE}'", describe=lambda e: f"{e.name} {RESERVED_MESSAGE}"),
        Rule("!(has(self.value) && has(self.valueFrom))", "value and valueFrom are exclusive",
             lambda e: e.value is None or e.value_from is None, field="valueFrom"),
    )


class SecretEnvSource(ApiModel):
    name: ObjectName = Field(description="The Secret, in the consumer's namespace.")
    optional: bool | None = Field(None, description="Start without it when it is missing. Default: false.")


class ConfigMapEnvSource(ApiModel):
    name: ObjectName = Field(description="The ConfigMap, in the consumer's namespace.")
    optional: bool | None = Field(None, description="Start without it when it is missing. Default: false.")


class EnvFromSource(ApiModel):
    prefix: str | None = Field(
        None, max_length=256, pattern=ENV_NAME_PATTERN,
        description="Put before each key to make the variable's name; not a reserved prefix.")
    secret_ref: SecretEnvSource | None = Field(None, description="Every key of a Secret.")
    config_map_ref: ConfigMapEnvSource | None = Field(None, description="Every key of a ConfigMap.")

    rules = (
        Rule("has(self.secretRef) != has(self.configMapRef)", "needs exactly one of secretRef or configMapRef",
             lambda s: (s.secret_ref is None) != (s.config_map_ref is None)),
        Rule(f"!has(self.prefix) || !{_cel_list(RESERVED_PREFIXES)}.exists(p, self.prefix.startsWith(p))",
             f"must not start with a reserved prefix ({', '.join(RESERVED_PREFIXES)})",
             lambda s: s.prefix is None or not s.prefix.startswith(RESERVED_PREFIXES), field="prefix"),
    )


class KeyToPath(ApiModel):
    key: str = Field(min_length=1, max_length=253, pattern=KEY_PATTERN, description="The key.")
    # Relative, no `..` segment: the file stays inside the volume.
    path: str = Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9_-][A-Za-z0-9._-]*(/[A-Za-z0-9_-][A-Za-z0-9._-]*)*$",
                      description="Relative path of its file in the volume.")


class SecretVolumeSource(ApiModel):
    secret_name: ObjectName = Field(description="The Secret, in the consumer's namespace.")
    items: list[KeyToPath] | None = Field(
        None, max_length=64, description="Only these keys, at these paths. Default: every key, as its own file.")
    optional: bool | None = Field(None, description="Mount an empty directory when it is missing. Default: false.")


class ConfigMapVolumeSource(ApiModel):
    name: ObjectName = Field(description="The ConfigMap, in the consumer's namespace.")
    items: list[KeyToPath] | None = Field(
        None, max_length=64, description="Only these keys, at these paths. Default: every key, as its own file.")
    optional: bool | None = Field(None, description="Mount an empty directory when it is missing. Default: false.")
