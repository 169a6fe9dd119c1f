"""The local stack is real: a Kubernetes API server enforcing CRDs and RBAC, a Kafka broker
keeping headers, and Spark streaming between Kafka topics."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from antidote_devstack.build import HELM_VERSION, KUBE_VERSION

from antidote_testkit.kafka_io import produce, read_all


def test_api_server_reports_its_release(api_client: client.ApiClient) -> None:
    info = client.VersionApi(api_client).get_code()
    assert info.git_version == KUBE_VERSION
    assert (info.major, info.minor) == tuple(KUBE_VERSION.lstrip("v").split(".")[:2])


def test_kubectl_and_helm_fit_the_server(stack) -> None:
    env = {**os.environ, **stack.env()}
    out = subprocess.run(["kubectl", "version", "-o", "json"], env=env, capture_output=True,
                         text=True, check=True).stdout
    versions = json.loads(out)
    client_minor = int(versions["clientVersion"]["minor"].rstrip("+"))
    server_minor = int(versions["serverVersion"]["minor"].rstrip("+"))
    assert abs(client_minor - server_minor) <= 1, versions
    helm = subprocess.run(["helm", "version", "--short"], env=env, capture_output=True, text=True,
                          check=True).stdout
    assert helm.startswith(HELM_VERSION), helm


def _crd(group: str) -> dict:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{
                "name": "v1", "served": True, "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {
                    "type": "object", "required": ["size"],
                    "properties": {"size": {"type": "integer", "minimum": 1}}}}}},
            }],
        },
    }


def test_crd_and_custom_resource_round_trip(api_client: client.ApiClient, namespace: str) -> None:
    group = f"{namespace}.smoke.antidote.dev"
    ext = client.ApiextensionsV1Api(api_client)
    ext.create_custom_resource_definition(_crd(group))
    try:
        deadline = time.monotonic() + 30
        while True:
            conds = ext.read_custom_resource_definition(f"widgets.{group}").status.conditions or []
            if any(c.type == "Established" and c.status == "True" for c in conds):
                break
            assert time.monotonic() < deadline, f"CRD never established: {conds}"
            time.sleep(0.2)
        objs = client.CustomObjectsApi(api_client)
        body = {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w1"},
                "spec": {"size": 3}}
        # Discovery of a new CRD can lag Established by a moment.
        for _ in range(50):
            try:
                objs.create_namespaced_custom_object(group, "v1", namespace, "widgets", body)
                break
            except ApiException as err:
                if err.status != 404:
                    raise
                time.sleep(0.2)
        got = objs.get_namespaced_custom_object(group, "v1", namespace, "widgets", "w1")
        assert got["spec"] == {"size": 3}
        # The schema is enforced by the server, with the field named.
        with pytest.raises(ApiException) as bad:
            objs.create_namespaced_custom_object(group, "v1", namespace, "widgets", {
                **body, "metadata": {"name": "w2"}, "spec": {"size": 0}})
        assert bad.value.status == 422 and "spec.size" in bad.value.body
    finally:
        ext.delete_custom_resource_definition(f"widgets.{group}")


def test_rbac_denies_what_the_role_does_not_grant(api_client, core_v1, stack, namespace) -> None:
    rbac = client.RbacAuthorizationV1Api(api_client)
    core_v1.create_namespaced_service_account(namespace, {"metadata": {"name": "reader"}})
    rbac.create_namespaced_role(namespace, {
        "metadata": {"name": "configmap-reader"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "configmap-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}]})
    core_v1.create_namespaced_config_map(namespace, {"metadata": {"name": "c"}, "data": {"k": "v"}})
    token = core_v1.create_namespaced_service_account_token(
        "reader", namespace, {"spec": {"expirationSeconds": 600}}).status.token

    cfg = client.Configuration()
    cfg.host = stack.server
    cfg.ssl_ca_cert = api_client.configuration.ssl_ca_cert
    cfg.api_key = {"authorization": token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    with client.ApiClient(cfg) as sa_client:
        as_sa = client.CoreV1Api(sa_client)
        deadline = time.monotonic() + 10  # the RBAC cache catches up with the new binding
        while True:
            try:
                assert as_sa.read_namespaced_config_map("c", namespace).data == {"k": "v"}
                break
            except ApiException as err:
                if err.status != 403 or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        for call in (lambda: as_sa.list_namespaced_secret(namespace),
                     lambda: as_sa.create_namespaced_config_map(namespace, {"metadata": {"name": "x"}}),
                     lambda: as_sa.read_namespaced_config_map("c", "default")):
            with pytest.raises(ApiException) as denied:
                call()
            assert denied.value.status == 403
            assert f"system:serviceaccount:{namespace}:reader" in denied.value.body


def test_kafka_keeps_keys_values_and_headers(kafka_bootstrap, topic_factory) -> None:
    topic = topic_factory(partitions=3)
    sent = [(f"k{i}".encode(), bytes([i % 256]) * (i + 1), [("antidote.n", str(i).encode()),
                                                            ("raw", b"\x00\xff")])
            for i in range(30)]
    produce(kafka_bootstrap, topic, sent)
    got = read_all(kafka_bootstrap, topic)
    assert len(got) == 30
    assert {p.partition for p in got} <= {0, 1, 2}
    by_key = {r.key: r for r in got}
    for key, value, headers in sent:
        assert by_key[key].value == value
        assert list(by_key[key].headers) == headers


def test_spark_streams_kafka_to_kafka_with_headers(spark, kafka_bootstrap, topic_factory, tmp_path) -> None:
    source, sink = topic_factory("-in", partitions=2), topic_factory("-out")
    produce(kafka_bootstrap, source, [(f"k{i}".encode(), f'{{"n": {i}}}'.encode(),
                                       [("trace", f"t{i}".encode())]) for i in range(50)])
    df = (spark.readStream.format("kafka")
          .option("kafka.bootstrap.servers", kafka_bootstrap)
          .option("subscribe", source).option("startingOffsets", "earliest")
          .option("includeHeaders", "true").load())
    out = df.selectExpr("key", "upper(CAST(value AS STRING)) AS value",
                        "concat(headers, array(named_struct('key', 'via', 'value', CAST('spark' AS BINARY)))) AS headers")
    q = (out.writeStream.format("kafka").option("kafka.bootstrap.servers", kafka_bootstrap)
         .option("topic", sink).option("checkpointLocation", str(tmp_path / "ckpt"))
         .trigger(availableNow=True).start())
    try:
        q.awaitTermination(300)
        assert q.exception() is None
    finally:
        q.stop()
    got = {r.key: r for r in read_all(kafka_bootstrap, sink)}
    assert len(got) == 50
    for i in range(50):
        r = got[f"k{i}".encode()]
        assert r.value == f'{{"N": {i}}}'.encode()
        assert r.headers == (("trace", f"t{i}".encode()), ("via", b"spark"))
