"""The demo's ledger check: every produced report reached exactly one place."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Balance:
    produced: int
    processed: int  # reports in the sink topic
    quarantined: int  # reports in the poison topic
    missing: list[str] = field(default_factory=list)  # produced, found nowhere
    twice: list[str] = field(default_factory=list)  # found more than once
    unknown: list[str] = field(default_factory=list)  # found, never produced

    @property
    def ok(self) -> bool:
        return not (self.missing or self.twice or self.unknown)


def balance(produced: list[bytes], sink: list[bytes], poison: list[bytes]) -> Balance:
    """Keys produced vs keys found in the sink and poison topics (the handler keeps the key)."""
    seen = Counter(sink) + Counter(poison)
    wanted = set(produced)
    b = Balance(len(produced), len(sink), len(poison))
    b.missing = sorted(k.decode() for k in wanted - set(seen))
    b.twice = sorted(k.decode() for k, n in seen.items() if n > 1)
    b.unknown = sorted(k.decode() for k in set(seen) - wanted)
    return b
