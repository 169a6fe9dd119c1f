"""The kind builders' pure parts (docs/kind.md): the node image's containerd config, its
preload script, the environment hack/kind-up.sh reads, and the script itself with stand-in
`kind`, `kubectl` and `helm` that record their arguments (the real run: test_kind.py)."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
from pathlib import Path

import pytest

from antidote_devstack import kind_cleanup, kind_env, kind_images, kind_node
from antidote_devstack.errors import StackError

ROOT = Path(__file__).resolve().parents[2]

KIND_CONFIG = """\
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  restrict_oom_score_adj = false
"""


def test_containerd_config_names_the_sandbox_built_here_and_restricts_oom_score_adj() -> None:
    out = kind_node.containerd_config(KIND_CONFIG, "registry.k8s.io/pause:3.10.2")
    assert 'sandbox_image = "registry.k8s.io/pause:3.10.2"' in out
    assert "restrict_oom_score_adj = true" in out and "= false" not in out


def test_containerd_config_refuses_a_config_without_the_lines_it_sets() -> None:
    with pytest.raises(StackError, match="sandbox_image"):
        kind_node.containerd_config("version = 2\n", "p:1")


def test_preload_imports_each_archive_under_its_name_and_drops_ctr_s_extra_names() -> None:
    script = kind_node.preload_script([("registry.k8s.io/etcd:3.6.8-0", "kind-etcd-1.tar"),
                                       ("registry.k8s.io/pause:3.10.2", "pause-2.tar")])
    assert ("$ctr images import --index-name 'registry.k8s.io/etcd:3.6.8-0' "
            "'/kind/images/kind-etcd-1.tar'") in script
    assert "'/kind/images/pause-2.tar'" in script
    assert "grep '^import-'" in script
    assert script.rstrip().endswith("touch /kind/images/.imported")  # the unit's condition
    assert "ConditionPathExists=!/kind/images/.imported" in kind_node.PRELOAD_UNIT
    assert "Before=kubelet.service" in kind_node.PRELOAD_UNIT


def test_default_cni_is_templated_by_kind_with_the_pod_subnet() -> None:
    # kind templates the manifest only when it carries this phrase (installcni/cni.go).
    assert kind_node.DEFAULT_CNI.startswith("# would you kindly template this file")
    assert '"subnet": "{{ .PodSubnet }}"' in kind_node.DEFAULT_CNI
    assert "hostNetwork: true" in kind_node.DEFAULT_CNI


def test_repo_basename_maps_kubeadm_s_images_to_the_binaries() -> None:
    assert kind_images.repo_basename("registry.k8s.io/coredns/coredns:v1.14.2") == "coredns"
    assert kind_images.repo_basename("registry.k8s.io/etcd:3.6.8-0") == "etcd"
    assert kind_images.BINARIES["coredns"] == ("coredns-kind", "/coredns")


def test_containers_conf_sets_rlimits_podman_can_apply_here(tmp_path: Path) -> None:
    conf = kind_node.containers_conf(tmp_path / "c.conf").read_text()
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if nofile == resource.RLIM_INFINITY:
        nofile = 1048576
    nofile = min(nofile, 1048576)
    assert conf.startswith("[containers]\n")
    assert f'"nofile={nofile}:{nofile}"' in conf
    assert "nproc=" in conf and int(conf.split("nproc=")[1].split(":")[0]) <= 32768


def test_env_script_exports_what_kind_up_reads_and_prepends_the_tools() -> None:
    env = kind_env.env_for("localhost/antidote/kind-node:v1", [Path("/c/op.tar"), Path("/c/co.tar")],
                           Path("/c/containers.conf"), Path("/c/kind/bin"))
    script = kind_env.env_script(env)
    assert "export KIND_EXPERIMENTAL_PROVIDER=podman\n" in script
    assert "export KIND_NODE_IMAGE=localhost/antidote/kind-node:v1\n" in script
    assert "export ANTIDOTE_IMAGE_ARCHIVES='/c/op.tar /c/co.tar'\n" in script
    assert "export CONTAINERS_CONF=/c/containers.conf\n" in script
    assert script.rstrip().endswith('export PATH=/c/kind/bin:"$PATH"')


def _stubs(tmp_path: Path, with_docker: bool) -> tuple[Path, Path]:
    """kind, kubectl, helm (and docker) that append their arguments to calls.log and read
    their stdin (kind-up.sh pipes manifests into kubectl)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    for tool in ["kind", "kubectl", "helm"] + (["docker"] if with_docker else []):
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {log}\ncat > /dev/null\n')
        (bin_dir / tool).chmod(0o755)
    for tool in ("bash", "sed", "awk", "grep", "dirname", "cat", "env"):
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    return bin_dir, log


def _kind_up(bin_dir: Path, **extra: str) -> subprocess.CompletedProcess:
    env = {"PATH": str(bin_dir), "HOME": os.environ.get("HOME", "/root"), **extra}
    return subprocess.run([str(bin_dir / "bash"), str(ROOT / "hack/kind-up.sh")], env=env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_kind_up_without_docker_uses_the_node_image_and_loads_the_archives(tmp_path: Path) -> None:
    bin_dir, log = _stubs(tmp_path, with_docker=False)
    out = _kind_up(bin_dir, KIND_NODE_IMAGE="localhost/antidote/kind-node:v1",
                   ANTIDOTE_IMAGE_ARCHIVES="/a/op.tar /a/co.tar")
    assert out.returncode == 0, out.stderr
    calls = log.read_text().splitlines()
    assert ("kind create cluster --name antidote --wait 120s --image "
            "localhost/antidote/kind-node:v1") in calls
    assert "kind load image-archive --name antidote /a/op.tar" in calls
    assert "kind load image-archive --name antidote /a/co.tar" in calls
    assert not [c for c in calls if c.startswith(("docker", "kind load docker-image"))]
    assert any(c.startswith("helm upgrade --install antidote charts/antidote") for c in calls)


def test_kind_up_with_docker_is_as_documented_before(tmp_path: Path) -> None:
    bin_dir, log = _stubs(tmp_path, with_docker=True)
    out = _kind_up(bin_dir)
    assert out.returncode == 0, out.stderr
    calls = log.read_text().splitlines()
    assert "kind create cluster --name antidote --wait 120s" in calls
    assert [c.split()[0] for c in calls if c.startswith("docker")] == ["docker", "docker"]
    assert any(c.startswith("kind load docker-image --name antidote") for c in calls)


def test_kind_up_without_docker_or_archives_says_docker_is_required(tmp_path: Path) -> None:
    bin_dir, _ = _stubs(tmp_path, with_docker=False)
    out = _kind_up(bin_dir)
    assert out.returncode == 1 and "kind-up: docker is required" in out.stderr


# What podman's CNI plugins left here after a kind cluster and its network were deleted.
PODMAN_LEFT = """\
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:CNI-ADMIN - [0:0]
:CNI-FORWARD - [0:0]
:CNI-8d1e3ab2 - [0:0]
-A FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD
-A FORWARD -j ANTIDOTE-GUARD
-A CNI-FORWARD -m comment --comment "CNI firewall plugin admin overrides" -j CNI-ADMIN
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:CNI-HOSTPORT-DNAT - [0:0]
:CNI-HOSTPORT-MASQ - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A POSTROUTING -m comment --comment "CNI portfwd requiring masquerade" -j CNI-HOSTPORT-MASQ
-A CNI-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE
COMMIT
"""


def test_chain_removal_takes_podman_s_cni_chains_and_the_jumps_to_them_only() -> None:
    cmds = kind_cleanup.chain_removal(PODMAN_LEFT)
    assert cmds[:3] == [
        ["-t", "filter", "-D", "FORWARD", "-m", "comment", "--comment", "CNI firewall plugin rules",
         "-j", "CNI-FORWARD"],
        ["-t", "nat", "-D", "PREROUTING", "-m", "addrtype", "--dst-type", "LOCAL", "-j",
         "CNI-HOSTPORT-DNAT"],
        ["-t", "nat", "-D", "POSTROUTING", "-m", "comment", "--comment",
         "CNI portfwd requiring masquerade", "-j", "CNI-HOSTPORT-MASQ"]]
    deleted = [c[3] for c in cmds if c[2] == "-X"]
    assert deleted == ["CNI-ADMIN", "CNI-FORWARD", "CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-MASQ"]
    # Flushed before deleted; a chain of someone else's (a pod's CNI-<hash>) is left alone.
    assert [c for c in cmds if c[2] == "-F"] == [["-t", t, "-F", n] for t, n in
                                                  [("filter", "CNI-ADMIN"), ("filter", "CNI-FORWARD"),
                                                   ("nat", "CNI-HOSTPORT-DNAT"), ("nat", "CNI-HOSTPORT-MASQ")]]
    assert not [c for c in cmds if "CNI-8d1e3ab2" in c or "ANTIDOTE-GUARD" in c]
