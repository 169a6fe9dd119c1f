"""Every `spark.kubernetes.*` key of the Spark we ship is either owned by the operator
(antidote_api/spark_conf.py) or listed here as the consumer's, with why (issue 43, item 14).

The keys are read from Spark's own `deploy.k8s.Config` class in the pyspark jars, so a Spark
upgrade that adds a key fails this test until someone decides whose it is."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pyspark

from antidote_api import spark_conf

# Keys a QueueConsumer may set, and why that is safe: tuning of allocation, polling,
# resources and rolling of its own executors, or keys with no effect in client mode.
CONSUMERS = {
    "spark.kubernetes.allocation.": "executor allocation pace and limits",
    "spark.kubernetes.appKillPodDeletionGracePeriod": "grace period of pods Spark deletes",
    "spark.kubernetes.configMap.maxSize": "size limit of the executors' conf ConfigMap",
    "spark.kubernetes.decommission.script": "a path in the consumer's own image, run in its executor",
    "spark.kubernetes.driver.annotateExitException": "cluster mode only (the driver pod is the operator's)",
    "spark.kubernetes.driver.connectionTimeout": "API client timeout",
    "spark.kubernetes.driver.requestTimeout": "API client timeout",
    "spark.kubernetes.driver.limit.cores": "cluster mode only",
    "spark.kubernetes.driver.request.cores": "cluster mode only",
    "spark.kubernetes.driver.service.": "the driver Service of cluster mode: never created in client mode",
    "spark.kubernetes.driver.waitToReusePersistentVolumeClaim": "no claims (volume keys are owned)",
    "spark.kubernetes.driverEnv.": "cluster mode only",
    "spark.kubernetes.dynamicAllocation.deleteGracePeriod": "executor removal pace",
    "spark.kubernetes.executor.apiPollingInterval": "polling",
    "spark.kubernetes.executor.checkAllContainers": "executor failure detection",
    "spark.kubernetes.executor.deleteOnTermination": "whether ended executor pods are kept",
    "spark.kubernetes.executor.deletedExecutorsCacheTimeout": "bookkeeping",
    "spark.kubernetes.executor.disableConfigMap": "whether the executors' conf ConfigMap is made",
    "spark.kubernetes.executor.enableApiPolling": "polling",
    "spark.kubernetes.executor.enableApiWatcher": "watching",
    "spark.kubernetes.executor.enablePollingWithResourceVersion": "polling",
    "spark.kubernetes.executor.eventProcessingInterval": "polling",
    "spark.kubernetes.executor.limit.cores": "resources",
    "spark.kubernetes.executor.request.cores": "resources",
    "spark.kubernetes.executor.minTasksPerExecutorBeforeRolling": "rolling",
    "spark.kubernetes.executor.rollInterval": "rolling",
    "spark.kubernetes.executor.rollPolicy": "rolling",
    "spark.kubernetes.executor.missingPodDetectDelta": "bookkeeping",
    "spark.kubernetes.executor.podDeletionCost": "which executor a scale-down removes first",
    "spark.kubernetes.executor.pvc.": "resizing claims (none: volume keys are owned)",
    "spark.kubernetes.executor.resize": "resources (in-place resize of its own executors)",
    "spark.kubernetes.executor.terminationGracePeriodSeconds": "grace period",
    "spark.kubernetes.executorSnapshotsSubscribersShutdownGracePeriod": "shutdown pace",
    "spark.kubernetes.file.upload.path": "spark-submit only",
    "spark.kubernetes.legacy.useReadWriteOnceAccessMode": "claims (none)",
    "spark.kubernetes.local.dirs.tmpfs": "memory-backed scratch directories of its own pods",
    "spark.kubernetes.memoryOverheadFactor": "resources",
    "spark.kubernetes.report.interval": "cluster mode only",
    "spark.kubernetes.resource.type": "the application's language",
    "spark.kubernetes.submission.": "spark-submit only",
    "spark.kubernetes.submitInDriver": "spark-submit only",
}


def spark_kubernetes_keys() -> set[str]:
    jar = next((Path(pyspark.__file__).parent / "jars").glob("spark-kubernetes_*.jar"))
    with zipfile.ZipFile(jar) as z:
        data = z.read("org/apache/spark/deploy/k8s/Config$.class")
    return {m.decode() for m in re.findall(rb"spark\.kubernetes\.[A-Za-z0-9.]+", data)}


def test_every_spark_kubernetes_key_is_owned_or_the_consumers() -> None:
    keys = spark_kubernetes_keys()
    assert len(keys) > 100, keys  # the class was read
    undecided = []
    for key in sorted(keys):
        # Prefixes and fragments Spark concatenates ("spark.kubernetes.authenticate" + ...)
        # count as owned when what they start is.
        owned = spark_conf.is_owned(key) or spark_conf.is_owned(key.rstrip(".") + ".x")
        if not owned and not key.startswith(tuple(CONSUMERS)):
            undecided.append(key)
    assert undecided == [], "decide whose these keys are (spark_conf.OWNED or CONSUMERS here)"
    # A key listed as the consumer's is not one the operator owns (prefixes may hold owned
    # keys: spark.kubernetes.allocation.pods.allocator is owned, the rest of allocation.* not).
    assert [k for k in CONSUMERS if not k.endswith(".") and spark_conf.is_owned(k)] == []


def test_what_the_issue_named_is_owned() -> None:
    for key in ("spark.kubernetes.executor.annotation.sidecar.istio.io/inject",
                "spark.kubernetes.driver.annotation.x", "spark.kubernetes.executor.label.team",
                "spark.kubernetes.executor.node.selector.disk", "spark.kubernetes.node.selector.zone",
                "spark.network.crypto.enabled", "spark.network.crypto.saslFallback"):
        assert spark_conf.is_owned(key), key
