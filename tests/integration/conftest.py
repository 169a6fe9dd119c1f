"""Session fixtures for the real local stack: started once, stopped at the end.

A stack already started with `antidote dev up` (named by $ANTIDOTE_STACK_DIR, as
`eval "$(antidote dev env)"` sets it) is reused and left running; otherwise the session
starts its own in ~/.cache/antidote/test-stack, stopping first whatever a crashed earlier
session left there (pid files). Under pytest-xdist every worker is a session with a stack
of its own (test-stack-gw0, -gw1, ...): tests never share a broker or an API server.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from pathlib import Path

import pytest
from kubernetes import client, config

from antidote_devstack import stack as devstack
from antidote_devstack.paths import cache_dir

from . import jvm_archive, s3_util, schema_registry_util


@pytest.fixture(scope="session")
def stack() -> Iterator[devstack.Stack]:
    reuse = os.environ.get("ANTIDOTE_STACK_DIR")
    if reuse and (running := devstack.running(Path(reuse))):
        jvm_archive.enable(running)
        yield running
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    state_dir = cache_dir() / ("test-stack" + (f"-{worker}" if worker else ""))
    s = devstack.up(state_dir)
    try:
        # Before any Spark of the session starts: its JVMs take the options (jvm_archive.py).
        jvm_archive.enable(s)
        yield s
    finally:
        devstack.down(state_dir)


@pytest.fixture(scope="session")
def kubeconfig(stack: devstack.Stack) -> str:
    return stack.kubeconfig


@pytest.fixture(scope="session")
def api_client(kubeconfig: str) -> Iterator[client.ApiClient]:
    api = config.new_client_from_config(config_file=kubeconfig)
    try:
        yield api
    finally:
        api.close()


@pytest.fixture(scope="session")
def core_v1(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


def _dns_label(text: str, limit: int = 40) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:limit].strip("-")


@pytest.fixture
def namespace(core_v1: client.CoreV1Api, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, named after it."""
    name = f"{_dns_label(request.node.name)}-{uuid.uuid4().hex[:6]}"
    core_v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        # Without a controller-manager the namespace stays Terminating; its name is unique.
        core_v1.delete_namespace(name)


@pytest.fixture(scope="session")
def kafka_bootstrap(stack: devstack.Stack) -> str:
    return stack.kafka_bootstrap


@pytest.fixture(scope="session")
def kafka_admin(kafka_bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": kafka_bootstrap})


@pytest.fixture
def topic_factory(kafka_admin, request: pytest.FixtureRequest) -> Iterator[Callable[..., str]]:
    """create(suffix="", partitions=1, config=None) -> a new topic, unique to this test;
    deleted after."""
    from confluent_kafka.admin import NewTopic

    created: list[str] = []

    def create(suffix: str = "", partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = f"{_dns_label(request.node.name, 60)}-{uuid.uuid4().hex[:6]}{suffix}"
        new = NewTopic(name, partitions, 1, config=config or {})
        for fut in kafka_admin.create_topics([new]).values():
            fut.result(timeout=30)
        created.append(name)
        return name

    yield create
    if created:
        for fut in kafka_admin.delete_topics(created).values():
            fut.result(timeout=30)


@pytest.fixture(scope="session")
def calls_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where test handlers record each call (see tests/integration/handlers.py)."""
    path = tmp_path_factory.mktemp("handler-calls")
    os.environ["ANTIDOTE_TEST_CALLS_DIR"] = str(path)
    return path


@pytest.fixture(scope="session")
def spark(stack: devstack.Stack, calls_dir: Path):
    """One local Spark session (local[2]) with the Kafka connector jars, for the whole run."""
    import sys

    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    # Spark's Python workers import test handlers (tests.integration.handlers) by name.
    repo = str(Path(__file__).resolve().parents[2])
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # stay on loopback
    session = (SparkSession.builder.master("local[2]").appName("antidote-tests")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.jars", ",".join(stack.spark_jars))
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.memory", "1g")
               .getOrCreate())
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def s3(stack: devstack.Stack) -> Iterator[s3_util.S3]:
    """The local S3 server, started once per session by the first test that asks for it
    (cold, building it and fetching the S3A jars takes minutes: docs/testing.md). A stack
    started with `dev up --s3` lends its own; a session's own stack gets one added; beside a
    reused stack without one, the session starts one of its own (under the pytest temp
    folder's sibling in the cache) and stops it after, leaving the shared stack as it was."""
    with s3_util.server_for(stack) as server:
        yield server


@pytest.fixture(scope="session")
def schema_registry(stack: devstack.Stack) -> Iterator[str]:
    """The Confluent-compatible API's URL of the local Schema Registry, started once per session
    by the first test that asks for it (cold, building it takes about a minute): the stack's
    own when it was started `--with schema-registry`, else as the `s3` fixture does."""
    with schema_registry_util.registry_for(stack) as url:
        yield url


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """The stack's node with the chart's operator and the test images (node_cluster.started),
    once per module that asks for it: the node modules (marks: node_cluster.NODE_IMAGES),
    each of which leaves it as it found it."""
    from .node_cluster import started

    with started() as c:
        yield c
