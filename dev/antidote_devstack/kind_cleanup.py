"""What `kind delete cluster` leaves on a podman machine, and its removal (docs/kind.md,
"Tear down"): kind keeps its podman network `kind` for the next cluster; podman's CNI
plugins (portmap, firewall) keep the chains they created in the host's iptables
(CNI-FORWARD, CNI-ADMIN, CNI-HOSTPORT-*), shared by every podman container on a CNI
network; and host-local's IPAM state of the network. The stack's node counts any CNI chain
on the machine as its own leftover (node_cleanup.leftovers), so they go too, once podman
runs no container that could use them."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

NETWORK = "kind"
PODMAN_CNI_CHAINS = ("CNI-FORWARD", "CNI-ADMIN", "CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-MASQ",
                     "CNI-HOSTPORT-SETMARK")
IPAM_STATE = Path("/var/lib/cni/networks")


def chain_removal(dump: str) -> list[list[str]]:
    """The arguments (after `iptables -w`) that remove PODMAN_CNI_CHAINS from an
    `iptables-save` dump: the jumps to them from other chains, then flush, then delete."""
    table = None
    jumps: list[list[str]] = []
    chains: list[tuple[str, str]] = []
    for line in dump.splitlines():
        if line.startswith("*"):
            table = line[1:]
        elif line.startswith(":") and table and line[1:].split()[0] in PODMAN_CNI_CHAINS:
            chains.append((table, line[1:].split()[0]))
        elif line.startswith("-A ") and table:
            parts = shlex.split(line)
            target = parts[parts.index("-j") + 1] if "-j" in parts else ""
            if parts[1] not in PODMAN_CNI_CHAINS and target in PODMAN_CNI_CHAINS:
                jumps.append(["-t", table, "-D", *parts[1:]])
    return (jumps + [["-t", t, "-F", c] for t, c in chains]
            + [["-t", t, "-X", c] for t, c in chains])


def remove_podman_cni_state(network: str = NETWORK) -> list[str]:
    """Remove kind's network, then (if podman runs no container) podman's CNI chains and the
    network's IPAM state; returns what was removed."""
    removed = []
    if subprocess.run(["podman", "network", "rm", network], capture_output=True).returncode == 0:
        removed.append(f"podman network {network}")
    if subprocess.run(["podman", "ps", "-aq"], capture_output=True, text=True).stdout.strip():
        return removed  # another container may forward through them
    for save, cmd in (("iptables-save", "iptables"), ("ip6tables-save", "ip6tables")):
        if not shutil.which(save):
            continue
        dump = subprocess.run([save], capture_output=True, text=True).stdout
        for args in chain_removal(dump):
            if subprocess.run([cmd, "-w", *args], capture_output=True).returncode == 0 and args[2] == "-X":
                removed.append(f"{cmd} {args[1]} {args[3]}")
    state = IPAM_STATE / network
    if state.exists():
        shutil.rmtree(state)
        removed.append(str(state))
    return removed
