"""The node's network: the bridge `antidote0` with its CNI config (no ipMasq, no default
route for pods), IP forwarding, and the guard chain that forwards only from the bridge to
the bridge; and their removal, which `dev down` does after the API server and Kafka (bound to
the bridge's address) have stopped. docs/node.md, "Network"."""

from __future__ import annotations

import ipaddress
import json
import shlex
import subprocess
from pathlib import Path

from .controlplane import SERVICE_CIDR
from .errors import StackError
from .node_layout import BRIDGE, CHAIN_PREFIXES, GATEWAY, GUARD_CHAIN, POD_CIDR, Paths, run

FORWARD = Path("/proc/sys/net/ipv4/ip_forward")


def clashing_routes(routes: list[dict]) -> list[str]:
    """The interfaces (`ip -json route` entries) that already route part of the pods' range:
    with two bridges on 10.88.0.0/16 the host answers pods on the other one, and every pod's
    DNS and Kafka time out. Podman's and buildah's default network (`cni-podman0`, or
    `podman0` with netavark) is that very range."""
    pods = ipaddress.ip_network(POD_CIDR)
    found = []
    for r in routes:
        dst, dev = r.get("dst", ""), r.get("dev", "")
        if dev == BRIDGE or dst in ("", "default") or ":" in dst:
            continue
        if ipaddress.ip_network(dst, strict=False).overlaps(pods) and dev not in found:
            found.append(dev)
    return found


def setup(paths: Paths) -> None:
    """The bridge (so the API server and Kafka can bind its gateway before any pod), the
    CNI config, and the guard chain; IP forwarding on, for Service traffic between pods."""
    routes = json.loads(run(["ip", "-json", "route", "show"], "create bridge").stdout or "[]")
    clash = clashing_routes(routes)
    if clash:
        raise StackError("create bridge", f"{POD_CIDR}, the node's pod range, is already routed via "
                         f"{', '.join(clash)} (podman's or buildah's default network uses it); "
                         f"remove it first, e.g. `ip link delete {clash[0]}`")
    if run(["ip", "link", "show", BRIDGE], "create bridge", check=False).returncode != 0:
        run(["ip", "link", "add", BRIDGE, "type", "bridge"], "create bridge")
    run(["ip", "addr", "replace", f"{GATEWAY}/16", "dev", BRIDGE], "create bridge")
    run(["ip", "link", "set", BRIDGE, "up"], "create bridge")

    paths.cni_conf.mkdir(parents=True, exist_ok=True)
    conflist = {
        "cniVersion": "1.0.0", "name": "antidote",
        "plugins": [
            {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False,
             "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR, "gateway": GATEWAY}]],
                      # No default route: only the pods' and the Services' ranges.
                      "routes": [{"dst": SERVICE_CIDR, "gw": GATEWAY}],
                      "dataDir": str(paths.root / "cni-ipam")}},
            {"type": "loopback"},
        ],
    }
    (paths.cni_conf / "10-antidote.conflist").write_text(json.dumps(conflist, indent=2))

    saved = paths.root / "ip_forward.saved"
    if not saved.exists():
        saved.write_text(FORWARD.read_text())
    FORWARD.write_text("1\n")
    # Forwarded packets only from the bridge to the bridge (a pod to a Service's pod). If
    # the machine forwarded nothing before, it still forwards nothing else.
    ipt = ["iptables", "-w"]
    if run([*ipt, "-N", GUARD_CHAIN], "guard chain", check=False).returncode == 0:
        rules = [["-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT"]]
        if saved.read_text().strip() == "0":
            rules.append(["-j", "DROP"])
        else:
            rules += [["-i", BRIDGE, "-j", "DROP"], ["-o", BRIDGE, "-j", "DROP"]]
        for rule in rules:
            run([*ipt, "-A", GUARD_CHAIN, *rule], "guard chain")
        run([*ipt, "-I", "FORWARD", "1", "-j", GUARD_CHAIN], "guard chain")


def remove(paths: Paths) -> None:
    """The chains, the bridge, and ip_forward as it was before setup()."""
    remove_chains()
    run(["ip", "link", "delete", BRIDGE], "delete bridge", check=False)
    saved = paths.root / "ip_forward.saved"
    if saved.exists():
        FORWARD.write_text(saved.read_text())


def remove_chains() -> None:
    """Every KUBE-*, CNI-* chain and our guard, in every table, for IPv4 and IPv6."""
    for save, cmd in (("iptables-save", "iptables"), ("ip6tables-save", "ip6tables")):
        dump = subprocess.run([save], capture_output=True, text=True).stdout
        table: str | None = None
        jumps: list[tuple[str, list[str]]] = []
        chains: list[tuple[str, str]] = []
        for line in dump.splitlines():
            if line.startswith("*"):
                table = line[1:]
            elif line.startswith(":") and table and line[1:].startswith(CHAIN_PREFIXES):
                chains.append((table, line[1:].split()[0]))
            elif line.startswith("-A ") and table:
                parts = shlex.split(line)  # comments are quoted
                chain = parts[1]
                target = parts[parts.index("-j") + 1] if "-j" in parts else ""
                if not chain.startswith(CHAIN_PREFIXES) and target.startswith(CHAIN_PREFIXES):
                    jumps.append((table, ["-D", *parts[1:]]))
        for table, rule in jumps:
            subprocess.run([cmd, "-w", "-t", table, *rule], capture_output=True)
        for table, chain in chains:
            subprocess.run([cmd, "-w", "-t", table, "-F", chain], capture_output=True)
        for table, chain in chains:
            subprocess.run([cmd, "-w", "-t", table, "-X", chain], capture_output=True)
