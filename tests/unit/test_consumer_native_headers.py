"""Kafka-native error headers (spec.nativeHeaders): names as upstream has them, values from
the record's own antidote.* headers, replaced on a second quarantine, giving way to the size limit."""

from __future__ import annotations

import pytest

from antidote_consumer.kafka import headers as h
from antidote_consumer.kafka import native_headers as n

ORIGIN = h.Origin("orders", 3, 1234, 1_700_000_000_000)


def antidote_headers(reason="max-attempts", error_class="ValueError", message="bad amount",
                     stack="Traceback ...\nValueError: bad amount", attempts=9):
    return [("trace", b"t1")] + h.failure_headers(
        origin=ORIGIN, attempts=attempts, cycle=2, first_failure=1, last_failure=2, reason=reason,
        error_class=error_class, error_message=message, stack=stack, consumer="shop/orders",
        policy="strict", disposition="Move")


def as_dict(hdrs):
    return {k: v for k, v in hdrs}


CONNECT = {  # Kafka Connect's DLQ headers (errors.deadletterqueue.context.headers.enable)
    "topic": b"orders", "partition": b"3", "offset": b"1234", "connector.name": b"shop/orders",
    "task.id": b"0", "stage": b"TASK_PUT", "class.name": b"shop.orders:handle",
    "exception.class.name": b"ValueError", "exception.message": b"bad amount",
    "exception.stacktrace": b"Traceback ...\nValueError: bad amount"}
SHARE_GROUP = {  # KIP-1191's share-group DLQ headers
    "topic": b"orders", "partition": b"3", "offset": b"1234", "group": b"shop/orders",
    "delivery.count": b"9", "message": b"max-attempts: ValueError: bad amount"}


@pytest.mark.parametrize("flavour, prefix, expected, other", [
    ("Connect", "__connect.errors.", CONNECT, "__dlq."),
    ("ShareGroup", "__dlq.errors.", SHARE_GROUP, "__connect."),
])
def test_native_headers_have_their_systems_names_and_the_same_facts(flavour, prefix, expected, other) -> None:
    out = as_dict(n.with_native(b"k", b"v", antidote_headers(), [flavour], "shop.orders:handle", None))
    assert {k[len(prefix):]: v for k, v in out.items() if k.startswith(prefix)} == expected
    assert out["antidote.reason"] == b"max-attempts" and out["trace"] == b"t1"  # all kept
    assert not any(k.startswith(other) for k in out)


def test_validation_is_connects_converter_stage_and_has_no_stack() -> None:
    hdrs = antidote_headers(reason="validation", error_class="antidote.ValidationError",
                            message="value is not JSON", stack=None, attempts=0)
    out = as_dict(n.with_native(None, b"{", hdrs, ["Connect", "ShareGroup"], "m:f", None))
    assert out["__connect.errors.stage"] == b"VALUE_CONVERTER"
    assert "__connect.errors.exception.stacktrace" not in out
    assert out["__dlq.errors.delivery.count"] == b"0"


def test_no_sets_no_change() -> None:
    hdrs = antidote_headers()
    assert n.with_native(b"k", b"v", hdrs, [], "m:f", None) is hdrs


def test_a_second_quarantine_replaces_the_sets_it_writes_and_keeps_others() -> None:
    first = n.with_native(b"k", b"v", antidote_headers(message="first"), ["Connect", "ShareGroup"], "m:f", None)
    # Redriven, failed again: the user's part of the headers carries the first set.
    again = h.user_headers(first) + h.failure_headers(
        origin=ORIGIN, attempts=3, cycle=0, first_failure=1, last_failure=2, reason="non-retryable",
        error_class="antidote.NonRetryable", error_message="second", stack=None,
        consumer="shop/orders", policy="strict", disposition="Move")
    out = n.with_native(b"k", b"v", again, ["Connect"], "m:f", None)
    names = [k for k, _ in out]
    assert names.count("__connect.errors.exception.message") == 1
    assert as_dict(out)["__connect.errors.exception.message"] == b"second"
    # ShareGroup is not enabled now: the earlier set is the user's, left as it was.
    assert as_dict(out)["__dlq.errors.message"] == b"max-attempts: ValueError: first"


def test_near_the_limit_the_copies_give_way_before_anything_of_antidotes() -> None:
    hdrs = antidote_headers(message="m" * 1000, stack="s" * 4000)
    sets = ["Connect", "ShareGroup"]
    full = n.with_native(b"k", b"v", hdrs, sets, "m:f", None)
    size = h.record_size(b"k", b"v", full)
    assert n.with_native(b"k", b"v", hdrs, sets, "m:f", size) == full
    no_stack = as_dict(n.with_native(b"k", b"v", hdrs, sets, "m:f", size - 1))
    assert "__connect.errors.exception.stacktrace" not in no_stack
    assert "__connect.errors.exception.message" in no_stack
    tight = h.record_size(b"k", b"v", hdrs) + 1000  # room for the short ones only
    few = as_dict(n.with_native(b"k", b"v", hdrs, sets, "m:f", tight))
    assert "__connect.errors.exception.message" not in few and "__dlq.errors.message" not in few
    assert few["__connect.errors.offset"] == b"1234"
    assert n.with_native(b"k", b"v", hdrs, sets, "m:f", h.record_size(b"k", b"v", hdrs)) == hdrs
