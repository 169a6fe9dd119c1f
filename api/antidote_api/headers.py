"""Names of the `antidote.*` headers on retried and quarantined records: the consumer writes
them, the reader and the on-call commands read them (docs/consumer.md, "Outcomes", lists their meaning)."""

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
# On a record a PoisonPolicy route sent (spec.routes): the matching route's index, 0-based,
# as in `routes[0]`; absent when the policy's own disposition applied.
ROUTE = PREFIX + "route"
# Set by `antidote skip` on the record it moved past a Fault: when (epoch ms).
SKIPPED_AT = PREFIX + "skipped.at"

# Kafka-native error headers, written beside Antidote's on quarantined records when the
# PoisonPolicy's spec.nativeHeaders names their set, so Kafka's own dead-letter tooling reads
# them. Names as upstream defines them (docs/consumer.md says where): Kafka Connect's
# DeadLetterQueueReporter ...
CONNECT_PREFIX = "__connect.errors."
CONNECT_TOPIC = CONNECT_PREFIX + "topic"
CONNECT_PARTITION = CONNECT_PREFIX + "partition"
CONNECT_OFFSET = CONNECT_PREFIX + "offset"
CONNECT_CONNECTOR = CONNECT_PREFIX + "connector.name"
CONNECT_TASK = CONNECT_PREFIX + "task.id"
CONNECT_STAGE = CONNECT_PREFIX + "stage"
CONNECT_CLASS = CONNECT_PREFIX + "class.name"
CONNECT_EXCEPTION = CONNECT_PREFIX + "exception.class.name"
CONNECT_MESSAGE = CONNECT_PREFIX + "exception.message"
CONNECT_STACK = CONNECT_PREFIX + "exception.stacktrace"
# ... and the share-group dead-letter queue of KIP-1191 (ShareGroupDLQStateManager, Kafka 4.4.0).
DLQ_PREFIX = "__dlq.errors."
DLQ_TOPIC = DLQ_PREFIX + "topic"
DLQ_PARTITION = DLQ_PREFIX + "partition"
DLQ_OFFSET = DLQ_PREFIX + "offset"
DLQ_GROUP = DLQ_PREFIX + "group"
DLQ_DELIVERY_COUNT = DLQ_PREFIX + "delivery.count"
DLQ_MESSAGE = DLQ_PREFIX + "message"
# spec.nativeHeaders' values (types.NativeHeaderSet) and the prefix of each set.
CONNECT = "Connect"
SHARE_GROUP = "ShareGroup"
NATIVE_SETS = {CONNECT: CONNECT_PREFIX, SHARE_GROUP: DLQ_PREFIX}
# On a poison or dead-letter record whose payload the PoisonPolicy's quarantine.payload
# changed (docs/consumer.md, "Redaction"): `Redact` (fields masked or hashed) or `Drop` (the
# value removed; also a Redact whose value could not be read), ...
REDACTED = PREFIX + "redacted"
# ... the field paths of quarantine.redact that matched, as a JSON array (Redact) ...
REDACTED_PATHS = PREFIX + "redacted.paths"
# ... and why a Redact removed the whole value instead (it could not be parsed or re-encoded).
REDACTED_REASON = PREFIX + "redacted.reason"
