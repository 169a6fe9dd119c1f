"""Reading quarantined records (poison or dead-letter topic) for `antidote inspect`: their
`antidote.*` headers with the consumer's parsing, the reader's own filter, nothing committed."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from antidote_api import headers as hn
from antidote_api.times import format_ms
from antidote_consumer.reader.rules import Filter, epoch_ms, header_map

from .cluster import CliError

PAYLOAD_CHARS = 40  # --show-payload cuts payloads to this many characters


@dataclass
class Quarantined:
    topic: str
    partition: int
    offset: int
    origin: str  # original topic/partition/offset
    reason: str
    error_class: str
    attempts: int | None
    first_failure: str | None
    last_failure: str | None
    redrives: int
    handled: bool  # before the reader group's committed offset
    payload: str | None = None
    payload_bytes: int | None = None
    # --decode: {"value": ..., "key": ...} as the consumer decodes them, or {"error": why}
    decoded: dict[str, Any] | None = None
    # What spec.quarantine removed from the value (the antidote.redacted* headers), e.g.
    # "Redact $.card.number, $.customer.email", "Drop: value: not JSON: ..."; None when kept.
    redacted: str | None = None


def quarantined(record_topic: str, partition: int, offset: int, headers: Iterable[tuple[str, bytes | None]],
                value: bytes | None, handled: bool, show_payload: bool) -> Quarantined:
    h = header_map(headers)

    def num(key: str) -> int | None:
        try:
            return int(h[key])
        except (KeyError, ValueError):
            return None

    origin = "/".join(str(x) for x in (h.get(hn.ORIGINAL_TOPIC, "?"), h.get(hn.ORIGINAL_PARTITION, "?"),
                                       h.get(hn.ORIGINAL_OFFSET, "?")))
    payload = None
    if show_payload and value is not None:
        text = value.decode("utf-8", "replace")
        payload = text if len(text) <= PAYLOAD_CHARS else text[:PAYLOAD_CHARS - 1] + "…"
    return Quarantined(redacted=redaction(h), topic=record_topic, partition=partition, offset=offset, origin=origin,
                       reason=h.get(hn.REASON, ""), error_class=h.get(hn.ERROR_CLASS, ""),
                       attempts=num(hn.ATTEMPTS), first_failure=format_ms(h.get(hn.FIRST_FAILURE)),
                       last_failure=format_ms(h.get(hn.LAST_FAILURE)), redrives=num(hn.REDRIVE_COUNT) or 0,
                       handled=handled, payload=payload,
                       payload_bytes=None if not show_payload or value is None else len(value))


def redaction(h: Mapping[str, str]) -> str | None:
    """The antidote.redacted* headers in one line (antidote inspect), or None."""
    action = h.get(hn.REDACTED)
    if action is None:
        return None
    try:
        paths = [str(p) for p in json.loads(h.get(hn.REDACTED_PATHS) or "[]")]
    except ValueError:
        paths = [h.get(hn.REDACTED_PATHS, "")]
    if action == "Redact":
        return f"Redact {', '.join(paths)}" if paths else "Redact (no listed field in the value: kept as produced)"
    why = h.get(hn.REDACTED_REASON)
    return f"{action}: {why}" if why else action


def inspect_filter(*, error_classes: Sequence[str], reasons: Sequence[str], since: datetime | None) -> Filter:
    """`antidote inspect`'s --error-class, --reason and --since as the reader's own filter, so
    inspect shows what a drain with the same flags would take."""
    return Filter(error_classes=frozenset(error_classes) or None, reasons=frozenset(reasons) or None,
                  since_ms=epoch_ms(since) if since is not None else None)


def read_topic(bootstrap: str, topic: str, group: str, *, limit: int, show_payload: bool,
               props: Mapping[str, str], only: Filter,
               decode: Callable[[bytes | None, bytes | None], dict[str, Any]] | None = None,
               ) -> tuple[list[Quarantined], int, int]:
    """(up to `limit` matching messages, how many matched, how many the topic holds).
    Assigns partitions (no group membership, nothing committed). `decode(key, value)`: each
    shown record's decoded form (--decode)."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", **props})
    try:
        try:
            md = c.list_topics(topic, timeout=10).topics.get(topic)
        except KafkaException as err:
            raise CliError(f"cannot reach Kafka at {bootstrap}: {err.args[0].str() if err.args else err}; "
                           "pass --bootstrap-servers when the cluster's brokers are not reachable "
                           "from here") from None
        if md is None or md.error is not None:
            if md is not None and md.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                return [], 0, 0
            raise CliError(f"topic {topic}: {md.error if md else 'not found'}")
        parts = sorted(md.partitions)
        tps = [TopicPartition(topic, p) for p in parts]
        committed = {tp.partition: tp.offset for tp in c.committed(tps, timeout=10)}
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in parts}
        total = 0  # records read (offsets would count transaction markers too)
        todo = {p for p in parts if ends[p][1] > ends[p][0]}
        c.assign([TopicPartition(topic, p, ends[p][0]) for p in todo])
        out: list[Quarantined] = []
        matched = 0
        while todo:
            msg = c.poll(10)
            if msg is None:
                break  # read_committed: an open transaction holds the rest back
            problem = msg.error()
            if problem is not None:
                if problem.code() == KafkaError._PARTITION_EOF:
                    todo.discard(msg.partition())
                    continue
                raise CliError(f"reading {topic}: {problem}")
            part, offset = msg.partition(), msg.offset()
            if part is None or offset is None:  # a record has both; only an error event lacks them
                raise CliError(f"reading {topic}: a record without its partition or offset")
            total += 1
            done_upto = committed.get(part, -1)
            # As consumed, (name, value) pairs: the stub's type is also what a producer takes.
            hdrs = cast("list[tuple[str, bytes | None]]", msg.headers() or [])
            if only.matches(hdrs, msg.timestamp()[1]):
                matched += 1
                if len(out) < limit:
                    out.append(quarantined(
                        topic, part, offset, hdrs, msg.value(),
                        handled=done_upto is not None and done_upto >= 0 and offset < done_upto,
                        show_payload=show_payload))
                    if decode is not None:
                        out[-1].decoded = decode(msg.key(), msg.value())
            if offset + 1 >= ends[part][1]:
                todo.discard(part)
        return out, matched, total
    finally:
        c.close()
