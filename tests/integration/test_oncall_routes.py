"""`antidote inspect|drain|redrive --from <a route's topic>` against the real API server, with a
route's topic filled by a real consumer run (PoisonPolicy spec.routes)."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from antidote_api.drain import parse_drain
from antidote_api.names import drain_job_name

from antidote_testkit import consumers as consumer_util
from antidote_testkit.kafka_io import produce, read_all
from antidote_testkit.operators import Cluster, consumer, install_crds, operator, policy, wait_for

from .test_oncall_cli import _job, cli

pytestmark = pytest.mark.integration

HANDLER = "tests.integration.handlers_governance:pays"


@pytest.fixture
def k(api_client: client.ApiClient, namespace: str) -> Cluster:
    install_crds(api_client)
    return Cluster(api_client, namespace)


def _create_policy(k: Cluster, api_client: client.ApiClient, spec: dict) -> None:
    """The policy, with its routes as stored: the API server prunes the fields its CRD does
    not know, and on a stack other checkouts share the CRDs may be another's, older one. So
    this checkout's CRDs are installed first, and the stored policy is checked."""
    for _ in range(3):
        install_crds(api_client, replace=True)
        k.create(policy("p", spec))
        if k.ppol("p")["spec"].get("routes"):
            return
        k.delete("poisonpolicies", "p")
        wait_for(lambda: not _exists(k, "p"), "the pruned policy to go")
    pytest.fail("the API server keeps pruning spec.routes: its PoisonPolicy CRD is not this checkout's")


def _exists(k: Cluster, name: str) -> bool:
    try:
        k.ppol(name)
        return True
    except client.ApiException as err:
        if err.status == 404:
            return False
        raise


def test_inspect_drain_and_redrive_read_a_routes_topic(k: Cluster, kubeconfig: str, kafka_bootstrap: str,
                                                       topic_factory, spark, calls_dir, tmp_path) -> None:
    source = topic_factory()
    declined = f"{source}-declined"
    spec = {"retries": {"immediate": 0, "cycles": 0}, "reader": {"action": "Hold"},
            "routes": [{"errors": ["tests.integration.handlers_governance.PaymentError"],
                        "disposition": "Reject", "topic": declined}]}
    values = [b"declined-%d" % i if i in (1, 4) else b"bad-%d" % i if i == 6 else b"order-%d" % i for i in range(8)]
    produce(kafka_bootstrap, source, [(b"k%d" % i, v, None) for i, v in enumerate(values)])
    s = consumer_util.settings(kafka_bootstrap, source, tmp_path, policy=spec, name="routes")
    code, _ = consumer_util.run(spark, s.model_copy(update={"handler": HANDLER}))
    assert int(code) == 0
    _create_policy(k, k.core.api_client, spec)
    k.create(consumer("orders", "p", kafka_bootstrap, source, paused=True, handler=HANDLER))
    with operator(kubeconfig, k.ns, tmp_path):
        wait_for(lambda: k.condition("orders", "Paused") == ("True", "UserRequested"), "the operator")
        out = cli("inspect", "orders", "-n", k.ns, "--from", declined, "-o", "json", kubeconfig=kubeconfig)
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        assert (doc["topic"], doc["total"], doc["matched"]) == (declined, 2, 2)
        assert [m["origin"] for m in doc["messages"]] == [f"{source}/0/1", f"{source}/0/4"]
        assert {m["error_class"] for m in doc["messages"]} == {"tests.integration.handlers_governance.CardDeclined"}
        out = cli("inspect", "orders", "-n", k.ns, "-o", "json", kubeconfig=kubeconfig)  # the poison topic
        assert [m["origin"] for m in json.loads(out.stdout)["messages"]] == [f"{source}/0/6"]
        out = cli("inspect", "orders", "-n", k.ns, "--from", f"{source}.retry-1", kubeconfig=kubeconfig)
        assert out.returncode == 1 and out.stderr == (
            f"antidote inspect: --from {source}.retry-1: not poison, dlq or a route's topic ({declined})\n")

        out = cli("drain", "orders", "-n", k.ns, "--from", declined, "--request-id", "r1", kubeconfig=kubeconfig)
        assert out.returncode == 0, out.stderr
        job = wait_for(lambda: _job(k, drain_job_name("orders", "r1")), "the drain Job")
        args = job.spec.template.spec.containers[0].args
        assert args[args.index("--from") + 1] == declined
        assert parse_drain(job.metadata.annotations["antidote.dev/drain-request"]).source == declined

        out = cli("redrive", "orders", "-n", k.ns, "--from", declined, "-o", "json", kubeconfig=kubeconfig)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["redriven"] == 2
        back = read_all(kafka_bootstrap, source)[len(values):]
        assert sorted(r.value for r in back) == [b"declined-1", b"declined-4"]
