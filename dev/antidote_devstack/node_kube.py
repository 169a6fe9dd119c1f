"""The node's Kubernetes components, each with a client certificate of its own: the
controller-manager and the scheduler, the kubelet (cgroupfs driver, cgroup v1 allowed, no
eviction or image GC on a shared disk) and kube-proxy (iptables mode, no sysctl changes).
docs/node.md, "Components and their identities"."""

from __future__ import annotations

from pathlib import Path

import yaml

from .certs import Pki, client_cert
from .controlplane import SERVICE_CIDR, write_kubeconfig
from .node_layout import CLUSTER_DOMAIN, GATEWAY, NODE_NAME, POD_CIDR, Paths
from .procs import Supervisor, free_port
from .progress import say

# name -> (common name, organisation) of each component's client certificate.
IDENTITIES = {
    "controller-manager": ("system:kube-controller-manager", None),
    "scheduler": ("system:kube-scheduler", None),
    "kubelet": (f"system:node:{NODE_NAME}", "system:nodes"),
    "kube-proxy": ("system:kube-proxy", None),
    "coredns": ("antidote:coredns", None),
}


def kubeconfigs(state_dir: Path, pki: Pki, api_port: int, host: str) -> dict[str, Path]:
    """A kubeconfig per component (IDENTITIES), in the node's state."""
    out = {}
    for name, (cn, org) in IDENTITIES.items():
        cert, key = client_cert(pki, name, cn, org)
        path = state_dir / "node" / f"{name}.kubeconfig"
        write_kubeconfig(path, pki, api_port, cert, key, host)
        out[name] = path
    return out


def _serving_authn(pki: Pki) -> list[str]:
    # The stack's API server has no front proxy: without these the controllers look up its
    # request-header CA every few seconds and log an error each time it is missing.
    return ["--authentication-skip-lookup=true", f"--client-ca-file={pki.ca_cert}"]


def start_controllers(sup: Supervisor, artefacts: dict[str, Path], pki: Pki, kc: dict[str, Path],
                      env: dict[str, str]) -> None:
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


def start_kubelet(sup: Supervisor, paths: Paths, artefacts: dict[str, Path], pki: Pki,
                  kubeconfig: Path, env: dict[str, str]) -> None:
    say(f"starting kubelet (node {NODE_NAME}, {GATEWAY})")
    paths.kubelet.mkdir(parents=True, exist_ok=True)
    resolv = paths.root / "resolv.conf"
    resolv.write_text("")  # pods get the cluster's DNS only, no upstream name server
    kubelet_config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": GATEWAY, "port": free_port(), "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": free_port(),
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
        str(artefacts["kubelet"]), f"--config={kconf}", f"--kubeconfig={kubeconfig}",
        f"--root-dir={paths.kubelet}", f"--hostname-override={NODE_NAME}",
        f"--node-ip={GATEWAY}", "--v=1"], env=env)


def start_proxy(sup: Supervisor, paths: Paths, artefacts: dict[str, Path], kubeconfig: Path,
                env: dict[str, str]) -> None:
    say("starting kube-proxy (iptables mode)")
    proxy_config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "mode": "iptables", "clientConnection": {"kubeconfig": str(kubeconfig)},
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
