"""What becomes of a message in one pass of the worker: the `kind` of its result row, as the
executors write it and the driver settles it (driver.outcomes). One enum for every kind a
message's row can have; the rows that are no message's (a task's summary, a partition's
end, its chains) are the executor's own (worker.executor.RESULT_COLUMNS)."""

from __future__ import annotations

from enum import StrEnum


class Verdict(StrEnum):
    OK = "ok"            # the handler succeeded; `output` goes to the sink
    RETRY = "retry"      # park in the next retry topic
    FINAL = "final"      # no attempts left: the policy's disposition applies
    # Not attempted in this pass (ordering Key, worker.ordering):
    HELD = "held"          # behind its key's failed message: parked in a retry topic behind it
    OVERFLOW = "overflow"  # past maxHeldPerKey: moved to the poison topic, reason held-overflow
