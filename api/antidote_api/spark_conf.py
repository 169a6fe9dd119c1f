"""Spark configuration keys the operator owns, which a QueueConsumer's `spec.spark.conf` may
not set: one list, read by the CRD's CEL rule (the API server refuses the object) and by the
models (the consumer refuses its settings file with exit 2).

Taken from Spark's "Running on Kubernetes" and "Security" configuration pages, and checked
against every `spark.kubernetes.*` key of Spark 4.2's `deploy.k8s.Config` (the keys left to
the consumer tune allocation, polling, resources and rolling): every key that chooses the
master, the namespace, the API credentials and ServiceAccounts, pod names, labels,
annotations, nodes, scheduler and templates, the image and its pull Secrets, what is mounted
into the pods, the driver's address and ports, or the RPC authentication and encryption.
Letting a consumer set them would undo the least-privilege set-up (an executor under the
driver's ServiceAccount, a Secret of another app mounted, a hostPath volume, a label a
NetworkPolicy trusts, a node it should not run on) or break the wiring (executors that
cannot reach the driver). tests/unit/test_api_spark_conf_audit.py reads the keys from Spark.
A key ending in `*` is a prefix: every key that starts with the part before the `*`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Owned:
    keys: tuple[str, ...]
    why: str


OWNED: tuple[Owned, ...] = (
    Owned(("spark.master", "spark.submit.deployMode", "spark.kubernetes.context",
           "spark.kubernetes.driver.master"),
          "the master and the API server: the driver runs in client mode against its own cluster"),
    Owned(("spark.kubernetes.namespace",), "the namespace: the consumer's own"),
    Owned(("spark.kubernetes.authenticate.*", "spark.kubernetes.trust.certificates"),
          "API credentials, the API server's certificate check, and the driver's and "
          "executors' ServiceAccounts"),
    Owned(("spark.kubernetes.driver.pod.name", "spark.kubernetes.executor.podNamePrefix",
           "spark.kubernetes.driver.resourceNamePrefix"),
          "pod and resource names"),
    # Every label, not only the operator's own: a label is identity to Services,
    # NetworkPolicies, PodMonitors and admission policies that select pods by it.
    Owned(("spark.kubernetes.driver.label.*", "spark.kubernetes.executor.label.*",
           "spark.kubernetes.executor.decommissionLabel",
           "spark.kubernetes.executor.decommissionLabelValue"),
          "pod labels: what Services, NetworkPolicies and monitors select pods by"),
    # Annotations change what the cluster does with a pod: AppArmor profiles, sidecar and
    # secret injectors (service meshes, Vault) that admission webhooks act on.
    Owned(("spark.kubernetes.driver.annotation.*", "spark.kubernetes.executor.annotation.*"),
          "pod annotations: security profiles and injectors act on them"),
    Owned(("spark.kubernetes.node.selector.*", "spark.kubernetes.driver.node.selector.*",
           "spark.kubernetes.executor.node.selector.*", "spark.kubernetes.scheduler.name",
           "spark.kubernetes.driver.scheduler.name", "spark.kubernetes.executor.scheduler.name"),
          "where pods run: node selectors and the scheduler"),
    Owned(("spark.kubernetes.driver.podTemplateFile", "spark.kubernetes.executor.podTemplateFile",
           "spark.kubernetes.driver.podTemplateContainerName",
           "spark.kubernetes.executor.podTemplateContainerName",
           "spark.kubernetes.driver.pod.featureSteps", "spark.kubernetes.executor.pod.featureSteps",
           "spark.kubernetes.driver.pod.excludedFeatureSteps",
           "spark.kubernetes.executor.pod.excludedFeatureSteps"),
          "pod templates and pod-building code: they carry the pods' security context"),
    Owned(("spark.kubernetes.container.image", "spark.kubernetes.container.image.pullPolicy",
           "spark.kubernetes.container.image.pullSecrets",
           "spark.kubernetes.driver.container.image", "spark.kubernetes.executor.container.image"),
          "the image (`spec.spark.image`) and the Secrets it is pulled with"),
    Owned(("spark.kubernetes.driver.secrets.*", "spark.kubernetes.executor.secrets.*",
           "spark.kubernetes.driver.secretKeyRef.*", "spark.kubernetes.executor.secretKeyRef.*",
           "spark.kubernetes.kerberos.*", "spark.kubernetes.hadoop.configMapName"),
          "Secret and ConfigMap mounts: Kafka credentials come from `secretRef`s"),
    Owned(("spark.kubernetes.driver.volumes.*", "spark.kubernetes.executor.volumes.*", "spark.local.dir"),
          "volumes (hostPath among them) and the writable scratch directories of a read-only root"),
    Owned(("spark.kubernetes.allocation.pods.allocator",
           "spark.kubernetes.driver.service.deleteOnTermination",
           "spark.kubernetes.driver.ownPersistentVolumeClaim",
           "spark.kubernetes.driver.reusePersistentVolumeClaim"),
          "what the driver asks the API server for: its Role allows executor pods and their "
          "ConfigMap only (no Services, no PersistentVolumeClaims)"),
    Owned(("spark.driver.host", "spark.driver.bindAddress", "spark.driver.port",
           "spark.driver.blockManager.port", "spark.kubernetes.executor.useDriverPodIP"),
          "the driver's address and ports: the consumer's headless Service"),
    Owned(("spark.authenticate", "spark.authenticate.*", "spark.network.crypto.*"),
          "RPC authentication and encryption between driver and executors, with the "
          "consumer's own secret (task parameters carry Kafka credentials)"),
)

KEYS: tuple[str, ...] = tuple(k for group in OWNED for k in group.keys)
EXACT: tuple[str, ...] = tuple(k for k in KEYS if not k.endswith("*"))
PREFIXES: tuple[str, ...] = tuple(k[:-1] for k in KEYS if k.endswith("*"))


def is_owned(key: str) -> bool:
    return key in EXACT or key.startswith(PREFIXES)


def owned_keys(conf: Mapping[str, str] | Iterable[str] | None) -> list[str]:
    """The keys of `conf` the operator owns, in order."""
    return [k for k in (conf or ()) if is_owned(k)]


def _cel_list(items: Iterable[str]) -> str:
    # The keys hold no quote or backslash, so a plain single-quoted CEL string is exact.
    assert all("'" not in i and "\\" not in i for i in items)
    return "[" + ", ".join(f"'{i}'" for i in items) + "]"


def cel_is_owned(var: str) -> str:
    """CEL for "key `var` is owned": an exact key or a prefix (startsWith keeps the cost
    estimate small even for keys of unbounded length, unlike a regex)."""
    return f"({var} in {_cel_list(EXACT)} || {_cel_list(PREFIXES)}.exists(p, {var}.startsWith(p)))"


RULE_CEL = f"!has(self.conf) || !self.conf.exists(k, {cel_is_owned('k')})"
MESSAGE = ("sets keys the operator owns (master, namespace, ServiceAccounts, pod names, labels, "
           "annotations, node selectors and templates, Secret and volume mounts, driver host, RPC "
           "authentication and encryption)")
# The server names the first such key it finds: joining them all is beyond the API server's
# cost budget for a map of unbounded keys (refused at CRD creation, measured).
MESSAGE_CEL = (f"'sets ' + self.conf.filter(k, {cel_is_owned('k')})[0] + ', a key the operator owns "
               "(see docs/api.md, \"Spark configuration the operator owns\")'")


def describe(conf: Mapping[str, str] | None) -> str:
    """MESSAGE_CEL's message for the models, naming every such key."""
    keys = owned_keys(conf)
    return (f"sets {', '.join(keys)}, {'a key' if len(keys) == 1 else 'keys'} the operator owns "
            "(see docs/api.md, \"Spark configuration the operator owns\")")


# --- Antidote's own settings in spec.spark.conf ------------------------------------------
# Tuning knobs of the consumer that are not part of the API's fields: read from
# `spec.spark.conf` (so Spark carries them like any other setting), checked by the same rule
# as the keys above (the API server and the models), documented in docs/api.md from here.
ANTIDOTE_PREFIX = "spark.antidote."


@dataclass(frozen=True)
class Tunable:
    key: str
    default: int
    meaning: str


TUNABLE_MAX = 999_999_999  # every value is a whole number from 0 to this (up to 9 digits)


TUNABLES: tuple[Tunable, ...] = (
    Tunable("spark.antidote.retry.localMaxRecords", 10_000,
            "A retry cycle with fewer due records than this (counted by offsets, so transaction "
            "markers and other consumers' records too) is read by the driver and run in its local "
            "worker process; from this many on, the executors read and run it like a source "
            "batch (Spark's Kafka batch source over the planned offsets). A Spark job costs about "
            "a second whatever its size; 0 sends every cycle to the executors. A retry batch holds "
            "at most `maxMessagesPerBatch` offsets, so with that below this limit every "
            "cycle runs locally."),
    Tunable("spark.antidote.tasksPerCore", 4,
            "At most this many tasks per executor core (Spark's defaultParallelism) in a batch's "
            "Spark job: a source topic with more partitions than that has several of them read "
            "one after the other by one task (a coalesce, no shuffle). Each task costs its slot "
            "a fixed time (scheduling, the Python worker's round trip), so with one task per "
            "partition a batch of 512 partitions took 15.7 s on 2 cores however few messages it "
            "had (docs/scaling.md). 0: one task per partition, Spark's own."),
    Tunable("spark.antidote.taskSettle", 1,
            "1: with an exactly-once Kafka sink, a task writes the retry and disposition records "
            "of the failures it may settle in its chunk's transaction, once the live breaker says "
            "yes (docs/consumer.md, \"Failures settled by the task\"): the driver gets counts, "
            "not a row per failure, so its per-failure work no longer bounds the consumer. 0: "
            "every failure goes back to the driver, which settles it, as before (measured on 2 "
            "cores the driver shares with the executors: the same throughput at 1% poison, the "
            "driver's CPU a fifth higher: docs/performance.md)."),
)
_TUNABLE = {t.key: t for t in TUNABLES}


def bad_tunables(conf: Mapping[str, str] | None) -> list[str]:
    """The `spark.antidote.*` keys of `conf` that Antidote does not know or whose value is not
    a whole number within its bounds, in order."""
    bad = []
    for key, value in (conf or {}).items():
        if not key.startswith(ANTIDOTE_PREFIX):
            continue
        t = _TUNABLE.get(key)
        if t is None or not (value.isdigit() and value.isascii() and int(value) <= TUNABLE_MAX):
            bad.append(key)
    return bad


def tunable(conf: Mapping[str, str] | None, key: str) -> int:
    """The value of a `spark.antidote.*` setting (checked by the models), else its default."""
    t = _TUNABLE[key]
    value = (conf or {}).get(key)
    return int(value) if value is not None else t.default


# Whole numbers of up to 9 digits: exactly the models' bound (a regex keeps the rule's cost
# estimate bounded).
TUNABLE_CEL = ("!has(self.conf) || self.conf.all(k, !k.startsWith('" + ANTIDOTE_PREFIX + "') || (k in "
               + _cel_list(_TUNABLE) + " && self.conf[k].matches('^[0-9]{1,9}$')))")
TUNABLE_MESSAGE = ("sets a spark.antidote.* key Antidote does not know, or one whose value is not a "
                   "whole number within its bounds (see docs/api.md, \"Antidote's settings in "
                   "spark.conf\")")


def describe_tunables(conf: Mapping[str, str] | None) -> str:
    keys = bad_tunables(conf)
    return (f"sets {', '.join(f'{k}={(conf or {})[k]!r}' for k in keys)}: "
            + ("unknown, or not a whole number within bounds; " if keys else "")
            + "known keys: " + ", ".join(t.key for t in TUNABLES) + f" (whole numbers, 0 to {TUNABLE_MAX:,})"
            + " (see docs/api.md, \"Antidote's settings in spark.conf\")")
