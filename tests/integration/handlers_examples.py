"""The handler test_s3_examples.py puts in place of examples/queueconsumer-full.yaml's
`shop.orders.pipeline:enrich`: an order (JSON, as the example's policy validates it) comes
back with what the example's `env` and `envFrom` gave the process that ran it, so the test
sees in the sink that they arrived. An order whose `orderId` is "refused" raises ValueError,
which the example's policy lists in `nonRetryable`."""

from __future__ import annotations

import json
import os

# The example's spec.env (DB_PASSWORD from a Secret, REGION from a ConfigMap, LOG_LEVEL a
# value) and spec.envFrom (the ConfigMap's keys, prefix CFG_).
ENV = ("DB_PASSWORD", "REGION", "LOG_LEVEL", "CFG_region")


def enrich(msg):
    order = json.loads(msg.value)
    if order["orderId"] == "refused":
        raise ValueError(f"order {order['orderId']} refused")
    return json.dumps({**order, "env": {name: os.environ.get(name) for name in ENV}}).encode()
