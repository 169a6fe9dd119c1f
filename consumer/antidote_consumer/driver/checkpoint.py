"""What a first offsets write cut short leaves in Spark's checkpoint, cleared before a start.

Spark writes each entry of a checkpoint's logs (offsets/N, commits/N) to a hidden temporary
file, `.N.<uuid>.tmp` with its checksum `..N.<uuid>.tmp.crc`, and renames it into place. A
driver killed between the two leaves the temporary file. After a later batch that costs
nothing (Spark reads only the entries, named by their batch number), but a checkpoint with
no entry at all is a new query to Spark, and since Spark 4.1 a new query refuses to start
when its offsets or commits folder holds any file (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY,
`spark.sql.streaming.verifyCheckpointDirectoryEmptyOnStart`): the consumer would fail the
same way on every restart. So before the query starts, those temporary files are removed,
and only when nothing else is there: a folder with an entry, or with any other file, is left
to Spark's check (which is there to stop two queries sharing one checkpoint). Nothing is
lost with them: a checkpoint without entries starts from the ledger's positions
(driver.offsets.starting_offsets).
"""

from __future__ import annotations

import logging
import re

log = logging.getLogger("antidote.consumer")

LOGS = ("offsets", "commits")
# CheckpointFileManager's temporary file for entry N, and its checksum.
_TEMP = re.compile(r"\.\.?\d+\.[0-9a-fA-F-]{36}\.tmp(\.crc)?")


def torn_first_write(listing: dict[str, list[str]]) -> list[tuple[str, str]]:
    """(folder, name) of the files to remove, given the names in each of LOGS: the
    temporary files of a checkpoint that has no entry and nothing else; else none."""
    names = [(folder, name) for folder in LOGS for name in listing.get(folder, [])]
    if not names or not all(_TEMP.fullmatch(name) for _folder, name in names):
        return []
    return names


def clear_torn_first_write(spark, location: str) -> list[str]:
    """Remove what torn_first_write finds in the checkpoint at `location` (any filesystem
    Spark reads it from, with the session's Hadoop configuration); the paths removed."""
    Path = spark.sparkContext._jvm.org.apache.hadoop.fs.Path  # noqa: N806 - Hadoop's class
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    root = Path(location)
    fs = root.getFileSystem(conf)
    listing: dict[str, list[str]] = {}
    for folder in LOGS:
        path = Path(root, folder)
        listing[folder] = ([status.getPath().getName() for status in fs.listStatus(path)]
                           if fs.exists(path) else [])
    removed = []
    for folder, name in torn_first_write(listing):
        path = Path(Path(root, folder), name)
        fs.delete(path, False)
        removed.append(path.toString())
    if removed:
        log.warning("the checkpoint at %s had no batch but the remains of a first write cut short "
                    "(a driver killed while writing it); removed so the query can start: %s",
                    location, ", ".join(removed))
    return removed


def remove_checkpoint(spark, location: str) -> bool:
    """Remove the checkpoint at `location` (any filesystem Spark reads it from): after a
    recreated source topic was rebased (driver.rebase), its offsets are the old topic's, and
    Spark would start from them. The ledger's positions say where to start instead
    (driver.offsets.starting_offsets), as after a lost checkpoint. True if it was there."""
    Path = spark.sparkContext._jvm.org.apache.hadoop.fs.Path  # noqa: N806 - Hadoop's class
    root = Path(location)
    fs = root.getFileSystem(spark._jsparkSession.sessionState().newHadoopConf())
    if not fs.exists(root):
        return False
    fs.delete(root, True)
    log.warning("removed the checkpoint at %s: its offsets were those of a source topic since "
                "deleted and recreated (antidote rebase); starting from the ledger's positions", location)
    return True
