"""The reader's archive: quarantined messages as Parquet (or JSON) files written by Spark,
laid out as `<path>/date=YYYY-MM-DD/error_class=<class>/slice=<slice>/part-*.parquet`.

`date` is the UTC day the message was quarantined (its poison record's time). A slice is one
commit of the reader, named by the poison topic, partition and the first and last archived
offset, so two slices never share a name. It is written under `<path>/_staging/<slice>`
and then moved into place: a slice that was written but whose offsets were never committed
(a killed reader) is deleted before its messages are archived again, so nothing is archived
twice. Spark, pandas and pyarrow skip the `_staging` folder (a leading underscore)."""

from __future__ import annotations

import os
from datetime import datetime, timezone

from antidote_consumer.kafka import headers as h

from .rules import header_map, redrive_count

SCHEMA = (
    "key binary, value binary, headers array<struct<key:string,value:binary>>, "
    "topic string, partition int, offset long, quarantined_at timestamp, "
    "original_topic string, original_partition int, original_offset long, "
    "original_timestamp timestamp, reason string, error_message string, attempts int, "
    "first_failure timestamp, last_failure timestamp, redrive_count int, consumer string, "
    "policy string, date string, error_class string")


def _time(ms) -> datetime | None:
    try:
        return datetime.fromtimestamp(int(ms) / 1000, tz=timezone.utc) if ms is not None else None
    except (TypeError, ValueError, OverflowError):
        return None


def _int(text):
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def row(topic: str, partition: int, offset: int, timestamp: int, key, value, headers) -> tuple:
    """One archive row (SCHEMA order) of a poison record; payload and all headers kept whole."""
    m = header_map(headers)
    quarantined = _time(timestamp)
    return (key, value, [(k, v) for k, v in headers or ()], topic, partition, offset, quarantined,
            m.get(h.ORIGINAL_TOPIC), _int(m.get(h.ORIGINAL_PARTITION)), _int(m.get(h.ORIGINAL_OFFSET)),
            _time(m.get(h.ORIGINAL_TIMESTAMP)), m.get(h.REASON), m.get(h.ERROR_MESSAGE),
            _int(m.get(h.ATTEMPTS)), _time(m.get(h.FIRST_FAILURE)), _time(m.get(h.LAST_FAILURE)),
            redrive_count(headers), m.get(h.CONSUMER), m.get(h.POLICY),
            (quarantined or datetime.now(timezone.utc)).strftime("%Y-%m-%d"),
            m.get(h.ERROR_CLASS) or "unknown")


def slice_name(topic: str, partition: int, first: int, last: int) -> str:
    return f"{topic}.{partition}.{first}-{last}"


def absolute(path: str) -> str:
    return path if "://" in path else "file://" + os.path.abspath(path)


class ArchiveWriter:
    def __init__(self, spark, path: str, fmt: str = "parquet"):
        self.spark, self.path, self.fmt = spark, absolute(path), fmt
        jvm = spark._jvm
        self._Path = jvm.org.apache.hadoop.fs.Path
        self.root = self._Path(self.path)
        self.fs = self.root.getFileSystem(spark._jsc.hadoopConfiguration())

    def _staging(self, name: str):
        return self._Path(self.root, f"_staging/{name}")

    def discard(self, name: str) -> None:
        """Delete every file of slice `name` (staged or in place)."""
        self.fs.delete(self._staging(name), True)
        found = self.fs.globStatus(self._Path(self.root, f"date=*/error_class=*/slice={name}"))
        for status in found or []:
            self.fs.delete(status.getPath(), True)

    def write(self, name: str, rows: list[tuple]) -> None:
        """Write slice `name`; overwriting, so writing it again is harmless."""
        self.discard(name)
        staging = self._staging(name)
        df = self.spark.createDataFrame(rows, SCHEMA).coalesce(1)
        (df.write.mode("overwrite").partitionBy("date", "error_class")
         .format(self.fmt).save(staging.toString()))
        for day in self.fs.listStatus(staging):
            if not day.isDirectory():
                continue  # _SUCCESS
            for cls in self.fs.listStatus(day.getPath()):
                if not cls.isDirectory():
                    continue
                target = self._Path(self.root, f"{day.getPath().getName()}/"
                                    f"{cls.getPath().getName()}/slice={name}")
                self.fs.mkdirs(target.getParent())
                if not self.fs.rename(cls.getPath(), target):
                    raise OSError(f"archive {self.path}: cannot move {cls.getPath()} to {target}")
        self.fs.delete(staging, True)
