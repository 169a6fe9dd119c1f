"""A Schema Registry beside the local stack (`antidote dev up --with schema-registry`, and the
tests that decode Avro, Protobuf or JSON Schema payloads): Apicurio Registry, built by Maven
from its Central artefacts (hack/schema-registry/pom.xml says how and why that version), run
on the stack's JVM, answering the Confluent Schema Registry REST API under `/apis/ccompat/v6`.

It binds the stack's host address (loopback, or the node bridge's gateway with `--node`, as
Kafka), asks for no credentials, and keeps its schemas in memory: every start is an empty
registry, like the stack's Kafka.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from .errors import StackError
from .paths import HACK, cache_dir
from .procs import Supervisor, free_port
from .progress import step
from .steps import _digest, _require, _run_logged

NAME = "schema-registry"  # the process name in the stack's pids/ and logs/; `--with` names it
VERSION = "2.4.2.Final"  # hack/schema-registry/pom.xml's apicurio.version, shown by `dev status`
CCOMPAT = "/apis/ccompat/v6"  # the Confluent-compatible API's root: what clients are given
MODULE = HACK / "schema-registry"
JVM_OPTS = ["-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true"]


def build_path() -> Path:
    """The cached build: keyed by everything that decides its bytes (the pom, the sources)."""
    parts = [(MODULE / "pom.xml").read_bytes()]
    for src in sorted((MODULE / "src").rglob("*.java")):
        parts += [str(src.relative_to(MODULE)).encode(), src.read_bytes()]
    return cache_dir() / "jars" / f"{NAME}-{_digest(*parts)}"


def build() -> Path:
    """The registry's runnable folder (`app.jar` and its `lib/`), built first when the cache
    has none (cold: about a minute of Maven, most of it fetching ~130 MB of jars)."""
    target = build_path()
    if target.exists():
        return target
    mvn = _require("mvn", "build the schema registry", "install Maven and a JDK 17")
    _require("java", "build the schema registry", "install a JDK 17")
    target.parent.mkdir(parents=True, exist_ok=True)
    # Two processes may need it at once on a cold cache (`make test`'s two workers each start
    # a stack with a registry): one builds, the other waits and takes its build. Without the
    # lock both built it, and the second's rename failed ("Directory not empty").
    with open(target.parent / f".{NAME}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            _build(mvn, target)
    return target


def _build(mvn: str, target: Path) -> None:
    log = cache_dir() / "logs" / f"maven-{NAME}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        work = Path(tmp) / "src"
        # A copy: the build writes target/, which has no place in the checkout.
        shutil.copytree(MODULE, work, ignore=shutil.ignore_patterns("target"))
        cmd = [mvn, "-B", "-q", "-f", str(work / "pom.xml"), "package"]
        with step(f"building the schema registry (Apicurio {VERSION}) with Maven (log {log})"):
            _run_logged(cmd, work, dict(os.environ), log, "build the schema registry")
        out = Path(tmp) / "out"
        out.mkdir()
        os.replace(work / "target" / "schema-registry-0-runner.jar", out / "app.jar")
        os.replace(work / "target" / "lib", out / "lib")
        os.replace(out, target)


def argv(java: str, app: Path, host: str, port: int) -> list[str]:
    return [java, *JVM_OPTS, f"-Dquarkus.http.host={host}", f"-Dquarkus.http.port={port}",
            # No error reports leave the machine (the app ships a Sentry client, off without a
            # DSN), and no scheduled jobs beyond what the API needs.
            "-Dregistry.enable.sentry=false", "-Dquarkus.log.level=WARN",
            "-jar", str(app / "app.jar")]


def start(sup: Supervisor, app: Path, host: str, timeout: float = 120) -> str:
    """Start the registry on `host` and a free port; return the URL clients are given (the
    Confluent-compatible API's root)."""
    java = shutil.which("java")
    if not java:
        raise StackError("start the schema registry", "`java` not found on PATH (install a JDK 17)")
    port = free_port()
    sup.start(NAME, argv(java, app, host, port), cwd=app)
    url = f"http://{host}:{port}{CCOMPAT}"
    sup.wait_for(NAME, "start the schema registry", lambda: ready(url), timeout)
    return url


def stop(sup: Supervisor) -> bool:
    return sup.stop(NAME, timeout=10)


def ready(url: str) -> bool:
    """Whether the Confluent-compatible API answers (GET /subjects: a JSON list)."""
    with urllib.request.urlopen(f"{url}/subjects", timeout=2) as resp:
        return isinstance(json.loads(resp.read()), list)


def register(url: str, subject: str, schema: str, schema_type: str = "AVRO") -> int:
    """Register `schema` under `subject` (POST /subjects/{subject}/versions); its global id.
    `schema_type`: AVRO, PROTOBUF or JSON, as the Confluent API names them."""
    body = {"schema": schema} | ({} if schema_type == "AVRO" else {"schemaType": schema_type})
    req = urllib.request.Request(f"{url}/subjects/{subject}/versions", method="POST",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return int(json.loads(resp.read())["id"])
    except urllib.error.HTTPError as err:
        raise StackError(f"register schema {subject}", err.read().decode(errors="replace")) from err
