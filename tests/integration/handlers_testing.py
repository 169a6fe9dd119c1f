"""The handler of test_antidote_testing.py: run by the real consumer (Spark's Python workers
import it by name) and by `antidote.testing`, which must predict what the consumer does with
each message. Each value is JSON; `do` says what the call does."""

from __future__ import annotations

import json

from antidote import NonRetryable, Retry


class Declined(Exception):
    """Listed in the test policy's retries.nonRetryable."""


def handle(msg):
    do = json.loads(msg.value)["do"]
    if do.startswith("fail-") and msg.attempt <= int(do[5:]):  # fails its first N calls, every cycle
        raise ConnectionError(f"attempt {msg.attempt}")
    if do == "bad":
        raise ValueError("cannot process")
    if do == "declined":
        raise Declined("declined")
    if do == "never":
        raise NonRetryable("unknown customer")
    if do == "later":
        raise Retry(after="90s")  # longer than the policy's maxCycleDelay: bounded
    return {"done": do, "attempt": msg.attempt, "trace": (msg.header("trace") or b"").decode()}
