"""Spark session set-up, for the driver and the reader's Archive action: the master, the
loopback binding of local runs, the connector jars, and how rows travel to Python workers."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from antidote_api.semantics import EffectiveSettings
from antidote_api.wire import SPARK_JARS_ENV

JARS_ENV = SPARK_JARS_ENV


def spark_session(settings: EffectiveSettings, master: str | None = None) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = dict(settings.spark.conf or {})
    builder = SparkSession.builder.appName(f"antidote-{settings.consumer or 'consumer'}")
    # The master is never the user's (spec.spark.conf may not set spark.master): the
    # operator's --master, else ANTIDOTE_SPARK_MASTER for local runs and tests.
    master = master or os.environ.get("ANTIDOTE_SPARK_MASTER", "local[2]")
    builder = builder.master(master)
    if master.startswith("local"):
        # Local runs stay on loopback instead of whatever interface the hostname resolves to.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1")
    jars = connector_jars()
    if jars:
        builder = builder.config("spark.jars", jars)
    builder = (builder.config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.memory", settings.spark.driver.memory)
               .config("spark.executor.memory", settings.spark.executor.memory))
    for k, v in conf.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()


def connector_jars() -> str:
    """Extra jars for Spark (comma-separated), from ANTIDOTE_SPARK_JARS. The consumer image
    needs none: its Kafka connector jars are in Spark's own jars/ (docs/images.md). In a
    checkout the dev stack supplies the variable (`antidote dev env`, the stack's env, the
    operator's dev runner): this package never looks for the stack's cache itself."""
    return os.environ.get(JARS_ENV, "")


ARROW_BATCH_BYTES = 256 * 1024 * 1024  # Spark's own default for one Arrow batch


def arrow_batching(max_message_bytes: int, user_conf: dict[str, str] | None = None) -> dict[str, str]:
    """How rows travel to the Python workers, unless the user's Spark conf says otherwise.

    Spark 4.0 checks an Arrow batch's size in bytes after every row when
    arrow.maxBytesPerBatch is set (the default), and for a list column such as the Kafka
    headers that check is linear in the rows already written: measured at 3x the executor
    CPU of the whole pipeline. So the byte check is off, and the same bound is kept by
    capping rows per batch at what the largest possible records would fill."""
    rows = max(1, min(10_000, ARROW_BATCH_BYTES // max(1, max_message_bytes)))
    wanted = {"spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1),
              "spark.sql.execution.arrow.maxRecordsPerBatch": str(rows)}
    user_conf = user_conf or {}
    return {k: v for k, v in wanted.items() if k not in user_conf}
