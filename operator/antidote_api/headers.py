"""Names of the `antidote.*` headers on retried and quarantined records: the consumer writes
them, the reader and the on-call commands read them (docs/topics.md lists their meaning)."""

from __future__ import annotations

PREFIX = "antidote."
ERROR_CLASS = PREFIX + "error.class"
ERROR_MESSAGE = PREFIX + "error.message"
ERROR_STACK = PREFIX + "error.stack"
REASON = PREFIX + "reason"
DISPOSITION = PREFIX + "disposition"
ATTEMPTS = PREFIX + "attempts"
CYCLE = PREFIX + "cycle"
DUE = PREFIX + "due"
ORIGINAL_TOPIC = PREFIX + "original.topic"
ORIGINAL_PARTITION = PREFIX + "original.partition"
ORIGINAL_OFFSET = PREFIX + "original.offset"
ORIGINAL_TIMESTAMP = PREFIX + "original.timestamp"
FIRST_FAILURE = PREFIX + "failure.first"
LAST_FAILURE = PREFIX + "failure.last"
CONSUMER = PREFIX + "consumer"
POLICY = PREFIX + "policy"
# Set by the poison-queue reader on a redriven message; it travels with the message (through
# retry cycles back into the poison topic) so the reader's loop guard can count redrives.
REDRIVE_COUNT = PREFIX + "redrive.count"
# On a record parked in a retry topic only to keep its key's order (QueueConsumer spec.ordering
# Key): it was not attempted; it runs once the message of its key ahead has its outcome.
HELD = PREFIX + "held"
# Set by `antidote skip` on the record it moved past a Fault: when (epoch ms).
SKIPPED_AT = PREFIX + "skipped.at"
