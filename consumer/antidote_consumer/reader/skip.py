"""`antidote skip`: the administrator's "remove the poison message" of Service Broker.

A consumer with disposition Fault stops at a poison message and leaves it, and everything
after it, unconsumed. Skipping moves that one record to the poison topic (key and value
byte-identical, the failure in `antidote.*` headers) and records it in the consumer's
ledger, in one Kafka transaction; on resume the consumer passes over it and goes on.
The consumer must be stopped: taking the ledger's transactional id fences a running one.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition

from antidote_api.names import ledger_names
from antidote_api.semantics import EffectiveSettings
from antidote_consumer.driver.ledger import Ledger, load_state
from antidote_consumer.kafka import headers as h
from antidote_consumer.kafka.native_headers import with_native
from antidote_consumer.kafka.one_line import ledger_edit
from antidote_consumer.kafka.topics import max_message_bytes


class SkipError(Exception):
    """Nothing to skip, or the record cannot be read; the message says which."""


@dataclass
class Skipped:
    topic: str  # where the record was read (the source or a retry topic)
    partition: int
    offset: int
    origin: str  # original topic/partition/offset
    reason: str
    error_class: str | None
    poison_topic: str
    dry_run: bool


def _read_one(bootstrap: str, topic: str, partition: int, offset: int, conf: dict | None):
    c = Consumer({**(conf or {}), "bootstrap.servers": bootstrap, "group.id": "antidote-skip",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        c.assign([TopicPartition(topic, partition, offset)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = c.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                raise SkipError(f"reading {topic}/{partition}/{offset}: {msg.error()}")
            if msg.offset() == offset:
                return msg
            break
        raise SkipError(f"record {topic}/{partition}/{offset} is not in Kafka any more "
                        "(retention?); nothing was changed")
    finally:
        c.close()


def skip_fault(s: EffectiveSettings, *, dry_run: bool = False, conf: dict | None = None) -> Skipped:
    """Raises SkipError, one line, for everything that is not a bug: nothing to skip,
    credentials that cannot be used, Kafka unreachable or refusing a call."""
    return ledger_edit(s, conf, SkipError, "skip",
                       lambda bootstrap, conf: _skip(s, bootstrap, conf, dry_run))


def _skip(s: EffectiveSettings, bootstrap: str, conf: dict, dry_run: bool) -> Skipped:
    names = ledger_names(s)
    topic = names.topic
    state = load_state(bootstrap, topic, conf)
    if state.disabled == "Fault" and not state.fault and state.skipped:
        where = "/".join(state.skipped[-1].rsplit(":", 2))
        resume = f"antidote resume {s.consumer}" + (f" -n {s.namespace}" if s.namespace else "")
        raise SkipError(f"the message consumer {s.consumer!r} stopped at ({where}) was skipped "
                        f"already; nothing was changed. Next: {resume}")
    if state.disabled != "Fault" or not state.fault:
        raise SkipError(f"consumer {s.consumer!r} is not stopped at a poison message (its ledger "
                        f"says: {'disabled for ' + state.disabled if state.disabled else 'running or idle'}); "
                        "skip applies to disposition Fault only")
    f = state.fault
    msg = _read_one(bootstrap, f["topic"], f["partition"], f["offset"], conf)
    hdrs = list(msg.headers() or [])
    if f["topic"] == s.source.topic:
        origin = h.Origin(f["topic"], f["partition"], f["offset"], msg.timestamp()[1])
        user = h.source_headers(hdrs)  # as the consumer takes a source record: none of ours
    elif (st := h.retry_state_or_none(hdrs)) is not None:  # stopped on a retry cycle
        origin = st.origin
        user = h.user_headers(hdrs)
    else:  # a malformed retry record (quarantined as invalid): kept as read
        origin = h.Origin(f["topic"], f["partition"], f["offset"], msg.timestamp()[1])
        user = hdrs
    out = Skipped(f["topic"], f["partition"], f["offset"],
                  f"{origin.topic}/{origin.partition}/{origin.offset}", f.get("reason") or "",
                  f.get("error_class"), s.topics.poison, dry_run)
    if dry_run:
        return out
    now = int(time.time() * 1000)
    headers = user + h.failure_headers(
        origin=origin, attempts=f.get("attempts") or 0, cycle=f.get("cycle") or 0,
        first_failure=f.get("first_failure") or now, last_failure=f.get("last_failure") or now,
        reason=f.get("reason"), error_class=f.get("error_class"), error_message=f.get("error_message"),
        stack=None, consumer=names.consumer_id, policy=s.policy, disposition="Fault") + [
        (h.SKIPPED_AT, str(now).encode())]
    ledger = Ledger(bootstrap, topic, names.transactional_id, conf)
    state = ledger.load()  # as the writer now: nothing can have changed in between
    new = copy.deepcopy(state)
    new.skipped.append(f"{f['topic']}:{f['partition']}:{f['offset']}")
    new.fault = None
    new.counts["moved"] += 1
    value, headers = _redacted(s, msg.value(), headers)  # quarantined: the policy's quarantine
    # The poison topic has the source's partition count: the record keeps its partition.
    ledger.commit(new, [(s.topics.poison, origin.partition, msg.key(), value,
                         _fitted(msg, value, headers, s.topics.poison, bootstrap, conf,
                                 s.native_headers, s.handler))])
    return out


def _redacted(s: EffectiveSettings, value, headers: list) -> tuple:
    """The value and headers under the policy's quarantine.payload (worker.redact), or
    SkipError when the HMAC key or the registry it needs cannot be read: nothing is moved."""
    from antidote_consumer.worker.redact import RedactionKeyError, redactor_for
    from antidote_consumer.worker.registry import RegistryUnavailable

    try:
        red = redactor_for(s)
        if red is None:
            return value, headers
        done = red(value)  # a source record: any antidote.redacted it carries is not Antidote's
    except (RedactionKeyError, RegistryUnavailable) as err:
        raise SkipError(f"the message cannot be redacted as spec.quarantine says: {err}; run skip "
                        "where that is readable (the driver's pod). Nothing was changed") from None
    return done.value, headers + done.headers


def _fitted(msg, value, headers: list, topic: str, bootstrap: str, conf: dict, native: list[str],
            handler: str) -> list:
    """`headers` shortened to fit `topic` (see headers.fit_record), or SkipError; with the
    policy's Kafka-native headers (native_headers.py), as every quarantined record."""
    from confluent_kafka.admin import AdminClient

    limit = max_message_bytes(AdminClient({**conf, "bootstrap.servers": bootstrap}), topic)
    fitted = h.fit_record(msg.key(), value, headers, limit)
    if fitted is None:
        raise SkipError(f"the message at {msg.topic()}/{msg.partition()}/{msg.offset()} does not fit "
                        f"{topic} (max.message.bytes {limit}); raise that, then skip again. "
                        "Nothing was changed")
    return with_native(msg.key(), value, fitted, native, handler, limit) if native else fitted
