"""ServiceAccount annotations for cloud identity (issue 44, item 2) through `antidote
operator` on the real API server: spec.spark.driver/.executor.serviceAccountAnnotations land
on `<qc>-driver` and `<qc>-executor`; a key taken out of the spec is taken off, while an
annotation someone else wrote (a cloud's controller) stays; executors keep no token."""

from __future__ import annotations

import os

import pytest
from kubernetes import client

from antidote_testkit.operators import Cluster, consumer, install_crds, operator, policy, wait_for

pytestmark = pytest.mark.integration

ROLE = "eks.amazonaws.com/role-arn"
GSA = "iam.gke.io/gcp-service-account"


def test_service_account_annotations_follow_the_spec(api_client: client.ApiClient, namespace: str,
                                                     kubeconfig: str, kafka_bootstrap: str, tmp_path) -> None:
    install_crds(api_client)
    k = Cluster(api_client, namespace)
    k.create(policy("p"))
    k.create(consumer("idq", "p", kafka_bootstrap, "idq", spark={
        "driver": {"serviceAccountAnnotations": {ROLE: "arn:aws:iam::123456789012:role/idq", "team": "pay"}},
        "executor": {"serviceAccountAnnotations": {GSA: "idq@p.iam.gserviceaccount.com"}}}))
    # Kept as written (a CRD without these fields, an older one, would prune them).
    assert k.qc("idq")["spec"]["spark"]["driver"]["serviceAccountAnnotations"]

    def annotations(sa: str) -> dict[str, str]:
        return k.core.read_namespaced_service_account(sa, namespace).metadata.annotations or {}

    env = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else None
    with operator(kubeconfig, namespace, tmp_path, env=env):
        driver = wait_for(lambda: ROLE in (a := annotations("idq-driver")) and a, "the driver's annotations",
                          errors=(client.ApiException,))
        assert driver[ROLE] == "arn:aws:iam::123456789012:role/idq" and driver["team"] == "pay"
        assert driver["antidote.dev/executor-service-account"] == "idq-executor"  # the operator's own beside them
        executor = wait_for(lambda: GSA in (a := annotations("idq-executor")) and a, "the executors' annotations",
                            errors=(client.ApiException,))
        assert executor[GSA] == "idq@p.iam.gserviceaccount.com"
        assert k.core.read_namespaced_service_account("idq-executor", namespace).automount_service_account_token is False
        # Someone else's annotation (a cloud's controller): never the operator's to remove.
        k.core.patch_namespaced_service_account("idq-driver", namespace,
                                                {"metadata": {"annotations": {"cloud.example/added": "x"}}})
        k.patch("queueconsumers", "idq", {"spec": {"spark": {
            "driver": {"serviceAccountAnnotations": {ROLE: None}},  # a merge patch: team stays
            "executor": {"serviceAccountAnnotations": None}}}})
        after = wait_for(lambda: ROLE not in (a := annotations("idq-driver")) and a, "the role annotation taken off")
        assert after["team"] == "pay" and after["cloud.example/added"] == "x"
        assert after["antidote.dev/user-annotations"] == "team"
        wait_for(lambda: not {GSA, "antidote.dev/user-annotations"} & set(annotations("idq-executor")),
                 "the executors' annotations taken off")
