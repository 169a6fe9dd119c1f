"""The orders handler: one call per Kafka message (docs/consumer.md, "The handler contract").

The module is imported once per Python worker and the handler then called for many messages,
so clients (HTTP sessions, database pools) are made once, lazily, on the first call that
needs them, never per message. Configuration comes from the environment (the QueueConsumer's
`spec.env`).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

from antidote import NonRetryable, Retry

# Made on first use and kept for the worker's life: one per Python worker process.
_opener: urllib.request.OpenerDirector | None = None


def _client() -> urllib.request.OpenerDirector:
    global _opener
    if _opener is None:
        _opener = urllib.request.build_opener()
    return _opener


class InvalidOrder(Exception):
    """The order itself is wrong: retrying cannot help (listed in the policy's nonRetryable)."""


def price(order: dict) -> dict:
    """The order priced: pure, so the unit tests need no service."""
    items = order.get("items")
    if not items:
        raise InvalidOrder(f"order {order.get('id')!r} has no items")
    total = sum(int(i["quantity"]) * int(i["unitCents"]) for i in items)
    if total <= 0:
        raise InvalidOrder(f"order {order.get('id')!r} totals {total} cents")
    return {"id": order["id"], "totalCents": total, "currency": order.get("currency", "EUR")}


def handle(message):
    """Price an order; tell the stock service when `STOCK_URL` is set."""
    try:
        order = json.loads(message.value)
    except (TypeError, ValueError) as err:
        raise NonRetryable(f"not a JSON order: {err}") from err
    priced = price(order)
    url = os.environ.get("STOCK_URL")
    if url:
        body = json.dumps({"id": priced["id"]}).encode()
        request = urllib.request.Request(f"{url}/reserve", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with _client().open(request, timeout=5):  # a short timeout: see docs/node.md
                pass
        except urllib.error.HTTPError as err:
            if err.code == 429:  # the stock service asks us to slow down: the next cycle
                wait = err.headers.get("Retry-After", "")
                raise Retry(after=float(wait) if wait.isdigit() else None) from err
            raise
    return priced  # a dict goes to the sink as JSON
