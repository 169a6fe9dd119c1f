"""A kind cluster made by hack/kind-up.sh with podman as kind's provider and the node image
built here (`antidote dev build --kind`; docs/kind.md), for test_kind.py; a Kafka on the
host bound to the kind network's gateway, which kind's pods reach; and `kind delete cluster`
with the check that nothing of it is left on the machine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from antidote_devstack import build, kafka, kind_cleanup
from antidote_devstack.paths import cache_dir
from antidote_devstack.procs import Supervisor, free_port

from .node_cluster import ROOT, _run

CLUSTER = "antidote-it"
NETWORK = kind_cleanup.NETWORK  # kind's podman network (KIND_EXPERIMENTAL_PODMAN_NETWORK's default)


def podman(*args: str) -> str:
    return _run(dict(os.environ), "podman", *args)


def leftovers(env: dict[str, str]) -> list[str]:
    """What a kind cluster would leave on the machine: node containers, their volumes,
    kind's network, podman's CNI chains and IPAM state, the node's containerd and kubelet
    as the host sees them, their mounts (what the stack's node checks for too:
    node_cleanup.leftovers); [] after kind_up's tear-down."""
    found = [f"container {n}" for n in podman("ps", "-a", "--format", "{{.Names}}").split()]
    found += [f"network {n}" for n in podman("network", "ls", "--format", "{{.Name}}").split()
              if n == NETWORK]
    found += [f"volume {n}" for n in podman("volume", "ls", "--format", "{{.Name}}").split()]
    found += [f"cluster {n}" for n in _run(env, "kind", "get", "clusters").split()]
    for save in ("iptables-save", "ip6tables-save"):
        dump = subprocess.run([save], capture_output=True, text=True).stdout
        found += [f"{save}: {line}" for line in dump.splitlines() if "CNI" in line]
    if (kind_cleanup.IPAM_STATE / NETWORK).exists():
        found.append(str(kind_cleanup.IPAM_STATE / NETWORK))
    for name in ("containerd", "kubelet", "kube-proxy", "coredns"):
        found += subprocess.run(["pgrep", "-a", name], capture_output=True, text=True).stdout.splitlines()
    found += [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if "containerd" in line or "kubelet" in line]
    return found


def gateway(network: str = NETWORK) -> str:
    """The host's address on kind's network (its bridge's gateway)."""
    (info,) = json.loads(podman("network", "inspect", network))
    for plugin in info.get("plugins", []):  # CNI backend
        for ranges in plugin.get("ipam", {}).get("ranges", []):
            for r in ranges:
                if "." in r.get("gateway", ""):
                    return r["gateway"]
    for subnet in info.get("subnets", []):  # netavark backend
        if "." in subnet.get("gateway", ""):
            return subnet["gateway"]
    raise AssertionError(f"no IPv4 gateway on podman network {network}: {info}")


@contextmanager
def kind_up(env: dict[str, str]) -> Iterator[Path]:
    """hack/kind-up.sh, unchanged but for the environment `antidote dev build --kind` wrote;
    yields the cluster's kubeconfig. On the way out `kind delete cluster` and kind's network
    (kind leaves it for the next cluster), then nothing may be left."""
    before = leftovers(env)
    assert not before, f"the machine is not clean of kind before the test: {before}"
    kubeconfig = cache_dir() / "kind" / f"{CLUSTER}.kubeconfig"
    env = {**env, "KIND_CLUSTER": CLUSTER, "KUBECONFIG": str(kubeconfig)}
    try:
        started = time.monotonic()
        out = subprocess.run(["bash", str(ROOT / "hack/kind-up.sh")], env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=1200)
        print(f"kind-up.sh: exit {out.returncode} in {time.monotonic() - started:.0f}s")
        assert out.returncode == 0, f"kind-up.sh: exit {out.returncode}\n{out.stdout[-4000:]}\n{out.stderr[-6000:]}"
        yield kubeconfig
    finally:
        subprocess.run(["kind", "delete", "cluster", "--name", CLUSTER], env=env,
                       capture_output=True, timeout=300)
        kind_cleanup.remove_podman_cni_state(NETWORK)
        kubeconfig.unlink(missing_ok=True)
    left = leftovers(env)
    assert not left, f"kind delete cluster left: {left}"


@contextmanager
def kafka_on(host: str) -> Iterator[str]:
    """A one-broker Kafka (the stack's, hack/kafka) bound to `host`; yields its bootstrap."""
    state_dir = cache_dir() / "kind" / "kafka"
    shutil.rmtree(state_dir, ignore_errors=True)
    (state_dir / "logs").mkdir(parents=True)  # the Supervisor's logs, as stack.up makes it
    sup = Supervisor(state_dir)
    port, ctl = free_port(), free_port()
    props, java = kafka.prepare(state_dir, build.build_jars("kafka"), port, ctl, None, host)
    try:
        fmt = kafka.format_storage(java, props, sup.log("kafka-format"))
        assert fmt.wait(timeout=120) == 0, sup.tail("kafka-format")
        kafka.start(sup, java, props)
        bootstrap = f"{host}:{port}"
        sup.wait_for("kafka", "start kafka", lambda: kafka.ready(bootstrap), 120)
        yield bootstrap
    finally:
        sup.stop_all()
        shutil.rmtree(state_dir, ignore_errors=True)
