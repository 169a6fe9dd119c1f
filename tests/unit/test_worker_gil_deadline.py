"""An attempt stuck in C code that holds the GIL: neither the SIGUSR1 handler nor the
watchdog thread can run, so before, the process (a Spark task, the local worker) hung for
ever. faulthandler's timer, which the watchdog pushes back every round, ends it at the
attempt's hard deadline (limit + grace + HARD_MARGIN_S) with every thread's stack."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from antidote_consumer.worker.deadline import HARD_MARGIN_S, hard_deadline


def test_hard_deadline_is_the_limit_its_grace_and_the_margin() -> None:
    assert hard_deadline(0.3) == 0.3 + 0.3 + HARD_MARGIN_S
    assert hard_deadline(60) == 60 + 10 + HARD_MARGIN_S


def test_a_handler_holding_the_gil_ends_its_process_at_the_hard_deadline() -> None:
    code = textwrap.dedent('''
        import ctypes, signal, time, pyarrow as pa
        from antidote_consumer.worker.executor import INPUT_FIELDS, WorkerConfig, arrow_schema, process

        def holds_the_gil(msg):
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})  # the sleep is not cut
            ctypes.PyDLL(None).sleep(3600)  # libc's sleep, the GIL held all along

        cols = {"key": [b"k"], "value": [b"v"], "topic": ["src"], "partition": [2],
                "offset": [41], "ts": [0], "headers": [None]}
        b = pa.RecordBatch.from_pydict(cols, schema=arrow_schema(INPUT_FIELDS))
        cfg = WorkerConfig(handler="__main__:holds_the_gil", source_topic="src", immediate=0, cycles=0,
                           non_retryable=frozenset(), validation=None, sink_kafka=None,
                           emit_outputs=True, attempt_timeout=0.3)
        print("started", time.monotonic(), flush=True)
        list(process(cfg, iter([b])))
        print("not reached")
    ''')
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    ended = time.monotonic()
    assert proc.returncode == 1, proc.stderr
    assert "not reached" not in proc.stdout
    assert "Timeout (0:00:05" in proc.stderr and "in holds_the_gil" in proc.stderr  # its stack
    started = float(proc.stdout.split()[1])
    assert hard_deadline(0.3) - 1 <= ended - started < hard_deadline(0.3) + 5
