"""Bad specs that both the models (unit tests) and the API server (integration tests) must
reject, each naming the field at fault. One table, so the two cannot drift apart."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
DELETE = object()


def valid_policy(name: str = "p") -> dict[str, Any]:
    return {"apiVersion": "antidote.dev/v1alpha1", "kind": "PoisonPolicy",
            "metadata": {"name": name}, "spec": {}}


def valid_consumer(name: str = "c") -> dict[str, Any]:
    return {"apiVersion": "antidote.dev/v1alpha1", "kind": "QueueConsumer",
            "metadata": {"name": name},
            "spec": {"policyRef": {"name": "p"},
                     "source": {"kafka": {"bootstrapServers": "localhost:9092", "topic": "orders"}},
                     "handler": "shop.orders:handle",
                     "checkpoint": {"location": "/tmp/ckpt"}}}


def merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if value is DELETE:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@dataclass(frozen=True)
class BadSpec:
    id: str
    kind: str  # "ppol" or "qc"
    patch: dict[str, Any]  # merged into the valid object (DELETE removes a key)
    field: str  # the path both rejections must name
    mentions: tuple[str, ...] = ()  # and what else their messages must name (a key)

    def manifest(self, name: str | None = None) -> dict[str, Any]:
        base = valid_policy() if self.kind == "ppol" else valid_consumer()
        obj = merge(base, self.patch)
        if name is not None and obj["metadata"]["name"] == base["metadata"]["name"]:
            obj["metadata"]["name"] = name
        return obj

    def describe(self) -> str:
        def show(value: Any) -> Any:
            if isinstance(value, dict):
                return {k: show(v) for k, v in value.items()}
            return "<removed>" if value is DELETE else value
        return yaml.safe_dump(show(self.patch), default_flow_style=True, width=1000, sort_keys=False).strip()


def _p(spec: dict[str, Any]) -> dict[str, Any]:
    return {"spec": spec}


BAD_SPECS = (
    BadSpec("disposition-not-an-enum", "ppol", _p({"disposition": "Quarantine"}), "spec.disposition"),
    BadSpec("negative-immediate", "ppol", _p({"retries": {"immediate": -1}}), "spec.retries.immediate"),
    BadSpec("negative-cycles", "ppol", _p({"retries": {"cycles": -2}}), "spec.retries.cycles"),
    BadSpec("duration-in-words", "ppol", _p({"retries": {"cycleDelay": "30 minutes"}}), "spec.retries.cycleDelay"),
    BadSpec("duration-in-days", "ppol", _p({"retries": {"cycleDelay": "1d"}}), "spec.retries.cycleDelay"),
    BadSpec("backoff-below-one", "ppol", _p({"retries": {"backoff": 0.5}}), "spec.retries.backoff"),
    BadSpec("max-delay-below-delay", "ppol", _p({"retries": {"cycleDelay": "30m", "maxCycleDelay": "10m"}}),
            "spec.retries.maxCycleDelay"),
    BadSpec("non-retryable-duplicate", "ppol", _p({"retries": {"nonRetryable": ["ValueError", "ValueError"]}}),
            "spec.retries.nonRetryable"),
    BadSpec("non-retryable-not-a-class", "ppol", _p({"retries": {"nonRetryable": ["value error"]}}),
            "spec.retries.nonRetryable"),
    BadSpec("unknown-field", "ppol", _p({"retries": {"immedaite": 3}}), "spec.retries.immedaite"),
    BadSpec("native-headers-unknown-set", "ppol", _p({"nativeHeaders": ["Streams"]}), "spec.nativeHeaders"),
    BadSpec("native-headers-duplicate", "ppol", _p({"nativeHeaders": ["Connect", "Connect"]}),
            "spec.nativeHeaders"),
    BadSpec("validation-format", "ppol", _p({"validation": {"format": "xml"}}), "spec.validation.format"),
    BadSpec("json-schema-needs-json", "ppol", _p({"validation": {"jsonSchema": {"type": "object"}}}),
            "spec.validation.jsonSchema"),
    BadSpec("max-bytes-zero", "ppol", _p({"validation": {"maxBytes": 0}}), "spec.validation.maxBytes"),
    BadSpec("topic-with-space", "ppol", _p({"topics": {"poison": "orders poison"}}), "spec.topics.poison"),
    BadSpec("retry-topics-per-cycle", "ppol", _p({"retries": {"cycles": 2}, "topics": {"retry": ["orders.r1"]}}),
            "spec.topics.retry"),
    BadSpec("batch-failures-zero", "ppol", _p({"queueDisable": {"consecutiveBatchFailures": 0}}),
            "spec.queueDisable.consecutiveBatchFailures"),
    BadSpec("ratio-zero", "ppol", _p({"queueDisable": {"failureRatio": {"threshold": 0}}}),
            "spec.queueDisable.failureRatio.threshold"),
    BadSpec("ratio-above-one", "ppol", _p({"queueDisable": {"failureRatio": {"threshold": 1.5}}}),
            "spec.queueDisable.failureRatio.threshold"),
    BadSpec("auto-resume-without-disable", "ppol",
            _p({"queueDisable": {"enabled": False, "autoResume": {"after": "5m"}}}),
            "spec.queueDisable.autoResume"),
    BadSpec("auto-resume-after-zero", "ppol", _p({"queueDisable": {"autoResume": {"after": "0s"}}}),
            "spec.queueDisable.autoResume.after"),
    BadSpec("reader-move", "ppol", _p({"reader": {"disposition": "Move"}}), "spec.reader.disposition"),
    BadSpec("reader-action-not-an-enum", "ppol", _p({"reader": {"action": "Replay"}}), "spec.reader.action"),
    BadSpec("reader-archive-without-path", "ppol", _p({"reader": {"action": "Archive"}}), "spec.reader.archive"),
    BadSpec("reader-schedule-in-words", "ppol", _p({"reader": {"trigger": {"schedule": "every hour"}}}),
            "spec.reader.trigger.schedule"),
    BadSpec("reader-window-backwards", "ppol",
            _p({"reader": {"filter": {"since": "2025-02-01T00:00:00Z", "until": "2025-01-01T00:00:00Z"}}}),
            "spec.reader.filter.until"),
    BadSpec("route-disposition-not-an-enum", "ppol",
            _p({"routes": [{"errors": ["ValueError"], "disposition": "Quarantine"}]}), "spec.routes[0].disposition"),
    BadSpec("route-fault", "ppol", _p({"routes": [{"errors": ["ValueError"], "disposition": "Fault"}]}),
            "spec.routes[0].disposition"),
    BadSpec("route-without-errors", "ppol",
            _p({"routes": [{"errors": ["ValueError"], "disposition": "Move"}, {"errors": [], "disposition": "Reject"}]}),
            "spec.routes[1].errors"),
    BadSpec("route-error-not-a-class", "ppol", _p({"routes": [{"errors": ["card declined"], "disposition": "Move"}]}),
            "spec.routes[0].errors"),
    BadSpec("route-drop-with-topic", "ppol",
            _p({"routes": [{"errors": ["ValueError"], "disposition": "Drop", "topic": "orders.dropped"}]}),
            "spec.routes[0].topic"),
    BadSpec("retries-max-age-zero", "ppol", _p({"retries": {"maxAge": "0s"}}), "spec.retries.maxAge"),
    BadSpec("validation-max-age-in-days", "ppol", _p({"validation": {"maxAge": "2d"}}), "spec.validation.maxAge"),
    BadSpec("handler-without-function", "qc", _p({"handler": "shop.orders.handle"}), "spec.handler"),
    BadSpec("handler-with-space", "qc", _p({"handler": "shop orders:handle"}), "spec.handler"),
    BadSpec("policy-ref-missing", "qc", _p({"policyRef": DELETE}), "spec.policyRef"),
    BadSpec("starting-offsets-not-an-enum", "qc", _p({"source": {"kafka": {"startingOffsets": "beginning"}}}),
            "spec.source.kafka.startingOffsets"),
    BadSpec("batch-size-zero", "qc", _p({"source": {"kafka": {"maxMessagesPerBatch": 0}}}),
            "spec.source.kafka.maxMessagesPerBatch"),
    BadSpec("bootstrap-without-port", "qc", _p({"source": {"kafka": {"bootstrapServers": "kafka.svc"}}}),
            "spec.source.kafka.bootstrapServers"),
    BadSpec("avro-values-without-registry", "qc", _p({"source": {"kafka": {"valueFormat": "Avro"}}}),
            "spec.source.kafka.valueFormat", ("schemaRegistry",)),
    BadSpec("protobuf-keys-without-registry", "qc", _p({"source": {"kafka": {"keyFormat": "Protobuf"}}}),
            "spec.source.kafka.keyFormat", ("schemaRegistry",)),
    BadSpec("json-schema-values-without-registry", "qc",
            _p({"source": {"kafka": {"valueFormat": "JsonSchema", "keyFormat": "Json"}}}),
            "spec.source.kafka.valueFormat", ("schemaRegistry",)),
    BadSpec("value-format-not-an-enum", "qc", _p({"source": {"kafka": {"valueFormat": "avro"}}}),
            "spec.source.kafka.valueFormat"),
    BadSpec("schema-registry-url-not-http", "qc",
            _p({"source": {"kafka": {"valueFormat": "Avro", "schemaRegistry": {"url": "registry:8081"}}}}),
            "spec.source.kafka.schemaRegistry.url"),
    BadSpec("avro-sink-without-any-registry", "qc", _p({"sink": {"kafka": {"topic": "out", "valueFormat": "Avro"}}}),
            "spec.sink.kafka.valueFormat", ("schemaRegistry",)),
    BadSpec("sink-value-format-json", "qc", _p({"sink": {"kafka": {"topic": "out", "valueFormat": "Json"}}}),
            "spec.sink.kafka.valueFormat"),
    BadSpec("sink-kafka-and-path", "qc", _p({"sink": {"kafka": {"topic": "out"}, "path": "/data/out"}}),
            "spec.sink"),
    BadSpec("sink-format-without-path", "qc", _p({"sink": {"kafka": {"topic": "out"}, "format": "json"}}),
            "spec.sink.format"),
    BadSpec("sink-exactly-once-on-other-brokers", "qc",
            _p({"sink": {"kafka": {"topic": "out", "bootstrapServers": "other:9092"}}}),
            "spec.sink.kafka.delivery", ("AtLeastOnce",)),
    BadSpec("sink-delivery-unknown", "qc", _p({"sink": {"kafka": {"topic": "out", "delivery": "Maybe"}}}),
            "spec.sink.kafka.delivery"),
    BadSpec("executor-memory-with-space", "qc", _p({"spark": {"executor": {"memory": "2 GB"}}}),
            "spec.spark.executor.memory"),
    BadSpec("spark-conf-not-spark", "qc", _p({"spark": {"conf": {"executor.memory": "2g"}}}), "spec.spark.conf"),
    *(BadSpec(f"spark-conf-owned-{i}", "qc", _p({"spark": {"conf": {"spark.sql.shuffle.partitions": "4", key: "x"}}}),
              "spec.spark.conf", (key,))
      for i, key in enumerate(("spark.master", "spark.kubernetes.namespace",
                               "spark.kubernetes.authenticate.executor.serviceAccountName",
                               "spark.kubernetes.executor.podTemplateFile",
                               "spark.kubernetes.executor.secrets.other-app",
                               "spark.kubernetes.executor.volumes.hostPath.root.mount.path",
                               "spark.driver.host", "spark.authenticate", "spark.authenticate.secret",
                               # Pod identity beyond names (issue 43, item 14): labels,
                               # annotations, nodes and scheduler, pull Secrets, the API
                               # server's certificate, feature steps, encryption.
                               "spark.kubernetes.executor.label.role",
                               "spark.kubernetes.driver.label.role",
                               "spark.kubernetes.executor.annotation.container.apparmor.security.beta.kubernetes.io/spark-kubernetes-executor",
                               "spark.kubernetes.driver.annotation.vault.hashicorp.com/agent-inject",
                               "spark.kubernetes.node.selector.kubernetes.io/hostname",
                               "spark.kubernetes.executor.node.selector.node-role.kubernetes.io/control-plane",
                               "spark.kubernetes.driver.node.selector.zone",
                               "spark.kubernetes.executor.scheduler.name", "spark.kubernetes.scheduler.name",
                               "spark.kubernetes.executor.decommissionLabel",
                               "spark.kubernetes.container.image.pullSecrets",
                               "spark.kubernetes.trust.certificates",
                               "spark.kubernetes.executor.pod.excludedFeatureSteps",
                               "spark.kubernetes.driver.resourceNamePrefix",
                               "spark.kubernetes.executor.useDriverPodIP",
                               "spark.network.crypto.enabled", "spark.network.crypto.cipher"))),
    # Antidote's own spark.antidote.* settings: a known key with a whole number only.
    BadSpec("spark-conf-antidote-not-a-number", "qc",
            _p({"spark": {"conf": {"spark.antidote.retry.localMaxRecords": "-1"}}}),
            "spec.spark.conf", ("spark.antidote.",)),
    BadSpec("spark-conf-antidote-unknown", "qc",
            _p({"spark": {"conf": {"spark.antidote.retry.localMaxRecord": "100"}}}),
            "spec.spark.conf", ("spark.antidote.",)),
    BadSpec("autoscale-min-above-max", "qc", _p({"spark": {"autoscale": {"min": 5, "max": 2}}}),
            "spec.spark.autoscale.min"),
    BadSpec("autoscale-without-max", "qc", _p({"spark": {"autoscale": {"min": 1}}}),
            "spec.spark.autoscale.max"),
    BadSpec("autoscale-with-executor-instances-conf", "qc",
            _p({"spark": {"autoscale": {"max": 4}, "conf": {"spark.executor.instances": "3"}}}),
            "spec.spark.conf", ("spark.executor.instances",)),
    BadSpec("autoscale-cooldown-not-a-duration", "qc",
            _p({"spark": {"autoscale": {"max": 4, "scaleUpCooldown": "2 minutes"}}}),
            "spec.spark.autoscale.scaleUpCooldown"),
    BadSpec("checkpoint-without-location", "qc", _p({"checkpoint": {"location": DELETE}}),
            "spec.checkpoint.location"),
    BadSpec("volume-under-the-operators-mounts", "qc",
            _p({"volumes": [{"name": "data", "claimName": "d", "mountPath": "/etc/antidote/data"}]}),
            "spec.volumes[0].mountPath"),
    BadSpec("volume-path-with-dotdot", "qc",
            _p({"volumes": [{"name": "data", "claimName": "d", "mountPath": "/var/../etc"}]}),
            "spec.volumes[0].mountPath"),
    BadSpec("volume-path-relative", "qc",
            _p({"volumes": [{"name": "data", "claimName": "d", "mountPath": "data"}]}),
            "spec.volumes[0].mountPath"),
    BadSpec("volume-names-twice", "qc",
            _p({"volumes": [{"name": "data", "claimName": "d", "mountPath": "/data"},
                            {"name": "data", "claimName": "e", "mountPath": "/more"}]}),
            "spec.volumes"),
    BadSpec("volume-paths-twice", "qc",
            _p({"volumes": [{"name": "data", "claimName": "d", "mountPath": "/data"},
                            {"name": "more", "claimName": "e", "mountPath": "/data"}]}),
            "spec.volumes"),
    BadSpec("volume-without-claim", "qc", _p({"volumes": [{"name": "data", "mountPath": "/data"}]}),
            "spec.volumes[0].claimName"),
    # The handler's environment (issue 44, item 1): reserved names, refs of another namespace.
    BadSpec("env-reserved-name", "qc", _p({"env": [{"name": "PYTHONPATH", "value": "/x"}]}),
            "spec.env[0].name", ("PYTHONPATH",)),
    BadSpec("env-reserved-prefix", "qc", _p({"env": [{"name": "ok", "value": "1"},
                                                     {"name": "SPARK_HOME", "value": "/x"}]}),
            "spec.env[1].name", ("SPARK_*",)),
    BadSpec("env-value-and-value-from", "qc",
            _p({"env": [{"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}),
            "spec.env[0].valueFrom"),
    BadSpec("env-two-sources", "qc",
            _p({"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"},
                                                    "configMapKeyRef": {"name": "c", "key": "k"}}}]}),
            "spec.env[0].valueFrom"),
    BadSpec("env-secret-of-another-namespace", "qc",
            _p({"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k",
                                                                     "namespace": "kube-system"}}}]}),
            "spec.env[0].valueFrom.secretKeyRef.namespace"),
    BadSpec("env-field-ref-not-allowed", "qc",
            _p({"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels"}}}]}),
            "spec.env[0].valueFrom.fieldRef.fieldPath"),
    BadSpec("env-from-reserved-prefix", "qc", _p({"envFrom": [{"prefix": "ANTIDOTE_", "secretRef": {"name": "s"}}]}),
            "spec.envFrom[0].prefix"),
    BadSpec("env-from-config-map-of-another-namespace", "qc",
            _p({"envFrom": [{"configMapRef": {"name": "c", "namespace": "other"}}]}),
            "spec.envFrom[0].configMapRef.namespace"),
    BadSpec("env-from-no-source", "qc", _p({"envFrom": [{"prefix": "APP_"}]}), "spec.envFrom[0]"),
    BadSpec("volume-secret-and-claim", "qc",
            _p({"volumes": [{"name": "creds", "claimName": "d", "secret": {"secretName": "s"},
                             "mountPath": "/creds"}]}),
            "spec.volumes[0].claimName"),
    BadSpec("volume-secret-item-path-escapes", "qc",
            _p({"volumes": [{"name": "creds", "secret": {"secretName": "s", "items": [{"key": "k", "path": "../k"}]},
                             "mountPath": "/creds"}]}),
            "spec.volumes[0].secret.items[0].path"),
    # Placement and identity (issue 44, item 2).
    BadSpec("service-account-annotation-of-the-operator", "qc",
            _p({"spark": {"driver": {"serviceAccountAnnotations": {"antidote.dev/executor-image": "evil"}}}}),
            "spec.spark.driver.serviceAccountAnnotations"),
    BadSpec("toleration-effect-not-an-enum", "qc",
            _p({"spark": {"executor": {"tolerations": [{"key": "spot", "effect": "Sometimes"}]}}}),
            "spec.spark.executor.tolerations[0].effect"),
    BadSpec("pull-secret-of-another-namespace", "qc",
            _p({"spark": {"imagePullSecrets": [{"name": "reg", "namespace": "other"}]}}),
            "spec.spark.imagePullSecrets[0].namespace"),
    # Redaction of quarantined payloads (issue 46, item 4).
    BadSpec("redact-without-paths", "ppol", _p({"quarantine": {"payload": "Redact"}}), "spec.quarantine.redact"),
    BadSpec("redact-path-not-a-path", "ppol",
            _p({"quarantine": {"payload": "Redact", "redact": [{"path": "$.a"}, {"path": "$.b"}, {"path": "$..c"}]}}),
            "spec.quarantine.redact[2].path"),
    BadSpec("redact-path-without-root", "ppol",
            _p({"quarantine": {"payload": "Redact", "redact": [{"path": "card.number"}]}}),
            "spec.quarantine.redact[0].path"),
    BadSpec("redact-paths-without-redact", "ppol", _p({"quarantine": {"payload": "Drop", "redact": [{"path": "$.a"}]}}),
            "spec.quarantine.redact", ("Redact",)),
    BadSpec("redact-hash-without-key", "ppol",
            _p({"quarantine": {"payload": "Redact", "redact": [{"path": "$.a", "mode": "Hash"}]}}),
            "spec.quarantine.hashKeyRef"),
    BadSpec("redact-mode-unknown", "ppol",
            _p({"quarantine": {"payload": "Redact", "redact": [{"path": "$.a", "mode": "Blur"}]}}),
            "spec.quarantine.redact[0].mode"),
    BadSpec("quarantine-payload-unknown", "ppol", _p({"quarantine": {"payload": "Encrypt"}}),
            "spec.quarantine.payload"),
    BadSpec("unknown-spec-field", "qc", _p({"replicas": 3}), "spec.replicas"),
    BadSpec("name-not-a-dns-label", "qc", {"metadata": {"name": "orders.v2"}}, "metadata.name"),
    BadSpec("name-too-long", "qc", {"metadata": {"name": "orders-" + "x" * 40}}, "metadata.name"),
)


def example_files() -> list[Path]:
    """Every manifest under examples/, the handler project template's (deploy/) included."""
    return sorted(EXAMPLES.rglob("*.yaml"))


def example_documents() -> list[tuple[Path, dict[str, Any]]]:
    return [(path, doc) for path in example_files()
            for doc in yaml.safe_load_all(path.read_text()) if doc]
