"""etcd + kube-apiserver on loopback, and an admin kubeconfig."""

from __future__ import annotations

import base64
import ssl
import urllib.request
from pathlib import Path

import yaml

from .certs import Pki
from .procs import Supervisor

SERVICE_CIDR = "10.0.0.0/24"


def etcd_command(binary: Path, data_dir: Path, client_port: int, peer_port: int) -> list[str]:
    client = f"http://127.0.0.1:{client_port}"
    peer = f"http://127.0.0.1:{peer_port}"
    return [str(binary), "--name=dev", f"--data-dir={data_dir}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=dev={peer}", "--initial-cluster-state=new",
            # A throwaway dev store: durability is not worth an fsync per write.
            "--unsafe-no-fsync", "--log-level=warn"]


def apiserver_command(binary: Path, pki: Pki, etcd_port: int, port: int,
                      host: str = "127.0.0.1", node: bool = False) -> list[str]:
    """`host`: the one address it binds and advertises (the Service `kubernetes` points
    there): loopback, or with a node the bridge's gateway, which the host and pods reach."""
    if node:
        # Kubelets are authorized as nodes; the controller-manager mints the pods'
        # service accounts, so the ServiceAccount admission plugin can stay on.
        access = ["--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
                  f"--kubelet-client-certificate={pki.admin_cert}",
                  f"--kubelet-client-key={pki.admin_key}",
                  # The node's name is no host name: logs and exec go to its InternalIP.
                  "--kubelet-preferred-address-types=InternalIP"]
    else:
        # No controller-manager mints tokens for pods here (as in envtest).
        access = ["--authorization-mode=RBAC", "--disable-admission-plugins=ServiceAccount"]
    return [str(binary),
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            f"--bind-address={host}", f"--advertise-address={host}", f"--secure-port={port}",
            f"--tls-cert-file={pki.server_cert}", f"--tls-private-key-file={pki.server_key}",
            f"--client-ca-file={pki.ca_cert}",
            *access,
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            "--enable-priority-and-fairness=false",
            "--v=0"]


def write_kubeconfig(path: Path, pki: Pki, port: int, cert: Path | None = None,
                     key: Path | None = None, host: str = "127.0.0.1") -> None:
    """A kubeconfig for the admin (system:masters), or for the user of `cert` and `key`."""
    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    config = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": "antidote-dev", "cluster": {
            "server": f"https://{host}:{port}", "certificate-authority-data": b64(pki.ca_cert)}}],
        "users": [{"name": "antidote-admin", "user": {
            "client-certificate-data": b64(cert or pki.admin_cert),
            "client-key-data": b64(key or pki.admin_key)}}],
        "contexts": [{"name": "antidote-dev", "context": {
            "cluster": "antidote-dev", "user": "antidote-admin", "namespace": "default"}}],
        "current-context": "antidote-dev",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


def _get(url: str, pki: Pki | None = None) -> tuple[int, bytes]:
    ctx = None
    if pki is not None:
        ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
        ctx.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
    with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:
        return resp.status, resp.read()


def etcd_healthy(port: int) -> bool:
    status, body = _get(f"http://127.0.0.1:{port}/health")
    return status == 200 and b'"true"' in body


def apiserver_ready(port: int, pki: Pki, host: str = "127.0.0.1") -> bool:
    status, body = _get(f"https://{host}:{port}/readyz", pki)
    return status == 200 and body.strip() == b"ok"


def start_etcd(sup: Supervisor, binary: Path, data_dir: Path, port: int, peer_port: int) -> None:
    sup.start("etcd", etcd_command(binary, data_dir, port, peer_port))


def start_apiserver(sup: Supervisor, binary: Path, pki: Pki, etcd_port: int, port: int,
                    host: str = "127.0.0.1", node: bool = False) -> None:
    sup.start("kube-apiserver", apiserver_command(binary, pki, etcd_port, port, host, node))
