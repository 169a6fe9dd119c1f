"""Expense reports, in the spirit of the Service Broker and WCF samples: the handler that
`antidote demo` runs, and the stream it produces.

- A report without an employee id is invalid: the policy's JSON schema stops it before the
  handler (reason `validation`, no retries).
- A report charged to a cost center that does not exist always fails (LookupError): it is
  retried, goes through a retry cycle, and is quarantined (reason `max-attempts`).
- While the accounts service (examples/accounts.py, asked for every report) is down every
  report fails with ConnectionError: a systemic failure, so the queue is disabled and
  nothing is quarantined.
"""

from __future__ import annotations

import json
import os
import random
import urllib.error
import urllib.parse
import urllib.request
from typing import Any
from dataclasses import dataclass

from . import accounts

UNKNOWN_COST_CENTER = "CC-0000"
# Where the accounts service answers (examples/accounts.py). Default: the Service `accounts`
# in the consumer's own namespace, as the demo runs it on the node; the dev runner's local
# processes get a loopback URL in this variable.
ACCOUNTS_URL_ENV = "ANTIDOTE_DEMO_ACCOUNTS_URL"
DEFAULT_ACCOUNTS_URL = f"http://accounts:{accounts.PORT}"

COST_CENTERS = accounts.COST_CENTERS
CATEGORIES = ("travel", "meals", "lodging", "books", "software")
# No proxy from the environment: the accounts service is on the cluster's own network.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def check_cost_center(cost_center: str) -> None:
    """Asks the accounts service. LookupError if it does not know the cost center (the
    message's own fault: retried, then quarantined); ConnectionError if the service cannot
    be reached (everyone's fault: the failure ratio disables the queue)."""
    base = os.environ.get(ACCOUNTS_URL_ENV) or DEFAULT_ACCOUNTS_URL
    try:
        with _OPENER.open(f"{base}/cost-centers/{urllib.parse.quote(cost_center)}", timeout=5) as r:
            r.read()
    except urllib.error.HTTPError as err:
        if err.code == 404:
            raise LookupError(f"cost center {cost_center} does not exist") from None
        raise ConnectionError(f"accounts service answered HTTP {err.code}") from None
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise ConnectionError(f"accounts service unavailable ({reason})") from None


def approve(msg) -> bytes:
    report = json.loads(msg.value)
    check_cost_center(report["costCenter"])
    limit = 500.0 if report["category"] == "meals" else 5000.0
    decision = "approved" if report["amount"] <= limit else "needs-review"
    return json.dumps({"reportId": report["reportId"], "employeeId": report["employeeId"],
                       "amount": report["amount"], "decision": decision},
                      separators=(",", ":")).encode()


POLICY_SCHEMA = {
    "type": "object",
    "required": ["reportId", "employeeId", "amount", "costCenter", "category"],
    "properties": {"reportId": {"type": "string"}, "employeeId": {"type": "string", "minLength": 1},
                   "amount": {"type": "number", "minimum": 0}, "costCenter": {"type": "string"},
                   "category": {"type": "string"}},
}


@dataclass(frozen=True)
class Report:
    key: bytes
    value: bytes
    fate: str  # "processed", "invalid" (validation) or "unknown-cost-center" (max-attempts)


def reports(n: int, *, start: int = 0, invalid_every: int = 37, unknown_every: int = 53,
            seed: int = 7) -> list[Report]:
    """`n` reports numbered from `start`; every `invalid_every`-th lacks its employee id and
    every `unknown_every`-th names a cost center that does not exist."""
    rng = random.Random(seed + start)
    out = []
    for i in range(start, start + n):
        doc: dict[str, Any] = {"reportId": f"R-{i:05d}", "employeeId": f"E-{rng.randrange(100, 999)}",
               "amount": round(rng.uniform(5, 900), 2), "costCenter": rng.choice(COST_CENTERS),
               "category": rng.choice(CATEGORIES)}
        fate = "processed"
        if i % invalid_every == invalid_every - 1:
            del doc["employeeId"]
            fate = "invalid"
        elif i % unknown_every == unknown_every - 1:
            doc["costCenter"] = UNKNOWN_COST_CENTER
            fate = "unknown-cost-center"
        out.append(Report(doc["reportId"].encode(), json.dumps(doc).encode(), fate))
    return out
