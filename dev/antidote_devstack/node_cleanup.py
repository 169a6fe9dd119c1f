"""What a node leaves on the machine that does not end with its processes: mounts under its
state (container root filesystems, pods' network namespaces, volumes), the kubelet's
`kubepods` cgroups and processes still in them; and `leftovers()`, the check that nothing
of it is left (docs/node.md, "What `dev down` cleans")."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from .node_layout import BRIDGE, GUARD_CHAIN, run


def unmount_under(root: Path) -> None:
    prefix = str(root) + "/"
    for _ in range(3):
        mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        mine = [m for m in mounts if m.startswith(prefix) or m == str(root)]
        if not mine:
            return
        for point in reversed(mine):  # children before parents
            subprocess.run(["umount", "-l", point.replace("\\040", " ")], capture_output=True)


def kill_pods_cgroups() -> None:
    """SIGKILL every process in the kubelet's pod cgroups (kubepods, in every hierarchy)."""
    for procs in Path("/sys/fs/cgroup").glob("*/kubepods/**/cgroup.procs"):
        try:
            pids = procs.read_text().split()
        except OSError:
            continue
        for pid in pids:
            try:
                os.kill(int(pid), 9)
            except ProcessLookupError:
                pass


def remove_cgroups() -> None:
    """The kubelet's cgroup trees (kubepods), emptied by now, in every v1 hierarchy."""
    root = Path("/sys/fs/cgroup")
    for top in root.glob("*/kubepods"):
        for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            try:
                d.rmdir()
            except OSError:
                pass
        try:
            top.rmdir()
        except OSError:
            pass


def leftovers(state_dir: Path) -> dict[str, list[str]]:
    """What a node would leave behind on this machine; all empty after stop()."""
    # One name a time: pgrep refuses patterns longer than 15 characters (a comm's length).
    procs = [line for name in ("containerd", "kubelet", "kube-proxy", "coredns", "kube-scheduler",
                               "kube-controller")  # kube-controller-manager, cut to 15
             for line in run(["pgrep", "-a", name], "check", check=False).stdout.splitlines()]
    mounts = [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if "containerd" in line or str(state_dir / "node") in line]
    netns = sorted(os.listdir("/run/netns")) if Path("/run/netns").exists() else []
    rules = "".join(run([save], "check", check=False).stdout
                    for save in ("iptables-save", "ip6tables-save"))
    chains = [line for line in rules.splitlines() if re.search(r"CNI|KUBE-|" + GUARD_CHAIN, line)]
    bridge = run(["ip", "-br", "link", "show", BRIDGE], "check", check=False).stdout.split()
    return {"processes": procs, "mounts": mounts, "netns": netns, "iptables": chains,
            "bridge": bridge[:1]}
