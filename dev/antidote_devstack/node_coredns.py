"""CoreDNS for the node: a host process on the bridge's gateway, port 53, serving
cluster.local (Services, and pods' `a-b-c-d.ns.pod` names) from the API server under a user
of its own with list/watch only. No `forward`: no name leaves the machine."""

from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path

from .errors import StackError
from .node_layout import CLUSTER_DOMAIN, GATEWAY, Paths
from .procs import Supervisor, free_port
from .progress import say

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


def grant(kubectl: str, admin_kubeconfig: Path) -> None:
    """The ClusterRole and binding of CoreDNS's user."""
    proc = subprocess.run([kubectl, "--kubeconfig", str(admin_kubeconfig), "apply", "-f", "-"],
                          input=COREDNS_RBAC, capture_output=True, text=True)
    if proc.returncode != 0:
        raise StackError("start node", f"kubectl apply: {proc.stderr.strip()}")


def start(sup: Supervisor, paths: Paths, artefacts: dict[str, Path], kubeconfig: Path,
          env: dict[str, str]) -> int:
    """Start CoreDNS; returns the port of its `ready` endpoint (see ready())."""
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
        kubeconfig {kubeconfig} antidote-dev
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 5
    loadbalance
}}
""")
    sup.start("coredns", [str(artefacts["coredns"]), "-conf", str(corefile)], env=env)
    return ready_port


def ready(ready_port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{ready_port}/ready", timeout=2) as resp:
        return resp.status == 200
