"""A small 5-field cron matcher (UTC) for `reader.trigger.schedule`.

Standard fields `minute hour day-of-month month day-of-week` with `*`, lists, ranges,
steps (`*/15`, `1-5/2`), month and weekday names, 7 = Sunday, and the `@hourly`-style
macros. As in cron, when both day fields are restricted a day matches either. Only
`previous` is needed: the operator fires the latest slot that is due (a new dependency
for that alone is not worth it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
          "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
          "@hourly": "0 * * * *"}
MONTHS = {m: i for i, m in enumerate(
    "jan feb mar apr may jun jul aug sep oct nov dec".split(), start=1)}
DAYS = {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())}
FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (("minute", 0, 59, {}), ("hour", 0, 23, {}), ("day of month", 1, 31, {}),
          ("month", 1, 12, MONTHS), ("day of week", 0, 7, DAYS))


class CronError(ValueError):
    pass


@dataclass(frozen=True)
class Cron:
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    days_star: bool
    weekdays_star: bool

    def day_matches(self, d: datetime) -> bool:
        if d.month not in self.months:
            return False
        dom = d.day in self.days
        dow = (d.isoweekday() % 7) in self.weekdays
        if self.days_star or self.weekdays_star:
            return dom and dow
        return dom or dow  # cron: both restricted -> either

    def matches(self, t: datetime) -> bool:
        return t.minute in self.minutes and t.hour in self.hours and self.day_matches(t)

    def previous(self, now: datetime, horizon_days: int = 366 * 4) -> datetime | None:
        """The latest matching minute at or before `now` (UTC), or None within the horizon."""
        now = now.astimezone(timezone.utc).replace(second=0, microsecond=0)
        day = now.replace(hour=0, minute=0)
        for back in range(horizon_days + 1):
            d = day - timedelta(days=back)
            if not self.day_matches(d):
                continue
            for h in sorted(self.hours, reverse=True):
                for m in sorted(self.minutes, reverse=True):
                    t = d.replace(hour=h, minute=m)
                    if t <= now:
                        return t
        return None


def _value(text: str, name: str, names: dict[str, int]) -> int:
    low = text.lower()
    if low in names:
        return names[low]
    if not text.isdigit():
        raise CronError(f"{name}: {text!r} is not a number" + (" or a name" if names else ""))
    return int(text)


def _field(text: str, name: str, lo: int, hi: int, names: dict[str, int]) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split(","):
        rng, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise CronError(f"{name}: step {step_text!r} must be a positive number")
            step = int(step_text)
        if rng == "*":
            a, b = lo, hi
        elif "-" in rng:
            left, _, right = rng.partition("-")
            a, b = _value(left, name, names), _value(right, name, names)
        else:
            a = b = _value(rng, name, names)
            if step_text:
                b = hi  # `5/10`: from 5 on, every 10
        if not (lo <= a <= hi and lo <= b <= hi) or a > b:
            raise CronError(f"{name}: {part!r} is outside {lo}-{hi}")
        out.update(range(a, b + 1, step))
    return frozenset(out)


def parse(expr: str) -> Cron:
    """Parse a cron expression; CronError names the field that is wrong."""
    text = MACROS.get(expr.strip().lower(), expr.strip())
    parts = text.split()
    if len(parts) != 5:
        raise CronError(f"{expr!r}: expected 5 fields (minute hour day-of-month month "
                        f"day-of-week) or a macro such as @hourly")
    sets = [_field(p, name, lo, hi, names) for p, (name, lo, hi, names) in zip(parts, FIELDS)]
    weekdays = frozenset(0 if d == 7 else d for d in sets[4])
    return Cron(minutes=sets[0], hours=sets[1], days=sets[2], months=sets[3], weekdays=weekdays,
                days_star=parts[2].startswith("*"), weekdays_star=parts[4].startswith("*"))
