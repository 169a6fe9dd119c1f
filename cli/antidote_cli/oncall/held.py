"""`antidote inspect`'s view of what ordering Key holds: the consumer's ledger (read, never
written) says, per source partition and key, which message is ahead in a retry cycle and
how many are held behind it (docs/consumer.md, "Key order")."""

from __future__ import annotations

import base64
from dataclasses import asdict, dataclass

from antidote_api.names import ledger_names


@dataclass
class HeldKey:
    partition: int
    key: str  # printable: UTF-8 text, else base64 prefixed "b64:"
    front: int | None  # source offset of the message ahead, while it waits for a retry
    cycle: int  # where it waits (or last waited)
    held: int
    first_held: int | None
    last_held: int | None


def _printable(text: str) -> str:
    raw = base64.b64decode(text)
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        return f"b64:{text}"
    return decoded if decoded.isprintable() else f"b64:{text}"


def held_keys(by_partition: dict[str, dict]) -> list[HeldKey]:
    """The ledger's chains (LedgerState.held, wire form) as rows, by partition then most held."""
    rows = []
    for p, chains in by_partition.items():
        for key, c in chains.items():
            held = [m[0] for m in c.get("held") or ()]
            rows.append(HeldKey(int(p), _printable(key), c.get("front"), int(c.get("cycle", 0)),
                                len(held), held[0] if held else None, held[-1] if held else None))
    return sorted(rows, key=lambda r: (r.partition, -r.held, r.key))


def read_held(settings, bootstrap: str, props: dict[str, str]) -> list[HeldKey]:
    from antidote_consumer.driver.ledger import load_state

    return held_keys(load_state(bootstrap, ledger_names(settings).topic, props).held)


def render_held(rows: list[HeldKey], limit: int) -> list[str]:
    total = sum(r.held for r in rows)
    out = [f"ordering Key: {total} message(s) held behind {len(rows)} key(s)"]
    if rows:
        out.append(f"{'PART':<5} {'KEY':<24} {'AHEAD':<9} {'CYCLE':<5} {'HELD':<5} OFFSETS")
        for r in rows[:limit]:
            ahead = str(r.front) if r.front is not None else "-"
            span = f"{r.first_held}..{r.last_held}" if r.held else "-"
            out.append(f"{r.partition:<5} {r.key[:24]:<24} {ahead:<9} {r.cycle:<5} {r.held:<5} {span}")
        if len(rows) > limit:
            out.append(f"{len(rows) - limit} more key(s) not shown (--limit {limit})")
    return out


def held_json(rows: list[HeldKey]) -> dict:
    return {"messages": sum(r.held for r in rows), "keys": [asdict(r) for r in rows]}
