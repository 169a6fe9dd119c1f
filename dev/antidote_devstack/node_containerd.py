"""containerd (CRI, runc) for the node: its config, its start with the sandbox and busybox
images loaded into its `k8s.io` namespace, and killing what it ran when the node stops
(containers, and the shims, which outlive it in sessions of their own)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from . import images
from .node_layout import Paths, run
from .procs import Supervisor
from .progress import say

CONTAINERD_CONFIG = """\
version = 3
root = "{root}/root"
state = "{root}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile",
                    "io.containerd.snapshotter.v1.erofs", "io.containerd.tracing.processor.v1.otlp",
                    "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[plugins.'io.containerd.cri.v1.runtime']
  # The VM withholds CAP_SYS_RESOURCE: without this every sandbox fails in runc with
  # "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  # Pods' network namespaces under our state dir, not /run/netns: stop() finds them all.
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "{cni_conf}"
    max_conf_num = 1

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{sandbox}"

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""


def start(sup: Supervisor, paths: Paths, artefacts: dict[str, Path], env: dict[str, str]) -> None:
    """containerd, and the sandbox (pause) and busybox images in its k8s.io namespace."""
    pause_name, pause_archive = images.pause_image()
    paths.containerd.mkdir(parents=True, exist_ok=True)
    config = paths.containerd / "config.toml"
    config.write_text(CONTAINERD_CONFIG.format(root=paths.containerd, socket=paths.socket,
                                               cni_conf=paths.cni_conf, sandbox=pause_name))
    say("starting containerd")
    sup.start("containerd", [str(artefacts["containerd"]), "--config", str(config)], env=env)
    sup.wait_for("containerd", "start containerd", lambda: ctr_ok(artefacts["ctr"], paths.socket), 60)
    for name, archive in ((pause_name, pause_archive), images.busybox_image()):
        images.load(artefacts["ctr"], paths.socket, name, archive, sup.log("images"))


def ctr_ok(ctr: Path, socket: Path) -> bool:
    return subprocess.run([str(ctr), "--address", str(socket), "version"],
                          capture_output=True, timeout=5).returncode == 0


def kill_containers(ctr: Path, socket: Path) -> None:
    base = [str(ctr), "--address", str(socket), "--namespace", "k8s.io"]
    tasks = run([*base, "tasks", "list", "--quiet"], "stop containers", check=False).stdout.split()
    for task in tasks:
        run([*base, "tasks", "kill", "--signal", "SIGKILL", task], "stop containers", check=False)
    for task in tasks:
        run([*base, "tasks", "delete", "--force", task], "stop containers", check=False)
    containers = run([*base, "containers", "list", "--quiet"], "stop containers",
                      check=False).stdout.split()
    if containers:
        run([*base, "containers", "delete", *containers], "stop containers", check=False)


def kill_strays(root: Path) -> None:
    """Shims (and anything else) started with our containerd's socket: they run in sessions
    of their own, outside containerd's process group."""
    marker = str(root).encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if marker in cmdline and b"containerd-shim" in cmdline:
            try:
                os.kill(int(proc.name), 9)
            except ProcessLookupError:
                pass
