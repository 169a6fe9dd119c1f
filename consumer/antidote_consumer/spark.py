"""Spark session set-up, for the driver and the reader's Archive action: the master, the
loopback binding of local runs, the connector jars, and how rows travel to Python workers."""

from __future__ import annotations

import os
import sys
from urllib.parse import urlsplit

from pyspark.sql import SparkSession

from antidote_api.semantics import EffectiveSettings
from antidote_api.wire import SPARK_JARS_ENV

from .s3a import credential_providers

JARS_ENV = SPARK_JARS_ENV

# Options of every Spark Kafka read of the consumer's (the source query, the executors' reads
# of retry cycles), given before the source's credentials, which may set them otherwise.
# fetch.max.wait.ms: an executor's new Kafka consumer (one per partition in a new driver's
# first batch, and in every read of Spark's Kafka batch source) waited the broker's full
# fetch.max.wait.ms, 500 ms by default, for its first records. Measured with
# partition_scale.py at 64 partitions: a new driver's first batch took 24.5 s, 11.7 s with
# 10 ms. A read only asks for offsets the driver saw written, so the wait buys nothing.
KAFKA_READ_OPTIONS = {"kafka.fetch.max.wait.ms": "10"}


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
    for k, v in {**credential_providers(conf), **conf}.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()


def connector_jars() -> str:
    """Extra jars for Spark (comma-separated), from ANTIDOTE_SPARK_JARS. The consumer image
    needs none: its Kafka connector jars are in Spark's own jars/ (docs/images.md). In a
    checkout the dev stack supplies the variable (`antidote dev env`, the stack's env, the
    operator's dev runner): this package never looks for the stack's cache itself."""
    return os.environ.get(JARS_ENV, "")


ARROW_BATCH_BYTES = 256 * 1024 * 1024  # Spark's own default for one Arrow batch
MAX_ARROW_ROWS = 10_000  # Spark's own default maxRecordsPerBatch
ARROW_ROWS_CONF = "spark.sql.execution.arrow.maxRecordsPerBatch"
ARROW_BYTES_CONF = "spark.sql.execution.arrow.maxBytesPerBatch"
# A learned row bound leaves room for records this many times larger than the largest seen.
LEARNED_MARGIN = 4
# What a row costs in an Arrow batch besides its key, value and headers: topic, partition,
# offset, timestamp, and the offsets and validity of its variable-width columns.
ROW_OVERHEAD_BYTES = 64


def arrow_rows(record_bytes: int) -> int:
    """Rows per Arrow batch that keep a batch of `record_bytes` records within ARROW_BATCH_BYTES."""
    return max(1, min(MAX_ARROW_ROWS, ARROW_BATCH_BYTES // max(1, record_bytes)))


def arrow_batching(max_message_bytes: int, user_conf: dict[str, str] | None = None) -> dict[str, str]:
    """How rows travel to the Python workers, unless the user's Spark conf says otherwise.

    Spark 4.0 checks an Arrow batch's size in bytes after every row when
    arrow.maxBytesPerBatch is set (the default), and for a list column such as the Kafka
    headers that check is linear in the rows already written: measured at 3x the executor
    CPU of the whole pipeline. So the byte check is off, and the same bound is kept by
    capping rows per batch at what the largest possible records would fill (ArrowRows
    raises it for source batches once their records are seen to be smaller)."""
    wanted = {ARROW_BYTES_CONF: str(2**31 - 1),
              ARROW_ROWS_CONF: str(arrow_rows(max_message_bytes))}
    user_conf = user_conf or {}
    return {k: v for k, v in wanted.items() if k not in user_conf}


CHECKPOINT_MANAGER_CONF = "spark.sql.streaming.checkpointFileManagerClass"
# Spark's checkpoint file manager through Hadoop's FileSystem API (pyspark 4.2's class name).
FILE_SYSTEM_CHECKPOINTS = ("org.apache.spark.sql.execution.streaming.checkpointing."
                           "FileSystemBasedCheckpointFileManager")


def checkpoint_files(location: str, user_conf: dict[str, str] | None = None) -> dict[str, str]:
    """How Spark writes a checkpoint on a local directory (a volume's), unless the user's
    Spark conf says otherwise.

    Spark's default manager goes through Hadoop's FileContext, whose local filesystem runs
    a `readlink` process for every status it reads (its rename reads several) and a `chmod`
    for every file it creates: ~22 processes forked by the driver's JVM for the two log
    entries of each batch, 60-90 ms a batch while the executors wait (measured; without
    Hadoop's native library, which pyspark does not ship). Through the FileSystem API the
    `readlink`s go; the `chmod`s stay (one per file and one per checksum file). Its rename
    is rename(2), atomic within one directory, where the entry's temporary file is. Any
    other scheme (s3a, hdfs) keeps Spark's choice."""
    if CHECKPOINT_MANAGER_CONF in (user_conf or {}) or urlsplit(location).scheme not in ("", "file"):
        return {}
    return {CHECKPOINT_MANAGER_CONF: FILE_SYSTEM_CHECKPOINTS}


class ArrowRows:
    """The rows per Arrow batch of source batches, from the records seen.

    The topic's max.message.bytes bounds every record, so `safe` rows (256 for the broker's
    default 1 MB) keep any batch within ARROW_BATCH_BYTES; but where records are small that
    cap cost ~10% of the CPU per message (a fixed cost per Arrow batch on both sides of the
    Python worker's socket; docs/performance.md). So the executors report the largest record
    of each task, and once a batch has run the bound is taken from the largest record seen
    in this run, with LEARNED_MARGIN to spare, never below `safe`. A batch that fails as a
    whole runs again at `safe` (its rollbacks and bisection): a burst of records larger than
    any seen before, which a learned bound may let past ARROW_BATCH_BYTES, cannot fail a
    batch twice for its size. The largest seen never shrinks, and a restart starts at
    `safe` again. The user's own maxRecordsPerBatch (spec.spark.conf) is left as it is."""

    def __init__(self, max_message_bytes: int, user_conf: dict[str, str] | None = None) -> None:
        self.user_set = ARROW_ROWS_CONF in (user_conf or {})
        self.safe = arrow_rows(max_message_bytes)
        self.largest = 0  # bytes of the largest record seen; 0 until a batch reports one

    def seen(self, largest: int) -> None:
        self.largest = max(self.largest, largest)

    def rows(self, *, after_failure: bool = False) -> int | None:
        """The bound for the next run of a source batch; None: the user's, left alone."""
        if self.user_set:
            return None
        if after_failure or not self.largest:
            return self.safe
        return max(self.safe, arrow_rows(LEARNED_MARGIN * (self.largest + ROW_OVERHEAD_BYTES)))
