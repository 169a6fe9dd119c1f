"""The local S3 server for tests: where it comes from (conftest's `s3` fixture), the
environment and Spark settings a consumer needs to use it, and reading back what was written."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from antidote_api.wire import SPARK_JARS_ENV
from antidote_devstack import build, stack as devstack
from antidote_devstack import s3 as s3server
from antidote_devstack.paths import cache_dir
from antidote_devstack.procs import Supervisor


@dataclass(frozen=True)
class S3:
    server: s3server.S3Server
    jars: list[str]  # the S3A jars local Spark adds (the image has them in Spark's jars/)

    def env(self, stack: devstack.Stack) -> dict[str, str]:
        """A local consumer's (or a dev runner's) environment: the stack's, the standard AWS
        variables with the server's keys, and the S3A jars beside the Kafka connector's."""
        return {**stack.env(), **self.server.env(),
                SPARK_JARS_ENV: ",".join(stack.spark_jars + self.jars)}

    def spark_conf(self) -> dict[str, str]:
        return self.server.spark_conf()

    def prefix(self, name: str) -> str:
        """A folder of the bucket of its own, for one test: `bucket/name-<random>`."""
        return f"{self.server.bucket}/{name}-{uuid.uuid4().hex[:8]}"

    def fs(self):
        return s3server.client(self.server)

    def keys(self, prefix: str) -> list[str]:
        """Every object under `prefix` (`bucket/folder`), as `bucket/key`."""
        from pyarrow import fs

        infos = self.fs().get_file_info(fs.FileSelector(prefix, recursive=True, allow_not_found=True))
        return sorted(i.path for i in infos if i.type == fs.FileType.File)

    def parquet_values(self, prefix: str, column: str = "value") -> list:
        """`column` of every Parquet file under `prefix` that a job committed (not those a
        killed job left under _temporary), read straight from the server."""
        import pyarrow.parquet as pq

        out: list = []
        s3fs = self.fs()
        for key in self.keys(prefix):
            name = key.rsplit("/", 1)[1]
            if "/_temporary/" in key or not name.endswith(".parquet"):
                continue
            out += pq.read_table(key, filesystem=s3fs).column(column).to_pylist()
        return out


@contextmanager
def server_for(stack: devstack.Stack) -> Iterator[S3]:
    if stack.s3:
        yield S3(stack.s3, stack.s3_jars)
        return
    reused = os.environ.get("ANTIDOTE_STACK_DIR")
    if not reused or Path(reused).resolve() != Path(stack.dir).resolve():  # the session's own stack
        s = devstack.add_s3(Path(stack.dir))
        yield S3(s.s3, s.s3_jars)
        return
    # A stack this session reuses and must leave as it found it.
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    state_dir = cache_dir() / ("test-s3" + (f"-{worker}" if worker else ""))
    sup = Supervisor(state_dir)
    s3server.stop(sup)  # what a crashed earlier session left
    artefacts = build.build_all(build.DEFAULT_BINARIES, s3=True)
    try:
        server = s3server.start(sup, state_dir, artefacts["weed"], stack.host)
        yield S3(server, sorted(str(p) for p in artefacts["s3-jars"].glob("*.jar")))
    finally:
        s3server.stop(sup)
