"""The local Schema Registry for tests: where it comes from (conftest's `schema_registry`
fixture), one of a test's own that it may stop mid-run (`own_registry`), and registering
schemas through the Confluent-compatible API."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from antidote_devstack import schema_registry as registry, stack as devstack
from antidote_devstack.paths import cache_dir
from antidote_devstack.procs import Supervisor


@contextmanager
def registry_for(stack: devstack.Stack) -> Iterator[str]:
    """The URL of a registry beside `stack`: the stack's own (`dev up --with schema-registry`),
    one added to a stack this session started, or, beside a reused stack without one, one the
    session starts and stops (leaving the shared stack as it found it)."""
    if stack.schema_registry_url:
        yield stack.schema_registry_url
        return
    reused = os.environ.get("ANTIDOTE_STACK_DIR")
    if not reused or Path(reused).resolve() != Path(stack.dir).resolve():
        yield devstack.add_schema_registry(Path(stack.dir)).schema_registry_url
        return
    with own_registry(stack, "test-schema-registry") as (url, _):
        yield url


@contextmanager
def own_registry(stack: devstack.Stack, name: str | None = None) -> Iterator[tuple[str, Supervisor]]:
    """A registry of the caller's own (state under the cache, stopped after), with its
    Supervisor to stop it early: for a test that takes the registry away mid-run."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    state_dir = cache_dir() / ((name or f"test-registry-{uuid.uuid4().hex[:6]}")
                               + (f"-{worker}" if worker else ""))
    sup = Supervisor(state_dir)
    registry.stop(sup)  # what a crashed earlier session left
    try:
        url = registry.start(sup, registry.build(), stack.host)
        yield url, sup
    finally:
        registry.stop(sup)
        if name is None:  # a one-off's pid files and log: nothing reuses them
            shutil.rmtree(state_dir, ignore_errors=True)


def subject(prefix: str) -> str:
    """A subject of the test's own on a registry other tests share."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}-value"
