"""The node's names, addresses and state layout, shared by its modules (node.py and
node_*.py), and the one way they run a command."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from .errors import StackError

NODE_NAME = "antidote-node"
BRIDGE = "antidote0"
POD_CIDR = "10.88.0.0/16"
GATEWAY = "10.88.0.1"  # the bridge's address: pods reach the host's API server, Kafka, DNS here
CLUSTER_DOMAIN = "cluster.local"
GUARD_CHAIN = "ANTIDOTE-NODE"
# Chains the node's components create in iptables' tables (kube-proxy, the kubelet, the
# CNI plugins, our guard); stop() removes every one of them.
CHAIN_PREFIXES = ("KUBE-", "CNI-", GUARD_CHAIN)


@dataclass(frozen=True)
class Paths:
    """Where the node's state lives: the stack directory's `node/`."""

    root: Path

    @property
    def containerd(self) -> Path:
        return self.root / "containerd"

    @property
    def socket(self) -> Path:
        return self.containerd / "containerd.sock"

    @property
    def cni_conf(self) -> Path:
        return self.root / "cni"

    @property
    def kubelet(self) -> Path:
        return self.root / "kubelet"


def run(cmd: list[str], step: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise StackError(step, f"`{' '.join(cmd)}` exit {proc.returncode}: "
                         f"{(proc.stderr or proc.stdout).strip()}")
    return proc
