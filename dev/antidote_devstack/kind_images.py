"""The images kubeadm runs on kind's node (the control plane, kube-proxy, etcd, CoreDNS),
built locally from the binaries the stack builds, as OCI archives cached like the node's
other images (images.py), preloaded into the node image's containerd at its first boot.

kubeadm names them (`kubeadm config images list`); each holds one binary on PATH and runs as
root, as upstream's do (the static pods read root-only keys under /etc/kubernetes/pki).
kube-proxy's also holds Debian's iptables (mmdebstrap) and picks the node's iptables mode
(legacy or nft) at start, the way kind's entrypoint does for the node and upstream's
iptables-wrapper for upstream's image. Upstream's sandbox (pause) image is the node's own
(images.pause_image), named in the node's containerd config.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from . import images
from .build import KUBE_VERSION, build_go
from .errors import StackError
from .images import _pack, _run_logged_append, _tool_version
from .steps import _require

# kubeadm's image (repository basename) -> the binary built here, and where it goes.
BINARIES = {
    "kube-apiserver": ("kube-apiserver", "/usr/local/bin/kube-apiserver"),
    "kube-controller-manager": ("kube-controller-manager", "/usr/local/bin/kube-controller-manager"),
    "kube-scheduler": ("kube-scheduler", "/usr/local/bin/kube-scheduler"),
    "etcd": ("etcd", "/usr/local/bin/etcd"),
    # kubeadm's CoreDNS Deployment gives args only: the binary is the entrypoint, as upstream.
    "coredns": ("coredns-kind", "/coredns"),
}
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PROXY_PACKAGES = ("iptables", "conntrack", "kmod")

# kubeadm's DaemonSet runs /usr/local/bin/kube-proxy: this wrapper picks the iptables the
# node's rules are in (kind's entrypoint: select_iptables), then runs the real binary.
PROXY_WRAPPER = """#!/bin/sh
legacy=$( (iptables-legacy-save; ip6tables-legacy-save) 2>/dev/null | grep -c '^-')
nft=$( (iptables-nft-save; ip6tables-nft-save) 2>/dev/null | grep -c '^-')
mode=nft
[ "${legacy:-0}" -ge "${nft:-0}" ] && mode=legacy
update-alternatives --set iptables /usr/sbin/iptables-$mode >/dev/null
update-alternatives --set ip6tables /usr/sbin/ip6tables-$mode >/dev/null
exec /usr/local/bin/kube-proxy.bin "$@"
"""


def kubeadm_images(kubeadm: Path) -> list[str]:
    """The images kubeadm at KUBE_VERSION runs, e.g. registry.k8s.io/etcd:3.6.8-0."""
    out = subprocess.run([str(kubeadm), "config", "images", "list", "--kubernetes-version",
                          KUBE_VERSION], capture_output=True, text=True)
    if out.returncode != 0:
        raise StackError("build kind images", f"kubeadm config images list: {out.stderr.strip()}")
    return out.stdout.split()


def repo_basename(image: str) -> str:
    """registry.k8s.io/coredns/coredns:v1.14.2 -> coredns"""
    return image.rsplit(":", 1)[0].rsplit("/", 1)[-1]


def binary_image(name: str) -> tuple[str, Path]:
    """(name, OCI archive) of an image holding one of BINARIES, running as root."""
    binary, inside = BINARIES[repo_basename(name)]
    path = build_go(binary)
    data = path.read_bytes()

    def fill(work: Path, rootfs: Path, log: Path) -> None:
        target = rootfs / inside.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(0o755)
        (rootfs / "tmp").mkdir(mode=0o1777, exist_ok=True)

    config = ["--config.env", PATH_ENV]
    if inside == "/coredns":
        config += ["--config.entrypoint", "/coredns"]
    stem = f"kind-{repo_basename(name)}"
    return name, _pack(name, stem, fill, config, key=(path.name.encode(),), user="0:0")


def proxy_image(name: str) -> tuple[str, Path]:
    """(name, OCI archive) of kube-proxy on a Debian minbase with iptables (mmdebstrap)."""
    if os.geteuid() != 0:
        raise StackError("build kind images", "mmdebstrap needs root here")
    mmdebstrap = _require("mmdebstrap", "build kind images", "apt-get install mmdebstrap")
    path = build_go("kube-proxy")
    data = path.read_bytes()

    def fill(work: Path, rootfs: Path, log: Path) -> None:
        _run_logged_append([mmdebstrap, "--quiet", "--mode=root", "--variant=minbase",
                            f"--include={','.join(PROXY_PACKAGES)}", images.DEBIAN_SUITE,
                            str(work / "proxy.tar")], work, log)
        _run_logged_append(["tar", "-C", str(rootfs), "--numeric-owner", "-xf",
                            str(work / "proxy.tar")], work, log)
        bin_dir = rootfs / "usr/local/bin"
        (bin_dir / "kube-proxy.bin").write_bytes(data)
        (bin_dir / "kube-proxy").write_text(PROXY_WRAPPER)
        for f in ("kube-proxy.bin", "kube-proxy"):
            (bin_dir / f).chmod(0o755)

    key = (path.name.encode(), PROXY_WRAPPER.encode(), " ".join(PROXY_PACKAGES).encode(),
           images.DEBIAN_SUITE.encode(), _tool_version(mmdebstrap, "--version"))
    return name, _pack(name, "kind-kube-proxy", fill, ["--config.env", PATH_ENV], key=key,
                       user="0:0")


def build_all(kubeadm: Path) -> list[tuple[str, Path]]:
    """(name, OCI archive) of every image kubeadm runs, and of the sandbox image."""
    out = [images.pause_image()]
    for name in kubeadm_images(kubeadm):
        base = repo_basename(name)
        if base == "pause":  # the node's containerd names its own sandbox image
            continue
        if base == "kube-proxy":
            out.append(proxy_image(name))
        elif base in BINARIES:
            out.append(binary_image(name))
        else:
            raise StackError("build kind images", f"kubeadm {KUBE_VERSION} runs {name}, which "
                             "this builder does not build (kind_images.BINARIES)")
    return out


def copy_archives(found: list[tuple[str, Path]], dest: Path) -> list[tuple[str, str]]:
    """Copy each archive into `dest` (the node rootfs' /kind/images); (name, file name)."""
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for name, archive in found:
        shutil.copyfile(archive, dest / archive.name)
        out.append((name, archive.name))
    return out
