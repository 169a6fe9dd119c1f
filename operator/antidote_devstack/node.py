"""A one-node cluster beside the stack's API server (`antidote dev up --node`).

containerd (CRI) runs the pods with runc on a CNI bridge; a kubelet registered to the stack's
API server, the controller-manager and the scheduler, kube-proxy (iptables mode) and CoreDNS
(a host process serving cluster.local) complete it. Everything lives in the stack directory's
`node/`; `stop()` removes what the node put on the machine (containers, shims, mounts,
network namespaces, iptables chains, the bridge) because none of it ends with its processes.

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
import re
import shlex
import ssl
import subprocess
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from . import images
from .certs import Pki, client_cert
from .controlplane import SERVICE_CIDR, write_kubeconfig
from .errors import StackError
from .procs import Supervisor, free_port
from .progress import say

NODE_NAME = "antidote-node"
BRIDGE = "antidote0"
POD_CIDR = "10.88.0.0/16"
GATEWAY = "10.88.0.1"  # the bridge's address: pods reach the host's API server, Kafka, DNS here
CLUSTER_DOMAIN = "cluster.local"
GUARD_CHAIN = "ANTIDOTE-NODE"
# One node per machine: the bridge, iptables and port 53 on the gateway are the machine's.
OWNER_FILE = Path("/run/antidote-node.owner")

PROCESSES = ("containerd", "kube-controller-manager", "kube-scheduler", "kubelet",
             "kube-proxy", "coredns")
# Chains the node's components create in iptables' tables (kube-proxy, the kubelet, the
# CNI plugins, our guard); stop() removes every one of them.
CHAIN_PREFIXES = ("KUBE-", "CNI-", GUARD_CHAIN)


@dataclass(frozen=True)
class Paths:
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


def _run(cmd: list[str], step: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise StackError(step, f"`{' '.join(cmd)}` exit {proc.returncode}: "
                         f"{(proc.stderr or proc.stdout).strip()}")
    return proc


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


# --- network -------------------------------------------------------------------------

def setup_network(state_dir: Path) -> None:
    """The bridge (so the API server and Kafka can bind its gateway before any pod), the
    CNI config, and the guard chain; IP forwarding on, for Service traffic between pods."""
    OWNER_FILE.write_text(str(state_dir))
    paths = Paths(state_dir / "node")
    if _run(["ip", "link", "show", BRIDGE], "create bridge", check=False).returncode != 0:
        _run(["ip", "link", "add", BRIDGE, "type", "bridge"], "create bridge")
    _run(["ip", "addr", "replace", f"{GATEWAY}/16", "dev", BRIDGE], "create bridge")
    _run(["ip", "link", "set", BRIDGE, "up"], "create bridge")

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

    forward = Path("/proc/sys/net/ipv4/ip_forward")
    saved = paths.root / "ip_forward.saved"
    if not saved.exists():
        saved.write_text(forward.read_text())
    forward.write_text("1\n")
    # Forwarded packets only from the bridge to the bridge (a pod to a Service's pod). If
    # the machine forwarded nothing before, it still forwards nothing else.
    ipt = ["iptables", "-w"]
    if _run([*ipt, "-N", GUARD_CHAIN], "guard chain", check=False).returncode == 0:
        rules = [["-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT"]]
        if saved.read_text().strip() == "0":
            rules.append(["-j", "DROP"])
        else:
            rules += [["-i", BRIDGE, "-j", "DROP"], ["-o", BRIDGE, "-j", "DROP"]]
        for rule in rules:
            _run([*ipt, "-A", GUARD_CHAIN, *rule], "guard chain")
        _run([*ipt, "-I", "FORWARD", "1", "-j", GUARD_CHAIN], "guard chain")


# --- components ----------------------------------------------------------------------

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


def _kubeconfig(state_dir: Path, pki: Pki, api_port: int, host: str, name: str, cn: str,
                org: str | None = None) -> Path:
    cert, key = client_cert(pki, name, cn, org)
    path = state_dir / "node" / f"{name}.kubeconfig"
    write_kubeconfig(path, pki, api_port, cert, key, host)
    return path


COREDNS_RBAC = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "antidote:coredns"}
rules:
- apiGroups: [""]
  resources: [services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "antidote:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "antidote:coredns"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "antidote:coredns"}
"""


@dataclass(frozen=True)
class NodeInfo:
    name: str
    dns: str
    dns_ready_port: int


def start(sup: Supervisor, state_dir: Path, artefacts: dict[str, Path], pki: Pki,
          api_port: int, host: str, admin_kubeconfig: Path, kubectl: str) -> NodeInfo:
    """Start containerd, the controllers, the kubelet, kube-proxy and CoreDNS; return once
    the node is Ready and CoreDNS answers."""
    # Long on purpose: the start-up order of the node's processes, each waiting on the one
    # before it (containerd, controllers, kubelet, kube-proxy, CoreDNS), read top to bottom.
    paths = Paths(state_dir / "node")
    pause_name, pause_archive = images.pause_image()
    bin_dir = state_dir / "bin"
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")

    # containerd, and the sandbox image in its k8s.io namespace.
    paths.containerd.mkdir(parents=True, exist_ok=True)
    config = paths.containerd / "config.toml"
    config.write_text(CONTAINERD_CONFIG.format(root=paths.containerd, socket=paths.socket,
                                               cni_conf=paths.cni_conf, sandbox=pause_name))
    say("starting containerd")
    sup.start("containerd", [str(artefacts["containerd"]), "--config", str(config)], env=env)
    sup.wait_for("containerd", "start containerd", lambda: _ctr_ok(artefacts["ctr"], paths.socket), 60)
    for name, archive in ((pause_name, pause_archive), images.busybox_image()):
        images.load(artefacts["ctr"], paths.socket, name, archive, sup.log("images"))

    _apply(kubectl, admin_kubeconfig, COREDNS_RBAC)

    kc = {
        "controller-manager": _kubeconfig(state_dir, pki, api_port, host, "controller-manager",
                                          "system:kube-controller-manager"),
        "scheduler": _kubeconfig(state_dir, pki, api_port, host, "scheduler", "system:kube-scheduler"),
        "kubelet": _kubeconfig(state_dir, pki, api_port, host, "kubelet",
                               f"system:node:{NODE_NAME}", "system:nodes"),
        "kube-proxy": _kubeconfig(state_dir, pki, api_port, host, "kube-proxy", "system:kube-proxy"),
        "coredns": _kubeconfig(state_dir, pki, api_port, host, "coredns", "antidote:coredns"),
    }

    say("starting kube-controller-manager and kube-scheduler")
    cm = kc["controller-manager"]
    sup.start("kube-controller-manager", [
        str(artefacts["kube-controller-manager"]), f"--kubeconfig={cm}",
        f"--authentication-kubeconfig={cm}", f"--authorization-kubeconfig={cm}",
        *_serving_authn(pki), "--bind-address=127.0.0.1", f"--secure-port={free_port()}", "--leader-elect=false",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki.sa_key}", f"--root-ca-file={pki.ca_cert}",
        f"--cluster-signing-cert-file={pki.ca_cert}", f"--cluster-signing-key-file={pki.ca_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}", f"--cluster-cidr={POD_CIDR}",
        "--v=1"], env=env)
    sc = kc["scheduler"]
    sup.start("kube-scheduler", [
        str(artefacts["kube-scheduler"]), f"--kubeconfig={sc}",
        f"--authentication-kubeconfig={sc}", f"--authorization-kubeconfig={sc}",
        *_serving_authn(pki), "--bind-address=127.0.0.1", f"--secure-port={free_port()}", "--leader-elect=false",
        "--v=1"], env=env)

    say(f"starting kubelet (node {NODE_NAME}, {GATEWAY})")
    paths.kubelet.mkdir(parents=True, exist_ok=True)
    resolv = paths.root / "resolv.conf"
    resolv.write_text("")  # pods get the cluster's DNS only, no upstream name server
    healthz_port = free_port()
    kubelet_config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": GATEWAY, "port": free_port(), "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": healthz_port,
        "containerRuntimeEndpoint": f"unix://{paths.socket}",
        # cgroup v1 controllers here (a cgroup2 mount beside them): cgroupfs, and no refusal.
        "cgroupDriver": "cgroupfs", "failCgroupV1": False,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(pki.ca_cert)}},
        "authorization": {"mode": "Webhook"},
        "clusterDomain": CLUSTER_DOMAIN, "clusterDNS": [GATEWAY], "resolvConf": str(resolv),
        "failSwapOn": False,
        # A shared dev machine's disk is often fuller than a node's: no eviction or image GC
        # (they would taint the node or delete the locally built images).
        "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "maxPods": 60,
    }
    kconf = paths.root / "kubelet-config.yaml"
    kconf.write_text(yaml.safe_dump(kubelet_config))
    sup.start("kubelet", [
        str(artefacts["kubelet"]), f"--config={kconf}", f"--kubeconfig={kc['kubelet']}",
        f"--root-dir={paths.kubelet}", f"--hostname-override={NODE_NAME}",
        f"--node-ip={GATEWAY}", "--v=1"], env=env)

    say("starting kube-proxy (iptables mode)")
    proxy_config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "mode": "iptables", "clientConnection": {"kubeconfig": str(kc["kube-proxy"])},
        "hostnameOverride": NODE_NAME, "clusterCIDR": POD_CIDR, "bindAddress": GATEWAY,
        "healthzBindAddress": f"127.0.0.1:{free_port()}",
        "metricsBindAddress": f"127.0.0.1:{free_port()}",
        "nodePortAddresses": [f"{GATEWAY}/32"],
        # No sysctl the machine did not ask for: conntrack as it is, no route_localnet, and no
        # lowering of oom_score_adj (not allowed here).
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                      "tcpCloseWaitTimeout": "0s"},
        "iptables": {"localhostNodePorts": False, "masqueradeAll": False},
        "oomScoreAdj": 0,
    }
    pconf = paths.root / "kube-proxy-config.yaml"
    pconf.write_text(yaml.safe_dump(proxy_config))
    sup.start("kube-proxy", [str(artefacts["kube-proxy"]), f"--config={pconf}", "--v=1"], env=env)

    say(f"starting CoreDNS on {GATEWAY}:53 ({CLUSTER_DOMAIN})")
    ready_port, health_port = free_port(), free_port()
    corefile = paths.root / "Corefile"
    corefile.write_text(f"""\
.:53 {{
    bind {GATEWAY}
    errors
    health 127.0.0.1:{health_port}
    ready 127.0.0.1:{ready_port}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kc['coredns']} antidote-dev
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 5
    loadbalance
}}
""")
    sup.start("coredns", [str(artefacts["coredns"]), "-conf", str(corefile)], env=env)

    sup.wait_for("kubelet", "start kubelet", lambda: node_ready(host, api_port, pki), 180)
    sup.wait_for("coredns", "start coredns", lambda: _http_ok(f"http://127.0.0.1:{ready_port}/ready"), 60)
    for name in ("containerd", "kube-controller-manager", "kube-scheduler", "kube-proxy"):
        if not sup.alive(name):
            raise StackError(f"start {name}", f"{name} exited; last lines of {sup.log(name)}:\n"
                             + sup.tail(name))
    return NodeInfo(NODE_NAME, GATEWAY, ready_port)


def _serving_authn(pki: Pki) -> list[str]:
    # The stack's API server has no front proxy: without these the controllers look up its
    # request-header CA every few seconds and log an error each time it is missing.
    return ["--authentication-skip-lookup=true", f"--client-ca-file={pki.ca_cert}"]


def load_image(state_dir: Path, name: str, archive: Path) -> None:
    """Load an OCI archive into the running node's containerd (namespace k8s.io), for pods
    with `imagePullPolicy: Never`."""
    paths = Paths(state_dir / "node")
    images.load(state_dir / "bin" / "ctr", paths.socket, name, archive,
                Supervisor(state_dir).log("images"))


def _apply(kubectl: str, kubeconfig: Path, manifest: str) -> None:
    proc = subprocess.run([kubectl, "--kubeconfig", str(kubeconfig), "apply", "-f", "-"],
                          input=manifest, capture_output=True, text=True)
    if proc.returncode != 0:
        raise StackError("start node", f"kubectl apply: {proc.stderr.strip()}")


def _ctr_ok(ctr: Path, socket: Path) -> bool:
    return subprocess.run([str(ctr), "--address", str(socket), "version"],
                          capture_output=True, timeout=5).returncode == 0


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return resp.status == 200


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
        _kill_containers(ctr, paths.socket)
    if sup.stop("containerd"):
        stopped.append("containerd")
    if owned:
        _kill_pods_cgroups()  # containers whose containerd died first (a crashed run)
    _kill_strays(paths.root)
    _unmount_under(paths.root)
    return stopped


def teardown(state_dir: Path) -> None:
    """Remove the node's chains, bridge, cgroups and state, and restore ip_forward."""
    paths = Paths(state_dir / "node")
    if _owned(state_dir):  # what the node put on the machine itself
        _remove_chains()
        _run(["ip", "link", "delete", BRIDGE], "delete bridge", check=False)
        saved = paths.root / "ip_forward.saved"
        if saved.exists():
            Path("/proc/sys/net/ipv4/ip_forward").write_text(saved.read_text())
        _remove_cgroups()
        OWNER_FILE.unlink()
    if paths.root.exists():
        _run(["rm", "-rf", "--one-file-system", str(paths.root)], "remove node state")


def _kill_containers(ctr: Path, socket: Path) -> None:
    base = [str(ctr), "--address", str(socket), "--namespace", "k8s.io"]
    tasks = _run([*base, "tasks", "list", "--quiet"], "stop containers", check=False).stdout.split()
    for task in tasks:
        _run([*base, "tasks", "kill", "--signal", "SIGKILL", task], "stop containers", check=False)
    for task in tasks:
        _run([*base, "tasks", "delete", "--force", task], "stop containers", check=False)
    containers = _run([*base, "containers", "list", "--quiet"], "stop containers",
                      check=False).stdout.split()
    if containers:
        _run([*base, "containers", "delete", *containers], "stop containers", check=False)


def _kill_strays(root: Path) -> None:
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


def _unmount_under(root: Path) -> None:
    prefix = str(root) + "/"
    for _ in range(3):
        mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        mine = [m for m in mounts if m.startswith(prefix) or m == str(root)]
        if not mine:
            return
        for point in reversed(mine):  # children before parents
            subprocess.run(["umount", "-l", point.replace("\\040", " ")], capture_output=True)


def _remove_chains() -> None:
    """Every KUBE-*, CNI-* chain and our guard, in every table, for IPv4 and IPv6."""
    for save, cmd in (("iptables-save", "iptables"), ("ip6tables-save", "ip6tables")):
        dump = subprocess.run([save], capture_output=True, text=True).stdout
        table = None
        jumps: list[tuple[str, list[str]]] = []
        chains: list[tuple[str, str]] = []
        for line in dump.splitlines():
            if line.startswith("*"):
                table = line[1:]
            elif line.startswith(":") and line[1:].startswith(CHAIN_PREFIXES):
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


def _kill_pods_cgroups() -> None:
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


def _remove_cgroups() -> None:
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
    procs = [line for name in ("containerd", "kubelet", "kube-proxy", "coredns")
             for line in _run(["pgrep", "-a", name], "check", check=False).stdout.splitlines()]
    mounts = [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if "containerd" in line or str(state_dir / "node") in line]
    netns = sorted(os.listdir("/run/netns")) if Path("/run/netns").exists() else []
    rules = "".join(_run([save], "check", check=False).stdout
                    for save in ("iptables-save", "ip6tables-save"))
    chains = [line for line in rules.splitlines() if re.search(r"CNI|KUBE-|" + GUARD_CHAIN, line)]
    bridge = _run(["ip", "-br", "link", "show", BRIDGE], "check", check=False).stdout.split()
    return {"processes": procs, "mounts": mounts, "netns": netns, "iptables": chains,
            "bridge": bridge[:1]}
