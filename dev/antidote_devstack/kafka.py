"""A single-node KRaft Kafka broker (broker + controller) from Maven Central jars."""

from __future__ import annotations

import base64
import shutil
import subprocess
import uuid
from pathlib import Path

from .errors import StackError
from .procs import Supervisor

JVM_OPTS = ["-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            "-XX:TieredStopAtLevel=1"]  # C1 only: faster start, plenty for a dev broker

LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.state.name = state.change.logger
logger.state.level = WARN
"""


# The SASL_PLAINTEXT listener's one user (mechanism PLAIN), for tests of Kafka credentials.
# PLAINTEXT stays the listener everything else uses.
SASL_USER = "antidote"
SASL_PASSWORD = "antidote-secret"


def server_properties(log_dir: Path, port: int, controller_port: int,
                      sasl_port: int | None = None, host: str = "127.0.0.1") -> str:
    """`host`: where the client listeners bind and what they advertise: loopback, or with a
    node the bridge's gateway, one address that works from the host and from pods."""
    listeners = [f"PLAINTEXT://{host}:{port}"]
    sasl = []
    if sasl_port is not None:
        listeners.append(f"SASL_PLAINTEXT://{host}:{sasl_port}")
        sasl = [
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN",
            # The broker side of PLAIN: one user_<name>="<password>" per user.
            "listener.name.sasl_plaintext.plain.sasl.jaas.config="
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'user_{SASL_USER}="{SASL_PASSWORD}";',
        ]
    return "\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{controller_port}",
        f"listeners={','.join(listeners)},CONTROLLER://127.0.0.1:{controller_port}",
        f"advertised.listeners={','.join(listeners)}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
        "CONTROLLER:PLAINTEXT",
        *sasl,
        f"log.dirs={log_dir}",
        "num.partitions=1",
        # Topics are created on purpose (Antidote creates its derived topics itself).
        "auto.create.topics.enable=false",
        "offsets.topic.replication.factor=1",
        "offsets.topic.num.partitions=4",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "transaction.state.log.num.partitions=4",
        "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        "log.flush.interval.messages=9223372036854775807",
        "",
    ])


def _java() -> str:
    java = shutil.which("java")
    if not java:
        raise StackError("start kafka", "`java` not found on PATH (install a JDK 17)")
    return java


def prepare(state_dir: Path, jars: Path, port: int, controller_port: int,
            sasl_port: int | None = None, host: str = "127.0.0.1") -> tuple[Path, list[str]]:
    """Write the config and return (properties file, base java command)."""
    kdir = state_dir / "kafka"
    kdir.mkdir(parents=True, exist_ok=True)
    props = kdir / "server.properties"
    props.write_text(server_properties(kdir / "data", port, controller_port, sasl_port, host))
    log4j = kdir / "log4j2.properties"
    log4j.write_text(LOG4J2)
    base = [_java(), *JVM_OPTS, f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{jars}/*"]
    return props, base


def format_storage(base: list[str], props: Path, log: Path) -> subprocess.Popen:
    # The cluster id is 16 random bytes, base64url without padding (what random-uuid prints).
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    out = open(log, "ab")
    return subprocess.Popen([*base, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}",
                             "-c", str(props)], stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)


def start(sup: Supervisor, base: list[str], props: Path) -> None:
    sup.start("kafka", [*base, "kafka.Kafka", str(props)])


def ready(bootstrap: str) -> bool:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    md = admin.list_topics(timeout=2)
    return bool(md.brokers)
