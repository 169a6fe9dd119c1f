"""Faster Spark start-ups for the integration tests: a class-data-sharing archive of the
classes a consumer's driver loads, and C1 only.

Most of an integration test's time is Spark drivers starting (the consumer processes, the
operator's dev runner, the reader): on the 2-core CI VM, 30-40 s from the process to its
first batch while the other pytest worker runs. Two JVM options shorten that without
changing what runs:

- `-XX:SharedArchiveFile`: the classes are mapped from an archive instead of being read
  from the jars, parsed and verified again by every JVM. The archive is made once per
  machine (per JDK and pyspark install: the JVM refuses an archive whose classpath jars
  changed, so the key is their paths, sizes and mtimes) by one real consumer run,
  `-XX:ArchiveClassesAtExit`, under a lock, so the two pytest workers make it once.
- `-XX:TieredStopAtLevel=1`: C1 only, as the dev stack's broker runs; a test's stream is a
  few thousand messages, never long enough for C2 to pay for its compile time.

They go in SPARK_SUBMIT_OPTS, which spark-submit adds to the driver's JVM (in local mode
the executors too), so every Spark the tests start takes them: the in-process session,
`antidote consumer` and what the dev runner starts. `-Xlog:cds*=off`: a JVM that cannot
use the archive says so on stdout, where tests read the programs' output; it then runs
without it, as before. Measured in docs/testing.md.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import time
import uuid
import warnings
from pathlib import Path

from antidote_devstack.paths import cache_dir

OPTS_ENV = "SPARK_SUBMIT_OPTS"
C1_ONLY = "-XX:TieredStopAtLevel=1"  # the node tests' drivers and executors take it too
COMMON = (C1_ONLY, "-Xlog:cds*=off")
KEEP = 3  # archives kept (one per venv whose jars differ: a clone, a CI run), ~170 MB each


def _key() -> str:
    import pyspark

    jars = Path(pyspark.__file__).resolve().parent / "jars"
    h = hashlib.sha256(subprocess.run(["java", "-version"], capture_output=True).stderr)
    for jar in sorted(jars.glob("*.jar")):
        st = jar.stat()
        h.update(f"{jar}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def enable(stack) -> None:
    """Set SPARK_SUBMIT_OPTS for this session's Spark JVMs, making the archive first when
    this machine has none for this install. Left alone when the caller set it."""
    if OPTS_ENV in os.environ:
        return
    folder = cache_dir() / "cds"
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / f"spark-{_key()}.jsa"
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other worker waits for the one making it
        if not archive.exists():
            _make(stack, archive)
    opts = [*COMMON, f"-XX:SharedArchiveFile={archive}"] if archive.exists() else list(COMMON)
    os.environ[OPTS_ENV] = " ".join(opts)


def _session_alive(sid: int) -> bool:
    return subprocess.run(["pgrep", "-s", str(sid)], capture_output=True).returncode == 0


def _make(stack, archive: Path) -> None:
    """One consumer run (ten messages, one of them failing, retried once and quarantined)
    with -XX:ArchiveClassesAtExit: the classes a consumer's driver loads, written when its
    JVM exits."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from antidote_testkit.consumers import start, write_manifests
    from antidote_testkit.kafka_io import produce

    work = archive.parent / f"make-{uuid.uuid4().hex[:8]}"
    work.mkdir()
    source = f"cds-archive-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})
    for fut in admin.create_topics([NewTopic(t, 1, 1) for t in (source, f"{source}-out")]).values():
        fut.result(timeout=30)
    produce(stack.kafka_bootstrap, source, [(b"k%d" % i, b"poison" if i == 3 else b"m%d" % i, None)
                                            for i in range(10)])
    args = write_manifests(work, name="cds", namespace="tests", bootstrap=stack.kafka_bootstrap,
                           source=source, handler="tests.integration.handlers:upper",
                           policy={"retries": {"immediate": 1, "cycles": 0}}, sink=f"{source}-out")
    partial = work / "spark.jsa"
    log = work / "consumer.log"
    try:
        proc = start(stack, work, log, [*args, "--until-idle"],
                     **{OPTS_ENV: " ".join([*COMMON, f"-XX:ArchiveClassesAtExit={partial}"])})
        code = proc.wait(600)
        # The JVM writes the archive as it exits, after the Python driver it belongs to.
        deadline = time.monotonic() + 120
        while _session_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if code == 0 and partial.exists():
            os.replace(partial, archive)
        else:
            warnings.warn(f"no Spark class archive (the consumer exited {code}); the tests' JVMs "
                          f"start without one. Last lines:\n{log.read_text()[-2000:]}", stacklevel=2)
    finally:
        for fut in admin.delete_topics([source, f"{source}-out"]).values():
            fut.exception(timeout=30)
        subprocess.run(["rm", "-rf", str(work)], check=False)
        for old in sorted(archive.parent.glob("spark-*.jsa"), key=lambda p: p.stat().st_mtime)[:-KEEP]:
            old.unlink(missing_ok=True)
