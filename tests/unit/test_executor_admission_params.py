"""What the driver's ServiceAccount tells the chart's executor-pods admission policy
(templates/admission/executor-pods.yaml): exactly the ServiceAccount, image and Secrets the
operator's spark-defaults give Spark's executors, kept current by `kube.apply`."""

from __future__ import annotations

import pytest
import yaml

from antidote_operator.builders import driver as builders
from antidote_operator.builders.driver import RenderOptions, build_children
from antidote_operator.kube import is_subset, owned_part

from ..api_cases import ROOT
from .test_operator_builders import OWNER, settings

POLICY = ROOT / "charts/antidote/templates/admission/executor-pods.yaml"
KEYS = (builders.EXECUTOR_SA_ANNOTATION, builders.EXECUTOR_IMAGE_ANNOTATION, builders.EXECUTOR_SECRETS_ANNOTATION)


def _kids(s, opts=RenderOptions()):
    # By name; the RoleBinding shares the driver ServiceAccount's name and is left out.
    return {c["metadata"]["name"]: c for c in build_children(OWNER, s, replicas=1, opts=opts)
            if c["kind"] != "RoleBinding"}


def _executor_conf(kids) -> dict[str, str]:
    text = kids["orders-settings"]["data"]["spark-defaults.conf"]
    return dict(line.split(" ", 1) for line in text.splitlines())


@pytest.mark.parametrize("over, opts", [
    ({}, RenderOptions()),
    ({"spark": {"image": "shop/consumer:7"}}, RenderOptions(image="reg/antidote-consumer:9")),
    ({"source": {"kafka": {"bootstrapServers": "k:9092", "topic": "orders", "secretRef": {"name": "kafka-creds"}}},
      "sink": {"kafka": {"topic": "out", "bootstrapServers": "o:9092", "secretRef": {"name": "sink-creds"},
                         "delivery": "AtLeastOnce"}}},
     RenderOptions(image="reg/antidote-consumer:9")),
])
def test_the_driver_service_account_names_what_spark_gives_its_executors(over, opts) -> None:
    kids = _kids(settings(**over), opts)
    ann = kids["orders-driver"]["metadata"]["annotations"]
    conf = _executor_conf(kids)
    template = yaml.safe_load(kids["orders-settings"]["data"][builders.EXECUTOR_TEMPLATE_KEY])
    assert ann[builders.EXECUTOR_SA_ANNOTATION] == conf["spark.kubernetes.authenticate.executor.serviceAccountName"] \
        == template["spec"]["serviceAccountName"] == "orders-executor"
    assert ann[builders.EXECUTOR_IMAGE_ANNOTATION] == conf["spark.kubernetes.container.image"]
    mounted = sorted(k.removeprefix("spark.kubernetes.executor.secrets.") for k in conf
                     if k.startswith("spark.kubernetes.executor.secrets."))
    assert ann[builders.EXECUTOR_SECRETS_ANNOTATION].split(",") == mounted
    assert "orders-spark-auth" in mounted
    # Only the driver's ServiceAccount is described; the executors' has no such annotations.
    assert not set(KEYS) & set(kids["orders-executor"]["metadata"].get("annotations", {}))


def test_a_changed_image_updates_the_driver_service_account() -> None:
    """`kube.apply` compares the ServiceAccount's annotations: a new spec.spark.image (or a
    changed secretRef) patches them before the Deployment rolls the driver."""
    old = _kids(settings())["orders-driver"]
    new = _kids(settings(spark={"image": "shop/consumer:8"}))["orders-driver"]
    stored = {**old, "metadata": {**old["metadata"], "uid": "u", "annotations": {
        **old["metadata"]["annotations"], "kubectl.kubernetes.io/last-applied-configuration": "{}"}}}
    assert is_subset(owned_part(old), stored)  # extra annotations on the server are left alone
    assert not is_subset(owned_part(new), stored)
    assert owned_part(new)["metadata"]["annotations"][builders.EXECUTOR_IMAGE_ANNOTATION] == "shop/consumer:8"


def test_the_chart_policy_reads_the_annotations_and_labels_the_operator_writes() -> None:
    """The keys are one contract in two languages: the chart's CEL spells them out."""
    text = POLICY.read_text()
    for key in (*KEYS, builders.LABEL_CONSUMER):
        assert f"'{key}'" in text, key
    assert "+ '-driver'" in text and builders.child_names("x").service_account == "x-driver"
    # Spark's executor labels the policy requires are the ones spark-defaults sets.
    conf = _executor_conf(_kids(settings()))
    assert conf[f"spark.kubernetes.executor.label.{builders.LABEL_CONSUMER}"] == "orders"
    assert conf["spark.kubernetes.executor.label.app.kubernetes.io/component"] == "executor"
    assert "object.metadata.labels['app.kubernetes.io/component'] == 'executor'" in text
