"""Expense reports, in the spirit of the Service Broker and WCF samples: the handler that
`antidote demo` runs, and the stream it produces.

- A report without an employee id is invalid: the policy's JSON schema stops it before the
  handler (reason `validation`, no retries).
- A report charged to a cost center that does not exist always fails (LookupError): it is
  retried, goes through a retry cycle, and is quarantined (reason `max-attempts`).
- While the "accounts service" is down every report fails with ConnectionError: a
  systemic failure, so the queue is disabled and nothing is quarantined.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

UNKNOWN_COST_CENTER = "CC-0000"
# The demo creates this file to take the accounts service down, and removes it to fix it.
ACCOUNTS_DOWN_ENV = "ANTIDOTE_DEMO_ACCOUNTS_DOWN_FILE"

COST_CENTERS = ("CC-1001", "CC-1002", "CC-2001", "CC-3005")
CATEGORIES = ("travel", "meals", "lodging", "books", "software")


def approve(msg) -> bytes:
    flag = os.environ.get(ACCOUNTS_DOWN_ENV)
    if flag and Path(flag).exists():
        raise ConnectionError("accounts service unavailable (connection refused)")
    report = json.loads(msg.value)
    if report["costCenter"] == UNKNOWN_COST_CENTER:
        raise LookupError(f"cost center {report['costCenter']} does not exist")
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
        doc = {"reportId": f"R-{i:05d}", "employeeId": f"E-{rng.randrange(100, 999)}",
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
