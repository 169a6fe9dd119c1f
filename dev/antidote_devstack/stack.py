"""`antidote dev up|down|env|status`: the whole local stack, started once, stopped by pid."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from antidote_api.wire import SPARK_JARS_ENV

from . import build, controlplane, kafka, node as nodes, prometheus as prom, s3 as s3server
from . import schema_registry as registry
from .certs import ensure_pki
from .errors import StackError
from .paths import default_stack_dir, venv_bin
from .procs import Supervisor, free_port, port_open
from .progress import say

PROCESSES = ("etcd", "kube-apiserver", "kafka")
LOOPBACK = "127.0.0.1"


@dataclass
class Stack:
    """What a running stack offers its clients; persisted as state.json in its directory."""

    dir: str
    kubeconfig: str
    apiserver_port: int
    etcd_port: int
    kafka_bootstrap: str
    spark_jars: list[str] = field(default_factory=list)
    bin_dir: str = ""
    kube_version: str = build.KUBE_VERSION
    # The same broker's SASL_PLAINTEXT listener (PLAIN, user kafka.SASL_USER); "" in the
    # state of a stack started before it existed.
    kafka_sasl_bootstrap: str = ""
    # The address the API server and Kafka bind and advertise: loopback, or with a node
    # (`dev up --node`) the node bridge's gateway, which the host and pods alike reach.
    host: str = LOOPBACK
    node: str = ""  # the node's name when the stack has one
    # `dev up --prometheus`: its URL (loopback) and the folder of its file_sd target files.
    prometheus_url: str = ""
    prometheus_targets: str = ""
    # `dev up --s3`: the S3 server's endpoint (on `host`, as Kafka) and the S3A jars that
    # local Spark adds to spark_jars for `s3a://` (the consumer image has them in jars/).
    s3_endpoint: str = ""
    s3_jars: list[str] = field(default_factory=list)
    # `dev up --with schema-registry`: the Confluent-compatible API's root URL (on `host`).
    schema_registry_url: str = ""

    @property
    def server(self) -> str:
        return f"https://{self.host}:{self.apiserver_port}"

    @property
    def processes(self) -> tuple[str, ...]:
        return (PROCESSES + (nodes.PROCESSES if self.node else ())
                + ((prom.NAME,) if self.prometheus_url else ())
                + ((s3server.NAME,) if self.s3_endpoint else ())
                + ((registry.NAME,) if self.schema_registry_url else ()))

    @property
    def s3(self) -> s3server.S3Server | None:
        return s3server.S3Server(self.s3_endpoint) if self.s3_endpoint else None

    def env(self) -> dict[str, str]:
        path = os.pathsep.join([self.bin_dir, str(venv_bin()), os.environ.get("PATH", "")])
        env = {
            "KUBECONFIG": self.kubeconfig,
            "KAFKA_BOOTSTRAP_SERVERS": self.kafka_bootstrap,
            "KAFKA_SASL_BOOTSTRAP_SERVERS": self.kafka_sasl_bootstrap,
            SPARK_JARS_ENV: ",".join(self.spark_jars + self.s3_jars),
            "ANTIDOTE_STACK_DIR": self.dir,
            "PATH": path,
        }
        if self.s3:
            env.update(self.s3.env())
        if self.schema_registry_url:
            env["SCHEMA_REGISTRY_URL"] = self.schema_registry_url
        if self.prometheus_url:
            env["PROMETHEUS_URL"] = self.prometheus_url
            # `antidote operator --dev-runner` writes its scrape targets here (file_sd).
            env["ANTIDOTE_PROMETHEUS_TARGETS"] = self.prometheus_targets
        return env


def _state_file(state_dir: Path) -> Path:
    return state_dir / "state.json"


def load(state_dir: Path | None = None) -> Stack | None:
    state_dir = state_dir or default_stack_dir()
    try:
        return Stack(**json.loads(_state_file(state_dir).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def running(state_dir: Path | None = None) -> Stack | None:
    """The stack in `state_dir` if all its processes are alive and answering."""
    state_dir = state_dir or default_stack_dir()
    stack = load(state_dir)
    sup = Supervisor(state_dir)
    if stack is None or not all(sup.alive(n) for n in stack.processes):
        return None
    port = int(stack.kafka_bootstrap.rsplit(":", 1)[1])
    if not (port_open(stack.apiserver_port, stack.host) and port_open(port, stack.host)):
        return None
    return stack


def _link_tools(bin_dir: Path, artefacts: dict[str, Path]) -> None:
    """Stable names on PATH for the cached, content-addressed binaries."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, path in artefacts.items():
        if name.endswith(("-jars", "-image")):
            continue
        link = bin_dir / name
        link.unlink(missing_ok=True)
        link.symlink_to(path)


def up(state_dir: Path | None = None, binaries: tuple[str, ...] = build.DEFAULT_BINARIES,
       node: bool = False, prometheus: bool = False, s3: bool = False,
       schema_registry: bool = False) -> Stack:
    """Start the stack; `node` adds a one-node cluster that runs pods (node.py),
    `prometheus` a Prometheus that scrapes the operator and the consumers (prometheus.py),
    `s3` an S3-compatible server (s3.py), `schema_registry` a Schema Registry
    (schema_registry.py)."""
    # Long on purpose: the stack's start-up order (certs, etcd, API server, Kafka, node,
    # Prometheus), each step waiting on the one before, read top to bottom.
    state_dir = (state_dir or default_stack_dir()).resolve()
    if node:
        nodes.require_root()
    artefacts = build.build_all(binaries, node=node, s3=s3)
    existing = running(state_dir)
    if existing and (existing.node or not node):
        # Neither needs a restart of anything else.
        if s3 and not existing.s3_endpoint:
            existing = add_s3(state_dir)
        if prometheus and not existing.prometheus_url:
            existing = add_prometheus(state_dir)
        if schema_registry and not existing.schema_registry_url:
            existing = add_schema_registry(state_dir)
        say(f"stack running in {state_dir}")
        return existing
    if existing:
        say(f"stack in {state_dir} runs without a node: restarting it with one")
        down(state_dir)

    started = time.monotonic()
    sup = Supervisor(state_dir)
    stopped = _stop(state_dir)  # leftovers of a crashed run
    if stopped:
        say(f"stopped leftover processes: {', '.join(stopped)}")
    if node:
        nodes.check_machine()
    for sub in ("etcd", "kafka", "logs"):
        shutil.rmtree(state_dir / sub, ignore_errors=True)  # every start is a clean cluster
    state_dir.mkdir(parents=True, exist_ok=True)
    pki = ensure_pki(state_dir / "pki")
    bin_dir = state_dir / "bin"
    _link_tools(bin_dir, artefacts)

    etcd_port, etcd_peer, api_port, kafka_port, ctl_port, sasl_port = (free_port() for _ in range(6))
    host = nodes.GATEWAY if node else LOOPBACK
    node_name = ""
    try:
        if node:
            say(f"creating the node's bridge {nodes.BRIDGE} ({nodes.GATEWAY})")
            nodes.setup_network(state_dir)
        say(f"starting etcd on 127.0.0.1:{etcd_port}")
        controlplane.start_etcd(sup, artefacts["etcd"], state_dir / "etcd", etcd_port, etcd_peer)
        # Format Kafka's storage while etcd and the API server come up (it is a JVM start).
        props, java = kafka.prepare(state_dir, artefacts["kafka-jars"], kafka_port, ctl_port,
                                    sasl_port, host)
        fmt = kafka.format_storage(java, props, sup.log("kafka-format"))
        sup.wait_for("etcd", "start etcd", lambda: controlplane.etcd_healthy(etcd_port), 30)

        say(f"starting kube-apiserver {build.KUBE_VERSION} on {host}:{api_port}")
        controlplane.start_apiserver(sup, artefacts["kube-apiserver"], pki, etcd_port, api_port,
                                     host, node)

        _formatted(sup, fmt)
        say(f"starting kafka broker on {host}:{kafka_port} (SASL_PLAINTEXT on {sasl_port})")
        kafka.start(sup, java, props)

        sup.wait_for("kube-apiserver", "start kube-apiserver",
                     lambda: controlplane.apiserver_ready(api_port, pki, host), 120)
        kubeconfig = state_dir / "kubeconfig"
        controlplane.write_kubeconfig(kubeconfig, pki, api_port, host=host)
        if node:
            node_name = nodes.start(sup, state_dir, artefacts, pki, api_port, host, kubeconfig,
                                    str(venv_bin() / "kubectl")).name
        bootstrap = f"{host}:{kafka_port}"
        for attempt in range(1, 4):
            try:
                sup.wait_for("kafka", "start kafka", lambda: kafka.ready(bootstrap), 120)
                break
            except StackError:
                if attempt == 3 or "Address already in use" not in sup.tail("kafka", 200):
                    raise
            # A port was taken between free_port and the broker's bind, seconds later (a
            # stack starting beside this one: seen in CI, a worker's whole session lost).
            kafka_port, ctl_port, sasl_port = free_port(), free_port(), free_port()
            say(f"a port of the broker was taken meanwhile: starting it again on {host}:{kafka_port}")
            sup.stop("kafka")
            shutil.rmtree(state_dir / "kafka", ignore_errors=True)
            props, java = kafka.prepare(state_dir, artefacts["kafka-jars"], kafka_port, ctl_port,
                                        sasl_port, host)
            _formatted(sup, kafka.format_storage(java, props, sup.log("kafka-format")))
            kafka.start(sup, java, props)
            bootstrap = f"{host}:{kafka_port}"
    except BaseException:
        _stop(state_dir)
        raise

    stack = Stack(dir=str(state_dir), kubeconfig=str(kubeconfig), apiserver_port=api_port,
                  etcd_port=etcd_port, kafka_bootstrap=bootstrap,
                  kafka_sasl_bootstrap=f"{host}:{sasl_port}",
                  spark_jars=sorted(str(p) for p in artefacts["spark-jars"].glob("*.jar")),
                  bin_dir=str(bin_dir), host=host, node=node_name)
    _state_file(state_dir).write_text(json.dumps(asdict(stack), indent=2))
    try:
        if s3:
            stack = add_s3(state_dir)
        if prometheus:
            stack = add_prometheus(state_dir)
        if schema_registry:
            stack = add_schema_registry(state_dir)
    except BaseException:
        _stop(state_dir)
        raise
    say(f"stack up in {time.monotonic() - started:.1f}s: API server {stack.server}, "
        f"Kafka {bootstrap}" + (f", node {node_name} Ready" if node_name else "")
        + (f", Prometheus {stack.prometheus_url}" if stack.prometheus_url else "")
        + (f", S3 {stack.s3_endpoint}" if stack.s3_endpoint else "")
        + (f", Schema Registry {stack.schema_registry_url}" if stack.schema_registry_url else ""))
    return stack


def _formatted(sup: Supervisor, fmt) -> None:
    """Waits for Kafka's storage format (kafka.format_storage); raises when it failed."""
    if fmt.wait(timeout=120) != 0:
        raise StackError("format kafka storage", "StorageTool failed; see "
                         f"{sup.log('kafka-format')}:\n{sup.tail('kafka-format')}")


def add_s3(state_dir: Path) -> Stack:
    """Start the S3 server beside the running stack in `state_dir` (a no-op when it runs),
    building it and fetching the S3A jars first when the cache has none (cold: minutes)."""
    stack = running(state_dir)
    if stack is None:
        raise StackError("start the S3 server", f"no running stack in {state_dir}")
    if stack.s3_endpoint:
        return stack
    artefacts = build.build_all(build.DEFAULT_BINARIES, s3=True)
    say(f"starting the S3 server (SeaweedFS) on {stack.host}")
    server = s3server.start(Supervisor(state_dir), state_dir, artefacts["weed"], stack.host)
    stack.s3_endpoint = server.endpoint
    stack.s3_jars = sorted(str(p) for p in artefacts["s3-jars"].glob("*.jar"))
    _state_file(state_dir).write_text(json.dumps(asdict(stack), indent=2))
    return stack


def add_schema_registry(state_dir: Path) -> Stack:
    """Start the Schema Registry beside the running stack in `state_dir` (a no-op when it
    runs), building it first when the cache has none (cold: about a minute)."""
    stack = running(state_dir)
    if stack is None:
        raise StackError("start the schema registry", f"no running stack in {state_dir}")
    if stack.schema_registry_url:
        return stack
    app = registry.build()
    say(f"starting the schema registry (Apicurio {registry.VERSION}) on {stack.host}")
    stack.schema_registry_url = registry.start(Supervisor(state_dir), app, stack.host)
    _state_file(state_dir).write_text(json.dumps(asdict(stack), indent=2))
    return stack


def add_prometheus(state_dir: Path) -> Stack:
    """Start Prometheus beside the running stack in `state_dir` (a no-op when it runs)."""
    stack = running(state_dir)
    if stack is None:
        raise StackError("start prometheus", f"no running stack in {state_dir}")
    if stack.prometheus_url:
        return stack
    port = free_port()
    say(f"starting prometheus on 127.0.0.1:{port}")
    url, targets = prom.start(Supervisor(state_dir), state_dir, port)
    stack.prometheus_url, stack.prometheus_targets = url, str(targets)
    _state_file(state_dir).write_text(json.dumps(asdict(stack), indent=2))
    return stack


# What `restart` can crash and bring back: etcd is the cluster's state, not a process the
# chaos tests mean to lose.
RESTARTABLE = ("kube-apiserver", "kafka")


def restart(state_dir: Path, name: str, down_for: float = 0.0, timeout: float = 120.0) -> float:
    """Crash one process of the running stack in `state_dir` (SIGKILL, no shutdown) and start
    the same command again after `down_for` seconds: same ports, same data (Kafka's log
    dirs, etcd's store), as a pod restarted in place. Returns once it answers again, with the
    seconds it was unreachable."""
    if name not in RESTARTABLE:
        raise StackError(f"restart {name}", f"only {', '.join(RESTARTABLE)} can be restarted")
    stack = load(state_dir)
    sup = Supervisor(state_dir)
    cmd = sup.command(name)
    if stack is None or cmd is None or not sup.alive(name):
        raise StackError(f"restart {name}", f"no running {name} in {state_dir}")
    if name == "kafka":
        bootstrap = stack.kafka_bootstrap
        check = lambda: kafka.ready(bootstrap)  # noqa: E731
    else:
        pki = ensure_pki(state_dir / "pki")
        check = lambda: controlplane.apiserver_ready(stack.apiserver_port, pki, stack.host)  # noqa: E731
    started = time.monotonic()
    sup.kill(name)
    time.sleep(down_for)  # the outage itself, as long as asked (not a wait for a condition)
    sup.start(name, cmd)
    sup.wait_for(name, f"restart {name}", check, timeout)
    return time.monotonic() - started


def down(state_dir: Path | None = None) -> list[str]:
    state_dir = (state_dir or default_stack_dir()).resolve()
    stopped = _stop(state_dir)
    _state_file(state_dir).unlink(missing_ok=True)
    return stopped


def _stop(state_dir: Path) -> list[str]:
    """The node's processes first (clients of the API server), then the stack's, then the
    node's bridge, whose address the API server and Kafka are bound to until they stop."""
    sup = Supervisor(state_dir)
    s3 = [s3server.NAME] if s3server.stop(sup) else []
    stopped = nodes.stop_processes(state_dir) + s3 + sup.stop_all()
    nodes.teardown(state_dir)
    return stopped


def env_script(stack: Stack) -> str:
    return "".join(f"export {k}={_quote(v)}\n" for k, v in stack.env().items())


def _quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"
