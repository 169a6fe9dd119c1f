"""Names of the Kafka clients Antidote's programs share: one definition for the consumer,
the reader, `antidote skip` and the on-call CLI.

Transactional ids and group ids join namespace and name with "/", which neither may
contain, so `team-a/orders` and `team/a-orders` never fence each other or share offsets."""

from __future__ import annotations


def transactional_id(namespace: str, name: str, role: str = "") -> str:
    """The one writer of a consumer's ledger (`role` ""), or of its reader's (`reader-poison`,
    `reader-dlq`): a second producer with this id fences the first."""
    return "/".join(["antidote" + (f"-{role}" if role else ""), namespace or "-", name or "-"])


def reader_group_id(namespace: str, name: str) -> str:
    """The poison-queue reader's consumer group (its offsets show what it resolved)."""
    return transactional_id(namespace, name, "reader")
