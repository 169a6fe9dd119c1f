"""A one-node cluster beside the stack's API server (`antidote dev up --node`): its start,
in order, and its stop, which leaves nothing behind.

containerd (CRI) runs the pods with runc on a CNI bridge; a kubelet registered to the stack's
API server, the controller-manager and the scheduler, kube-proxy (iptables mode) and CoreDNS
(a host process serving cluster.local) complete it. Everything lives in the stack directory's
`node/`; `stop()` removes what the node put on the machine (containers, shims, mounts,
network namespaces, iptables chains, the bridge) because none of it ends with its processes.
The pieces: node_network (bridge, CNI, guard chain), node_containerd, node_kube (controllers,
kubelet, kube-proxy), node_coredns, node_cleanup (mounts, cgroups, leftovers), node_layout
(names, addresses, paths).

The machine it was made for (and what it needs, see docs/node.md): root, cgroup v1
controllers (cgroupfs driver), no CAP_SYS_RESOURCE (no process may lower its
oom_score_adj), Debian's runc and CNI plugins.

Network rule, by construction: the bridge has no ipMasq and pods get no default route (only
the pod and Service ranges), forwarded traffic may only go from the bridge to the bridge,
and CoreDNS has no `forward`: nothing a pod sends leaves the machine.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from . import images, node_cleanup, node_containerd, node_coredns, node_kube, node_network
from .certs import Pki
from .errors import StackError
from .node_cleanup import leftovers
from .node_layout import BRIDGE, CLUSTER_DOMAIN, GATEWAY, NODE_NAME, POD_CIDR, Paths, run
from .procs import Supervisor
from .progress import say

__all__ = ["BRIDGE", "CLUSTER_DOMAIN", "GATEWAY", "NODE_NAME", "POD_CIDR", "PROCESSES", "NodeInfo",
           "check_machine", "leftovers", "load_image", "node_ready", "require_root",
           "setup_network", "start", "stop", "stop_processes", "teardown"]

# Which stack runs the machine's node (one per machine): its stack directory.
OWNER_FILE = Path("/run/antidote-node.owner")

PROCESSES = ("containerd", "kube-controller-manager", "kube-scheduler", "kubelet",
             "kube-proxy", "coredns")


def require_root() -> None:
    if os.geteuid() != 0:
        raise StackError("start node", "the node needs root (containers, mounts, iptables, a "
                         "bridge); run `antidote dev up --node` as root, or without --node")


def check_machine() -> None:
    """What the node needs from the machine, each named when missing."""
    require_root()
    if not Path("/proc/sys/net/bridge/bridge-nf-call-iptables").exists():
        raise StackError("start node", "the kernel lacks bridge netfilter (br_netfilter): "
                         "kube-proxy's Service rules would not see the bridge's traffic")
    if OWNER_FILE.exists():
        owner = OWNER_FILE.read_text().strip()
        sup = Supervisor(Path(owner))
        if any(sup.alive(n) for n in PROCESSES):
            raise StackError("start node", f"a node already runs for the stack in {owner} (one "
                             f"node per machine); stop it with `antidote dev down --dir {owner}`")
        say(f"cleaning what the node of {owner} left behind")
        stop(Path(owner))


def setup_network(state_dir: Path) -> None:
    """Claim the machine's node for this stack, then its network (node_network.setup)."""
    OWNER_FILE.write_text(str(state_dir))
    node_network.setup(Paths(state_dir / "node"))


@dataclass(frozen=True)
class NodeInfo:
    name: str
    dns: str
    dns_ready_port: int


def start(sup: Supervisor, state_dir: Path, artefacts: dict[str, Path], pki: Pki,
          api_port: int, host: str, admin_kubeconfig: Path, kubectl: str) -> NodeInfo:
    """Start containerd, the controllers, the kubelet, kube-proxy and CoreDNS, each after
    what it needs; return once the node is Ready and CoreDNS answers."""
    paths = Paths(state_dir / "node")
    env = dict(os.environ, PATH=f"{state_dir / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    node_containerd.start(sup, paths, artefacts, env)
    node_coredns.grant(kubectl, admin_kubeconfig)
    kc = node_kube.kubeconfigs(state_dir, pki, api_port, host)
    node_kube.start_controllers(sup, artefacts, pki, kc, env)
    node_kube.start_kubelet(sup, paths, artefacts, pki, kc["kubelet"], env)
    node_kube.start_proxy(sup, paths, artefacts, kc["kube-proxy"], env)
    ready_port = node_coredns.start(sup, paths, artefacts, kc["coredns"], env)

    sup.wait_for("kubelet", "start kubelet", lambda: node_ready(host, api_port, pki), 180)
    sup.wait_for("coredns", "start coredns", lambda: node_coredns.ready(ready_port), 60)
    for name in ("containerd", "kube-controller-manager", "kube-scheduler", "kube-proxy"):
        if not sup.alive(name):
            raise StackError(f"start {name}", f"{name} exited; last lines of {sup.log(name)}:\n"
                             + sup.tail(name))
    return NodeInfo(NODE_NAME, GATEWAY, ready_port)


def load_image(state_dir: Path, name: str, archive: Path) -> None:
    """Load an OCI archive into the running node's containerd (namespace k8s.io), for pods
    with `imagePullPolicy: Never`."""
    paths = Paths(state_dir / "node")
    images.load(state_dir / "bin" / "ctr", paths.socket, name, archive,
                Supervisor(state_dir).log("images"))


def node_ready(host: str, api_port: int, pki: Pki) -> bool:
    ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
    ctx.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
    url = f"https://{host}:{api_port}/api/v1/nodes/{NODE_NAME}"
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:
            node = json.loads(resp.read())
    except OSError:
        return False
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in node.get("status", {}).get("conditions", []))


# --- stop: leave nothing behind --------------------------------------------------------

def _owned(state_dir: Path) -> bool:
    return OWNER_FILE.exists() and OWNER_FILE.read_text().strip() == str(state_dir)


def stop(state_dir: Path) -> list[str]:
    """Stop the node's processes, then remove what they put on the machine."""
    stopped = stop_processes(state_dir)
    teardown(state_dir)
    return stopped


def stop_processes(state_dir: Path) -> list[str]:
    """Stop the node's processes and containers and unmount what they mounted. Safe to run
    when nothing runs (a crashed `dev up`, a second `dev down`). The bridge stays: the
    API server and Kafka are bound to its address until they stop (teardown() after them;
    an API server whose address vanished hangs in its shutdown, deleting its lease)."""
    paths = Paths(state_dir / "node")
    owned = _owned(state_dir)
    if not owned and not paths.root.exists():
        return []  # no node here: the machine's bridge and chains may be another stack's
    sup = Supervisor(state_dir)
    stopped = [n for n in ("kubelet", "kube-proxy", "coredns", "kube-scheduler",
                           "kube-controller-manager") if sup.stop(n)]
    ctr = state_dir / "bin" / "ctr"
    if sup.alive("containerd") and ctr.exists():
        node_containerd.kill_containers(ctr, paths.socket)
    if sup.stop("containerd"):
        stopped.append("containerd")
    if owned:
        node_cleanup.kill_pods_cgroups()  # containers whose containerd died first (a crashed run)
    node_containerd.kill_strays(paths.root)
    node_cleanup.unmount_under(paths.root)
    return stopped


def teardown(state_dir: Path) -> None:
    """Remove the node's chains, bridge, cgroups and state, and restore ip_forward."""
    paths = Paths(state_dir / "node")
    if _owned(state_dir):  # what the node put on the machine itself
        node_network.remove(paths)
        node_cleanup.remove_cgroups()
        OWNER_FILE.unlink()
    if paths.root.exists():
        run(["rm", "-rf", "--one-file-system", str(paths.root)], "remove node state")
