"""The texts of QueueConsumer conditions and Events that need more than a line: why a queue
was disabled and how to resume it, and the poison summary."""

from __future__ import annotations

from antidote_api.consumer import Counts, LastPoison
from antidote_api.policy import PoisonPolicySpec
from antidote_api.wire import RESUME_ANNOTATION

from .observations import Sample

WHY = {
    "ConsecutiveBatchFailures": "whole batches kept failing (queueDisable.consecutiveBatchFailures "
                                "reached{threshold}) and no single message could be isolated",
    "SystemicFailure": "most messages fail (queueDisable.failureRatio{ratio}): a systemic fault "
                       "such as a downstream outage, so nothing was quarantined and the batch "
                       "stays unconsumed",
    "Fault": "a poison message stopped the consumer{where} (disposition Fault, or a record too "
             "large for its retry, poison or dead-letter topic: reason too-large in the driver's "
             "log); it and the messages after it stay unconsumed",
}


def disable_message(reason: str, evidence: str, name: str, policy: PoisonPolicySpec | None,
                    sample: Sample | None) -> str:
    threshold = ratio = where = ""
    if policy is not None:
        qd = policy.queue_disable
        threshold = f" {qd.consecutive_batch_failures}"
        ratio = f" threshold {qd.failure_ratio.threshold:g} over {qd.failure_ratio.window}"
    if sample is not None and sample.last_poison is not None:
        lp = sample.last_poison
        where = f" at {lp.topic}/{lp.partition}/{lp.offset}"
    why = WHY[reason].format(threshold=threshold, ratio=ratio, where=where)
    return (f"Queue disabled ({reason}): {why}; {evidence}. The Deployment is scaled to 0. "
            f"Fix the cause, then resume: set spec.paused to false and annotate "
            f"{RESUME_ANNOTATION}=<anything> (or run `antidote resume {name}`).")


def poison_summary(counts: Counts, last: LastPoison | None) -> str:
    parts = [f"{n} {k}" for k, n in (("moved", counts.moved), ("rejected", counts.rejected),
                                     ("dropped", counts.dropped)) if n]
    text = f"{counts.poisoned} message(s) got a disposition ({', '.join(parts)})"
    if last is not None:
        err = f", {last.error_class}" if last.error_class else ""
        text += (f"; last at {last.time.isoformat().replace('+00:00', 'Z')}: {last.topic}/"
                 f"{last.partition}/{last.offset} ({last.reason}{err})")
    return text
