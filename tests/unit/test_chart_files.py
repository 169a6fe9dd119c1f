"""The chart's generated files (Kopf's peering CRDs, the values table of docs/helm.md) match
their sources, and every value of values.yaml is documented."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
import yaml

from ..api_cases import ROOT

spec = importlib.util.spec_from_file_location("gen_chart", ROOT / "hack/gen_chart.py")
gen_chart = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen_chart)


@pytest.mark.parametrize("rel", sorted(gen_chart.generated()))
def test_generated_file_is_current(rel: str) -> None:
    assert (ROOT / rel).read_text() == gen_chart.generated()[rel], \
        f"{rel} drifted; regenerate with: .venv/bin/python hack/gen_chart.py --write"


def test_peering_crds_are_what_the_operator_prints() -> None:
    printed = subprocess.run([sys.executable, "-m", "antidote_cli.main", "operator", "--print-peering-crds"],
                             capture_output=True, text=True, check=True).stdout
    committed = (ROOT / gen_chart.PEERING_FILE).read_text()
    assert committed.endswith(printed) and committed.startswith("# Generated")
    kinds = {d["spec"]["names"]["kind"] for d in yaml.safe_load_all(printed)}
    assert kinds == {"KopfPeering", "ClusterKopfPeering"}


def test_every_leaf_value_is_documented() -> None:
    text = (ROOT / "charts/antidote/values.yaml").read_text()
    documented = {path for path, doc in gen_chart.value_docs(text) if doc}

    def leaves(node, prefix=""):
        for key, value in node.items():
            path = f"{prefix}{key}"
            if isinstance(value, dict) and value and path not in documented:
                yield from leaves(value, path + ".")
            else:
                yield path

    missing = [p for p in leaves(yaml.safe_load(text)) if p not in documented]
    assert not missing, f"values without a `# --` comment: {missing}"


def test_an_undocumented_value_is_refused_with_its_name() -> None:
    with pytest.raises(gen_chart.ValuesDocError, match=r"line 4: image\.tag"):
        gen_chart.value_docs("image:\n  # -- documented\n  repository: x\n  tag: y\n")
    # A comment block not starting with `# --` documents nothing.
    with pytest.raises(gen_chart.ValuesDocError, match=r"line 2: replicas"):
        gen_chart.value_docs("# replicas\nreplicas: 1\n")


def test_schema_keys_match_values() -> None:
    """values.schema.json is strict (additionalProperties: false), so it must know every key."""
    import json

    schema = json.loads((ROOT / "charts/antidote/values.schema.json").read_text())
    values = yaml.safe_load((ROOT / "charts/antidote/values.yaml").read_text())

    def walk(v, s, path):
        if s.get("additionalProperties") is False:
            assert set(v) <= set(s["properties"]), f"{path}: {set(v) - set(s['properties'])} not in the schema"
            assert set(s["properties"]) <= set(v), f"{path}: {set(s['properties']) - set(v)} not in values.yaml"
        for key, sub in v.items():
            if isinstance(sub, dict) and key in s.get("properties", {}):
                walk(sub, s["properties"][key], f"{path}.{key}")

    walk(values, schema, "")


def test_kind_and_the_node_install_the_chart_with_one_values_file() -> None:
    """hack/local-images.values.yaml is the only configuration of both local installs
    (hack/kind-up.sh and tests/integration/node_cluster.py), and it names the images
    `antidote dev build --images` builds, at the chart's appVersion."""
    from antidote_devstack import project_images

    values = yaml.safe_load((ROOT / "hack/local-images.values.yaml").read_text())
    app_version = yaml.safe_load((ROOT / "charts/antidote/Chart.yaml").read_text())["appVersion"]
    registry = values["image"]["registry"]  # the consumer image's too
    assert "registry" not in values["consumer"]["image"]
    assert f"{registry}/{values['image']['repository']}:{app_version}" == project_images.operator_name()
    assert f"{registry}/{values['consumer']['image']['repository']}:{app_version}" == project_images.consumer_name()
    assert values["image"]["pullPolicy"] == "Never"
    kind_up = (ROOT / "hack/kind-up.sh").read_text()
    assert "-f hack/local-images.values.yaml" in kind_up and "--set" not in kind_up
    assert '-t "localhost/antidote/operator:$tag"' in kind_up
    assert '-t "localhost/antidote/consumer:$tag"' in kind_up
    node_test = (ROOT / "tests/integration/node_cluster.py").read_text()
    assert 'VALUES = ROOT / "hack/local-images.values.yaml"' in node_test
