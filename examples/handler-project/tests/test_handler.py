"""The handler under the policy it is deployed with (deploy/orders.yaml), without Kafka or
Spark: antidote.testing runs it as the consumer would and shows each outcome."""

from __future__ import annotations

import json
from pathlib import Path

from antidote.testing import message, run, run_all

from orders_handlers.handler import handle

POLICY = Path(__file__).resolve().parents[1] / "deploy" / "orders.yaml"
TOPIC = "orders"  # the QueueConsumer's source topic: the derived topics are named after it


def order(**fields) -> bytes:
    return json.dumps({"id": "o-1", "items": [{"quantity": 2, "unitCents": 150}], **fields}).encode()


def test_an_order_is_priced_for_the_sink() -> None:
    out = run(handle, message(order(), key="o-1", topic=TOPIC), POLICY)
    assert out.processed
    assert json.loads(out.output) == {"id": "o-1", "totalCents": 300, "currency": "EUR"}


def test_an_order_without_items_is_quarantined_at_once() -> None:
    out = run(handle, message(order(items=[]), key="o-1", topic=TOPIC), POLICY)
    # InvalidOrder is in the policy's nonRetryable: one call, then the poison topic.
    assert (out.outcome, out.reason, out.calls) == ("moved", "non-retryable", 1)
    assert out.topic == "orders.poison"
    assert out.header("antidote.error.class") == "orders_handlers.handler.InvalidOrder"


def test_a_message_that_is_not_json_is_refused_by_the_policy_before_the_handler() -> None:
    out = run(handle, message(b"{not json", topic=TOPIC), POLICY)
    assert (out.outcome, out.reason, out.calls) == ("moved", "validation", 0)


def test_an_unreachable_stock_service_is_retried_through_every_cycle(monkeypatch) -> None:
    monkeypatch.setenv("STOCK_URL", "http://127.0.0.1:9")  # nothing listens there
    passes = run_all(handle, message(order(), topic=TOPIC), POLICY)
    assert [p.outcome for p in passes] == ["retried", "retried", "moved"]
    assert [p.delay_ms for p in passes[:2]] == [60_000, 300_000]
    assert passes[-1].header("antidote.attempts") == "9"  # (2 immediate + 1) x (2 cycles + 1)
    assert passes[-1].header("antidote.reason") == "max-attempts"
