"""The committed CRDs and docs/api.md are exactly what the models generate, and the schemas
are structural, defaulted and documented."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from antidote_api import PoisonPolicySpec, QueueConsumerSpec, crdgen, generated
from antidote_cli.main import main

from ..api_cases import ROOT, valid_consumer

FIX = "regenerate with: .venv/bin/antidote crds --write"
GENERATED = generated.files()
CRDS = {k.kind: crdgen.crd(k) for k in crdgen.KINDS}


def _schema(kind: str) -> dict[str, Any]:
    return CRDS[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


@pytest.mark.parametrize("rel", sorted(GENERATED))
def test_committed_file_matches_the_models(rel: str) -> None:
    path = ROOT / rel
    assert path.is_file(), f"{rel} is missing; {FIX}"
    assert path.read_text() == GENERATED[rel], f"{rel} drifted from api/antidote_api; {FIX}"


def test_chart_copy_is_byte_identical() -> None:
    for kind in crdgen.KINDS:
        assert (ROOT / "crds" / kind.filename).read_bytes() == \
            (ROOT / "charts/antidote/files/crds" / kind.filename).read_bytes(), FIX
    chart = {p.name for p in (ROOT / "charts/antidote/files/crds").glob("*.yaml")}
    assert sorted(p.name for p in (ROOT / "crds").glob("*.yaml")) == sorted(chart) == \
        sorted(k.filename for k in crdgen.KINDS)
    # Helm's crds/ folder holds only Kopf's peering CRDs (hack/gen_chart.py;
    # tests/unit/test_chart_files.py): a copy of Antidote's there would be installed before
    # the templates' and then refused as not owned by the release.
    assert [p.name for p in (ROOT / "charts/antidote/crds").glob("*.yaml")] == ["kopf.dev_peerings.yaml"]


def _walk(node: Any, path: str = ""):
    if isinstance(node, dict):
        yield path, node
        for key, sub in node.get("properties", {}).items():
            yield from _walk(sub, f"{path}.{key}")
        if isinstance(node.get("items"), dict):
            yield from _walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            yield from _walk(node["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_schema_is_structural(kind: str) -> None:
    for path, node in _walk(_schema(kind)):
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), path
        assert not {"$ref", "anyOf", "oneOf", "allOf", "title", "$defs", "const", "examples",
                    "uniqueItems"} & set(node), path
        assert node.get("additionalProperties", {}) is not False, path
        for key in ("exclusiveMinimum", "exclusiveMaximum"):
            assert isinstance(node.get(key, True), bool), path
        assert not any(k.startswith("x-antidote") for k in node), path
        if node.get("type") == "object" and "properties" in node:
            assert set(node.get("required", [])) <= set(node["properties"]), path


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_every_spec_and_status_field_is_described(kind: str) -> None:
    props = _schema(kind)["properties"]
    for part in ("spec", "status"):
        for path, node in _walk(props[part], part):
            if not path.endswith(("[]", "{}")):  # items and map values are described by their field
                assert node.get("description"), f"{kind} {path} has no description"


def _apply_defaults(obj: Any, node: dict[str, Any]) -> Any:
    """The API server's structural defaulting: fill missing fields, then descend."""
    if isinstance(obj, dict) and "properties" in node:
        for key, sub in node["properties"].items():
            if key not in obj and "default" in sub:
                obj[key] = copy.deepcopy(sub["default"])
            if key in obj:
                _apply_defaults(obj[key], sub)
    elif isinstance(obj, list) and "items" in node:
        for item in obj:
            _apply_defaults(item, node["items"])
    return obj


def test_server_defaults_are_the_model_defaults() -> None:
    spec = _schema("PoisonPolicy")["properties"]["spec"]
    assert spec["default"] == {}
    # An object without spec gets the whole default policy, as `kubectl get -o yaml` shows it.
    defaulted = _apply_defaults({}, _schema("PoisonPolicy"))["spec"]
    assert defaulted == PoisonPolicySpec().wire()
    assert defaulted["retries"] == {"immediate": 5, "cycles": 2, "cycleDelay": "30m", "backoff": 1.0,
                                    "nonRetryable": [], "attemptTimeout": "1m"}
    qc = _apply_defaults(copy.deepcopy(valid_consumer()["spec"]), _schema("QueueConsumer")["properties"]["spec"])
    assert qc == QueueConsumerSpec.model_validate(valid_consumer()["spec"]).wire()


def test_crd_metadata() -> None:
    for kind, short in (("PoisonPolicy", "ppol"), ("QueueConsumer", "qc")):
        crd = CRDS[kind]
        names, version = crd["spec"]["names"], crd["spec"]["versions"][0]
        assert crd["spec"]["group"] == "antidote.dev" and crd["spec"]["scope"] == "Namespaced"
        assert names["shortNames"] == [short] and names["categories"] == ["antidote"]
        assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
        assert version["subresources"] == {"status": {}}
        conditions = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["conditions"]
        assert conditions["x-kubernetes-list-type"] == "map"
        assert conditions["x-kubernetes-list-map-keys"] == ["type"]
        assert conditions["items"]["required"] == ["type", "status", "reason", "lastTransitionTime"]


def test_printer_columns() -> None:
    qc = [c["name"] for c in CRDS["QueueConsumer"]["spec"]["versions"][0]["additionalPrinterColumns"]
          if not c.get("priority")]
    assert qc == ["Ready", "Paused", "Reason", "Processed", "Poisoned", "Age"]
    ppol = [c["name"] for c in CRDS["PoisonPolicy"]["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert ppol[0] == "Disposition" and ppol[-1] == "Age" and "Attempts" in ppol


def test_cel_rules_are_in_the_schema() -> None:
    reader = _schema("PoisonPolicy")["properties"]["spec"]["properties"]["reader"]
    rules = {r["fieldPath"]: r for r in reader["x-kubernetes-validations"]}
    assert rules[".disposition"]["rule"] == "!has(self.disposition) || self.disposition != 'Move'"
    assert "Move is refused" in rules[".disposition"]["message"]
    root_rules = _schema("QueueConsumer")["x-kubernetes-validations"]
    assert [r["message"].split()[0] for r in root_rules] == ["metadata.name"]


def test_docs_name_every_field_and_its_seed() -> None:
    docs = (ROOT / "docs/api.md").read_text()
    for kind in ("PoisonPolicy", "QueueConsumer"):
        for part in ("spec", "status"):
            for path, _ in _walk(_schema(kind)["properties"][part]):
                if path and not path.endswith(("[]", "{}")):
                    assert f"| `{path.lstrip('.')}` |" in docs, f"{kind}.{part}{path} missing in docs/api.md"
    for seed in ("WCF ReceiveRetryCount", "WCF MaxRetryCycles", "WCF RetryCycleDelay",
                 "WCF ReceiveErrorHandling", "Service Broker: 5 rollbacks"):
        assert seed in docs


def test_cli_prints_both_crds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crds"]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert [d["metadata"]["name"] for d in docs] == ["poisonpolicies.antidote.dev", "queueconsumers.antidote.dev"]
    assert docs == list(CRDS.values())


def test_cli_writes_every_generated_file(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    assert main(["crds", "--write", "--root", str(tmp_path)]) == 0
    for rel, text in GENERATED.items():
        assert (tmp_path / rel).read_text() == text
    assert main(["crds", "--write", "--root", str(tmp_path)]) == 0
    assert "unchanged docs/api.md" in capsys.readouterr().out
    assert main(["crds", "--write", "--root", str(tmp_path / "nowhere")]) == 1


def test_a_map_with_constrained_keys_is_refused_before_the_api_server_does() -> None:
    from typing import Annotated

    from pydantic import StringConstraints

    from antidote_api.base import ApiModel

    class Keys(ApiModel):
        m: dict[Annotated[str, StringConstraints(max_length=3)], str]

    with pytest.raises(ValueError, match="propertyNames"):
        crdgen.json_schema(Keys)
