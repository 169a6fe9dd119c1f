"""Pure pieces of the stack's node (`antidote dev up --node`): flags, configs, certs, keys."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from antidote_devstack import build, controlplane, images, kafka, node, stack
from antidote_devstack.certs import client_cert, ensure_pki
from antidote_devstack.errors import StackError


def test_node_binaries_are_built_only_for_the_node() -> None:
    for name in ("kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2", "ctr", "coredns"):
        assert name in build.NODE_BINARIES and name not in build.DEFAULT_BINARIES
    # The kubelet and kube-proxy come from the API server's module and pin.
    assert build.GO_BINARIES["kubelet"].module == build.GO_BINARIES["kube-apiserver"].module == "k8s"
    assert build.GO_BINARIES["kube-proxy"].ldflags == build.GO_BINARIES["kube-apiserver"].ldflags
    gomod = (build.HACK / "containerd" / "go.mod").read_text()
    assert f"github.com/containerd/containerd/v2 {build.CONTAINERD_VERSION}" in gomod


def test_apiserver_with_a_node_authorizes_nodes_and_binds_the_gateway(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path)
    cmd = controlplane.apiserver_command(Path("/bin/kube-apiserver"), pki, 2379, 6443,
                                         node.GATEWAY, node=True)
    assert "--authorization-mode=Node,RBAC" in cmd
    assert "--enable-admission-plugins=NodeRestriction" in cmd
    assert not any(a.startswith("--disable-admission-plugins") for a in cmd)
    assert f"--bind-address={node.GATEWAY}" in cmd and f"--advertise-address={node.GATEWAY}" in cmd
    # Pods reach the API server at the gateway: the serving cert names it.
    server = x509.load_pem_x509_certificate(pki.server_cert.read_bytes())
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert node.GATEWAY in [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]


def test_kafka_with_a_node_listens_and_advertises_on_the_gateway(tmp_path: Path) -> None:
    props = dict(line.split("=", 1) for line in kafka.server_properties(
        tmp_path, 9092, 9093, sasl_port=9094, host=node.GATEWAY).splitlines() if line)
    assert props["listeners"].split(",")[:2] == [f"PLAINTEXT://{node.GATEWAY}:9092",
                                                 f"SASL_PLAINTEXT://{node.GATEWAY}:9094"]
    assert props["advertised.listeners"] == (f"PLAINTEXT://{node.GATEWAY}:9092,"
                                             f"SASL_PLAINTEXT://{node.GATEWAY}:9094")
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9093"  # the controller stays on loopback


def test_component_client_certs_chain_to_the_stack_ca(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path)
    cert_path, key_path = client_cert(pki, "kubelet", "system:node:n1", "system:nodes")
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(pki.ca_cert.read_bytes()))
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:n1"
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
    assert client_cert(pki, "kubelet", "system:node:n1", "system:nodes") == (cert_path, key_path)
    assert cert_path.read_bytes() == client_cert(pki, "kubelet", "x")[0].read_bytes()  # reused


def test_stop_without_a_node_touches_nothing(tmp_path: Path) -> None:
    # `dev down` of a stack without a node must not sweep the machine's bridge or chains,
    # which may be another stack's node.
    assert node.stop(tmp_path) == []


def test_pause_tag_is_read_from_the_kubernetes_module(tmp_path: Path) -> None:
    (tmp_path / "build/pause").mkdir(parents=True)
    (tmp_path / "build/pause/Makefile").write_text("REV = 0\nTAG ?= 3.10.2\n")
    assert images.pause_tag(tmp_path) == "3.10.2"


def test_static_binaries_are_told_from_dynamic_ones() -> None:
    assert images._dynamic(Path("/usr/bin/env").read_bytes())  # Debian's coreutils: dynamic


def test_state_without_node_fields_loads_as_a_stack_without_a_node(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text(
        '{"dir": "/d", "kubeconfig": "/k", "apiserver_port": 1, "etcd_port": 2, '
        '"kafka_bootstrap": "127.0.0.1:3"}')
    s = stack.load(tmp_path)
    assert s is not None and s.node == "" and s.processes == stack.PROCESSES
    assert s.server == "https://127.0.0.1:1"


def test_the_node_refuses_a_user_that_is_not_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node.os, "geteuid", lambda: 1000)
    with pytest.raises(StackError, match=r"^start node: the node needs root .* without --node"):
        stack.up(Path("/nonexistent-stack"), node=True)  # before building or starting anything


def test_a_route_into_the_pod_range_on_another_interface_is_named() -> None:
    from antidote_devstack.node_network import clashing_routes

    # `ip -json route show` on a machine where buildah ran a container on its default network.
    routes = [{"dst": "default", "gateway": "192.0.2.1", "dev": "eth0"},
              {"dst": "10.88.0.0/16", "dev": "cni-podman0", "prefsrc": "10.88.0.1"},
              {"dst": "10.88.0.0/16", "dev": "antidote0", "prefsrc": "10.88.0.1"},
              {"dst": "10.89.0.0/24", "dev": "podman1"},
              {"dst": "10.88.4.0/24", "dev": "docker7"},
              {"dst": "192.0.2.0/24", "dev": "eth0"}]
    assert clashing_routes(routes) == ["cni-podman0", "docker7"]
    assert clashing_routes([r for r in routes if r["dev"] in ("eth0", "antidote0", "podman1")]) == []
