"""`antidote dev load-images`: the demo's and the tests' way of loading the project's images
into the node, as one command (the loading itself runs on the node: test_node_load_images.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from antidote_cli.main import build_parser
from antidote_devstack import project_images

ROOT = Path(__file__).resolve().parents[2]


def test_without_a_running_node_it_says_how_to_start_one(tmp_path: Path, capsys) -> None:
    args = build_parser().parse_args(["dev", "load-images", "--dir", str(tmp_path)])
    assert args.run(args) == 1
    assert "antidote dev up --node" in capsys.readouterr().err


def test_it_loads_the_names_the_chart_values_give(monkeypatch: pytest.MonkeyPatch) -> None:
    values = yaml.safe_load((ROOT / "hack/local-images.values.yaml").read_text())
    registry = values["image"]["registry"]  # the consumer image's too (no registry of its own)
    assert project_images.operator_name().rsplit(":", 1)[0] == f"{registry}/{values['image']['repository']}"
    assert (project_images.consumer_name().rsplit(":", 1)[0]
            == f"{registry}/{values['consumer']['image']['repository']}")
    loaded: list[tuple[Path, str, Path]] = []
    monkeypatch.setattr(project_images, "operator_image", lambda: ("op:1", Path("/op.tar")))
    monkeypatch.setattr(project_images, "consumer_image", lambda: ("co:1", Path("/co.tar")))
    monkeypatch.setattr("antidote_devstack.node.load_image", lambda *a: loaded.append(a))
    monkeypatch.setattr(project_images.os, "geteuid", lambda: 0)
    assert project_images.load_into_node(Path("/s")) == {"operator": "op:1", "consumer": "co:1"}
    assert loaded == [(Path("/s"), "op:1", Path("/op.tar")), (Path("/s"), "co:1", Path("/co.tar"))]
