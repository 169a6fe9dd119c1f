"""The rows a task ends with besides its failed messages (worker.executor.RESULT_COLUMNS):
one "summary" row (its successes, handler calls and largest record), an "end" row per
partition read, a "chains" row per source partition (ordering Key), a "waiting" row per retry
partition a planned batch stopped in, and a "settled" row per retry cycle of the retries it
wrote itself (task_settle). Pure: columns as lists, name -> list."""

from __future__ import annotations

from typing import Any

from antidote_consumer.kafka import headers as h

from .task_settle import SETTLED, Tally


def summary(fields: list[str], *, n_ok: int, n_attempts: int, largest: int, ends: dict, chains: list,
            waiting: dict, settled: Tally | None) -> dict[str, list[Any]]:
    """The end rows' columns, the settled failures' rows last (`finals`)."""
    retries = settled.rows() if settled is not None else []
    out = _summary(fields, n_ok=n_ok, n_attempts=n_attempts, largest=largest, ends=ends, chains=chains,
                   waiting=waiting, settled=retries)
    for reason, disposition, n, signals, last in settled.final_rows() if settled is not None else ():
        for name in fields:
            out[name].append(None)
        # n in n_ok, the systemic signals in n_attempts; the last one's error class and origin
        # (the last-poison gauge) on its group's row.
        origin = last.origin if last is not None else None
        for name, value in (("kind", SETTLED), ("reason", reason), ("disposition", disposition), ("n_ok", n),
                            ("n_attempts", signals), ("error_class", last.error_class if last else None),
                            *(zip(("otopic", "opartition", "ooffset", "ots"), origin) if origin else ())):
            out[name][-1] = value
    return out


def _summary(fields: list[str], *, n_ok: int, n_attempts: int, largest: int, ends: dict, chains: list,
             waiting: dict, settled: list[tuple[int, int, int | None, int]]) -> dict[str, list[Any]]:
    """The end rows' columns. `settled`: (cycle, n, earliest due, capped) (task_settle.Tally)."""
    n = 1 + len(ends) + len(chains) + len(waiting) + len(settled)
    out: dict[str, list[Any]] = {name: [None] * n for name in fields}
    k = len(settled)
    out.update(kind=["summary"] + ["end"] * len(ends) + ["chains"] * len(chains) + ["waiting"] * len(waiting)
               + [SETTLED] * k,
               n_ok=[n_ok] + [0] * (n - 1 - k) + [m for _, m, _, _ in settled],
               n_attempts=[n_attempts] + [0] * (n - 1),
               largest=[largest] + [None] * (n - 1),
               topic=[None] + [t for t, _ in ends] + [None] * len(chains) + [t for t, _ in waiting] + [None] * k,
               partition=[None] + [p for _, p in ends] + [p for p, _ in chains] + [p for _, p in waiting]
               + [None] * k,
               offset=[None] + list(ends.values()) + [None] * len(chains) + [o for o, _ in waiting.values()]
               + [None] * k,
               cycle=[None] * (n - k) + [c for c, _, _, _ in settled],
               retry_after=[None] * (n - k) + [capped for _, _, _, capped in settled],
               error_message=[None] * (1 + len(ends)) + [c for _, c in chains] + [None] * (len(waiting) + k),
               last_failure=[None] * (n - len(waiting) - k) + [d for _, d in waiting.values()]
               + [due for _, _, due, _ in settled])
    return out


def row(kind, key, value, headers, origin: h.Origin, topic, partition, offset, attempts, cycle, reason,
        error_class, error_message, stack, first, last, output, chosen=None, retry_after=None,
        route=None) -> tuple:
    # One tuple per row, in RESULT_FIELDS order, made columns once per batch sent (columns,
    # in C): a dict per row and an append to each of 25 lists was ~3.5 us a failed message.
    # Headers as (key, value) pairs: Arrow takes a tuple for a struct as it takes a dict, and
    # the local worker's rows travel to the driver as they are (pickled: no dict per header).
    return (kind, key, value, list(headers), origin.topic, origin.partition, origin.offset,
            origin.timestamp, topic, partition, offset, attempts, cycle, reason, error_class,
            error_message, stack, first, last, output, None, None, chosen, retry_after, None, route, None)


def emit(out: list[tuple], *args, **kw) -> None:
    out.append(row(*args, **kw))


def columns(out: list[tuple], fields: list[str]) -> dict[str, list]:
    """The rows gathered in `out` as columns (name -> list), the local worker's form; `out`
    is emptied for the next ones."""
    cols = zip(*out) if out else ([] for _ in fields)
    sent = {name: list(col) for name, col in zip(fields, cols)}
    out.clear()
    return sent
