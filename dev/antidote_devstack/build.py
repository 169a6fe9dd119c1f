"""Builds the stack's binaries and jars from pinned sources, cached outside the clone.

Each artefact's cache key hashes everything that decides its bytes (go.mod, go.sum, the
Go version, build flags; or the pom), so a fresh machine builds the same thing and a warm
one builds nothing.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .errors import StackError
from .steps import _digest, _go_env, _require, _run_logged
from .paths import HACK, cache_dir
from .progress import say, step

KUBE_VERSION = "v1.36.3"
HELM_VERSION = "v3.20.2"
CONTAINERD_VERSION = "v2.2.9"  # the require in hack/containerd/go.mod
KUBE_TAGS = "selinux,notest,grpcnotrace"


def _kube_ldflags() -> tuple[str, ...]:
    # Module builds report v0.0.0-master unless told; kubectl and Helm read /version.
    major, minor = KUBE_VERSION.lstrip("v").split(".")[:2]
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={KUBE_VERSION}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    return tuple(flags)


@dataclass(frozen=True)
class GoBinary:
    name: str
    module: str  # folder under hack/ holding go.mod and go.sum
    package: str
    ldflags: tuple[str, ...] = ("-s", "-w")
    tags: str = ""


def _containerd_ldflags() -> tuple[str, ...]:
    return ("-s", "-w", f"-X github.com/containerd/containerd/v2/version.Version={CONTAINERD_VERSION}")


GO_BINARIES = {
    b.name: b
    for b in (
        GoBinary("kube-apiserver", "k8s", "k8s.io/kubernetes/cmd/kube-apiserver",
                 _kube_ldflags(), KUBE_TAGS),
        GoBinary("kube-controller-manager", "k8s", "k8s.io/kubernetes/cmd/kube-controller-manager",
                 _kube_ldflags(), KUBE_TAGS),
        GoBinary("kube-scheduler", "k8s", "k8s.io/kubernetes/cmd/kube-scheduler",
                 _kube_ldflags(), KUBE_TAGS),
        GoBinary("kubelet", "k8s", "k8s.io/kubernetes/cmd/kubelet", _kube_ldflags(), KUBE_TAGS),
        GoBinary("kube-proxy", "k8s", "k8s.io/kubernetes/cmd/kube-proxy", _kube_ldflags(), KUBE_TAGS),
        GoBinary("containerd", "containerd", "github.com/containerd/containerd/v2/cmd/containerd",
                 _containerd_ldflags()),
        GoBinary("containerd-shim-runc-v2", "containerd",
                 "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
                 _containerd_ldflags()),
        GoBinary("ctr", "containerd", "github.com/containerd/containerd/v2/cmd/ctr",
                 _containerd_ldflags()),
        GoBinary("coredns", "coredns", "antidote.dev/hack/coredns"),
        GoBinary("etcd", "etcd", "antidote.dev/hack/etcd"),
        GoBinary("kubeadm", "kubeadm", "k8s.io/kubernetes/cmd/kubeadm", _kube_ldflags(), KUBE_TAGS),
        GoBinary("kind", "kind", "sigs.k8s.io/kind"),
        GoBinary("coredns-kind", "kind/coredns", "antidote.dev/hack/kind/coredns"),
        GoBinary("helm", "helm", "helm.sh/helm/v3/cmd/helm",
                 ("-s", "-w", f"-X helm.sh/helm/v3/internal/version.version={HELM_VERSION}")),
        # A local OCI registry for the image tests only (`make images` pushes to it): built on demand.
        GoBinary("registry", "registry", "github.com/distribution/distribution/v3/cmd/registry"),
        # SeaweedFS (Apache-2.0): the local S3-compatible server of `dev up --s3`.
        GoBinary("weed", "seaweedfs", "github.com/seaweedfs/seaweedfs/weed"),
    )
}

# name -> folder under hack/ with pom.xml. "s3" (hadoop-aws and the AWS SDK bundle, ~650
# MB) is fetched only for a stack or test that uses S3 (S3_ARTEFACTS); the image always has it.
# "avro" (spark-avro) only for the steady-state benchmark's plain-Spark Avro baseline: no
# stack and no image has it.
JAR_SETS = {"kafka": "kafka", "spark": "spark", "s3": "s3", "avro": "spark-avro"}
DEFAULT_JAR_SETS = ("kafka", "spark")
# What `--s3` adds: the server's binary and the S3A jars for local Spark.
S3_BINARIES = ("weed",)
S3_JAR_SETS = ("s3",)

# What the stack needs to run; kube-controller-manager and kube-scheduler are opt-in.
DEFAULT_BINARIES = ("etcd", "kube-apiserver", "helm")
# What the node adds (`--node`): built only when asked for, so a stack without a node (and
# `make test` before its tests use one) never pays for them.
NODE_BINARIES = ("kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy",
                 "containerd", "containerd-shim-runc-v2", "ctr", "coredns")

# The node's Debian packages: what must exist -> the package that provides it.
NODE_PACKAGES = {
    "/usr/sbin/runc": "runc",
    "/usr/lib/cni/bridge": "containernetworking-plugins",
    "/usr/sbin/iptables": "iptables",
    "/usr/sbin/conntrack": "conntrack",
    "/usr/bin/umoci": "umoci",  # packs the sandbox (pause) image
    "/usr/bin/gcc": "gcc",  # compiles pause.c, statically (libc6-dev)
    "/usr/lib/x86_64-linux-gnu/libc.a": "libc6-dev",
    "/bin/busybox": "busybox-static",  # the test image (nslookup, nc in a pod)
    "/usr/bin/mmdebstrap": "mmdebstrap",  # the Debian base image ...
    "/usr/bin/buildah": "buildah",  # ... committed (and later built on) with buildah
}


def go_binary_path(name: str) -> Path:
    spec = GO_BINARIES[name]
    go = _require("go", f"build {name}", "install Go >= 1.26")
    go_version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True,
                                check=True).stdout.strip()
    mod = HACK / spec.module
    key = _digest((mod / "go.mod").read_bytes(), (mod / "go.sum").read_bytes(),
                  go_version.encode(), spec.package.encode(), " ".join(spec.ldflags).encode(),
                  spec.tags.encode())
    return cache_dir() / "bin" / f"{name}-{key}"


def build_go(name: str) -> Path:
    """Return the cached binary, building it first when the cache has none."""
    target = go_binary_path(name)
    if target.exists():
        return target
    spec = GO_BINARIES[name]
    target.parent.mkdir(parents=True, exist_ok=True)
    log = cache_dir() / "logs" / f"build-{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = ["go", "build", "-trimpath", "-ldflags", " ".join(spec.ldflags), "-o"]
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / name
        cmd.append(str(out))
        if spec.tags:
            cmd += ["-tags", spec.tags]
        cmd.append(spec.package)
        with step(f"building {name} from Go modules (cold: minutes; log {log})"):
            _run_logged(cmd, HACK / spec.module, _go_env(), log, f"build {name}")
        os.replace(out, target)
    return target


def jar_dir_path(name: str) -> Path:
    pom = HACK / JAR_SETS[name] / "pom.xml"
    return cache_dir() / "jars" / f"{name}-{_digest(pom.read_bytes())}"


def checkout_spark_jars() -> str:
    """The connector jars this cache holds for a checkout's Spark (comma-separated), for
    ANTIDOTE_SPARK_JARS of consumers the dev runner starts; "" without hack/ (an installed
    package: its jars are in Spark's own jars/) or before `antidote dev build`. An installed
    consumer never calls this: looking the pom up there made the image fail at start with
    FileNotFoundError for site-packages' ../hack/spark/pom.xml."""
    if not (HACK / JAR_SETS["spark"] / "pom.xml").exists():
        return ""
    found = jar_dir_path("spark")
    return ",".join(str(p) for p in sorted(found.glob("*.jar"))) if found.exists() else ""


def build_jars(name: str) -> Path:
    """Resolve a pom's runtime jars from Maven Central into one cached folder."""
    target = jar_dir_path(name)
    if target.exists():
        return target
    mvn = _require("mvn", f"fetch {name} jars", "install Maven and a JDK 17")
    _require("java", f"fetch {name} jars", "install a JDK 17")
    target.parent.mkdir(parents=True, exist_ok=True)
    log = cache_dir() / "logs" / f"maven-{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / "jars"
        cmd = [mvn, "-B", "-q", "-f", str(HACK / JAR_SETS[name] / "pom.xml"),
               "dependency:copy-dependencies", "-DincludeScope=runtime",
               f"-DoutputDirectory={out}"]
        with step(f"fetching {name} jars from Maven Central (log {log})"):
            _run_logged(cmd, HACK / JAR_SETS[name], dict(os.environ), log, f"fetch {name} jars")
        os.replace(out, target)
    return target


def ensure_node_packages(packages: dict[str, str] | None = None) -> None:
    """Install the node's Debian packages (or `packages`: path -> package) when missing (as
    root); else say which are needed."""
    wanted = NODE_PACKAGES if packages is None else packages
    missing = sorted({pkg for path, pkg in wanted.items() if not Path(path).exists()})
    if not missing:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise StackError("node packages", "the node needs root and the Debian packages "
                         f"{', '.join(missing)}: sudo apt-get install {' '.join(missing)}")
    log = cache_dir() / "logs" / "apt-node.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    with step(f"installing Debian packages for the node: {' '.join(missing)}"):
        _run_logged(["apt-get", "update", "-qq"], HACK, env, log, "node packages")
        _run_logged(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
                    HACK, env, log, "node packages")


def _node_packages() -> dict[str, Path]:
    ensure_node_packages()
    return {}


# (name, how to make it): a path, or several by name (the node's images).
Artefact = tuple[str, Callable[[], Path | dict[str, Path]]]


def build_all(binaries: tuple[str, ...] = DEFAULT_BINARIES, node: bool = False,
              project: bool = False, s3: bool = False) -> dict[str, Path]:
    """Everything `dev up` and the tests need; returns name -> path. `node` adds the node's
    binaries, its Debian packages and its images; `project` the project's images (root);
    `s3` the S3 server and the S3A jars.

    Two lanes run at once: the Go builds, which keep both cores busy compiling, and the
    fetches and image builds (Maven, apt, mmdebstrap, pip in buildah), which mostly wait on
    the network and the disk. Cold, each lane takes about as long as the other, so the
    build takes about as long as the longer one instead of their sum. A lane stops before
    its next artefact once the other has failed, and the failure is raised."""
    if node:
        binaries = tuple(dict.fromkeys(binaries + NODE_BINARIES))
    jar_sets: tuple[str, ...] = DEFAULT_JAR_SETS
    if s3:
        binaries = tuple(dict.fromkeys(binaries + S3_BINARIES))
        jar_sets += S3_JAR_SETS
    failed = threading.Event()

    def lane(work: list[Artefact]) -> dict[str, Path]:
        done: dict[str, Path] = {}
        for name, make in work:
            if failed.is_set():
                break
            try:
                made = make()
            except BaseException:
                failed.set()
                raise
            done.update(made if isinstance(made, dict) else {name: made})
        return done

    go: list[Artefact] = [(name, functools.partial(build_go, name)) for name in binaries]
    fetch: list[Artefact] = [
        (f"{name}-jars", functools.partial(build_jars, name)) for name in jar_sets]
    if node:
        from . import images  # noqa: PLC0415 - only the node needs it

        fetch += [("node packages", _node_packages), ("node images", images.build_all)]
    if project:
        from . import project_images  # noqa: PLC0415 - root, buildah

        fetch.append(("project images", project_images.build_all))
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="build") as pool:
        lanes = [pool.submit(lane, go), pool.submit(lane, fetch)]
    paths = {}
    for done in lanes:  # the Go lane's failure first, if both failed
        paths.update(done.result())
    say("build: all artefacts ready in " + str(cache_dir()))
    return paths
