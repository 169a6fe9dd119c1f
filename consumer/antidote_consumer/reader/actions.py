"""What a reader run does with a chunk of poison messages (part of `run._Run`): redrive them
(in one transaction, else one by one), dispose of those that cannot be redriven, archive
them. A mixin so the run reads as read -> settle -> commit, with each action's details here."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from antidote_consumer.kafka import headers as h
from antidote_consumer.kafka.topics import partitions_of

from .rules import Plan, Progress, RateLimiter, ReaderReport, redrive_refusal

if TYPE_CHECKING:
    from antidote_api.semantics import EffectiveSettings

    from .archive import ArchiveWriter


log = logging.getLogger("antidote.reader")

READER_ERROR_CLASS = h.PREFIX + "reader.error.class"
READER_ERROR_MESSAGE = h.PREFIX + "reader.error.message"


def resolved(prog: Progress, lo: int, hi: int, keep: list[int]) -> Progress:
    """`prog` with offsets lo..hi resolved, except those in `keep`."""
    out = prog.copy()
    start = lo
    for k in sorted(x for x in keep if lo <= x <= hi):
        out.add(start, k - 1)
        start = k + 1
    out.add(start, hi)
    return out


@dataclass
class Polled:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list
    found: dict | None = None  # rules.read_fields(headers), parsed once (None: not yet)


class Stopped(Exception):
    """The reader's disposition is Fault and a message could not be handled."""


class Failed(Exception):
    """A transaction of the reader failed (the records were refused, or Kafka)."""


class Actions:
    """Mixed into run._Run, which sets what these actions use; declared here so that a type
    checker holds each use against the run's own definition."""

    s: EffectiveSettings
    p: Plan
    topic: str
    report: ReaderReport
    admin: Any
    limiter: RateLimiter
    archive: ArchiveWriter | None
    progress: dict[int, Progress]
    pending: str | None
    _redactor: Any = None  # worker.redact's, made when first needed (it may read the HMAC key)

    if TYPE_CHECKING:
        def _target(self, m: Polled, part: int) -> tuple[str, int | None, list, str]: ...

        def _commit(self, progress: dict[int, Progress], **pending) -> None: ...

        def _transaction(self, records: list, progress: dict[int, Progress], **pending) -> None: ...

        def _ensure(self, topic: str, like: str | None, config: dict | None = None) -> None: ...

    def _refused(self, part: int, m: Polled) -> bool:
        """Whether Redrive refuses `m` (its payload was redacted or dropped: rules.redrive_refusal);
        counted and said, one line naming the record. It stays in the topic it is read from."""
        why = redrive_refusal(self.topic, part, m.offset, m.headers, m.found)
        if why is None:
            return False
        self.report.refused += 1
        log.error("%s", why)
        return True

    def _quarantined(self, value: bytes | None, headers: list) -> tuple[bytes | None, list]:
        """(value, headers) of a record the reader writes to the dead-letter topic or to an
        archive under the policy's quarantine.payload: a record quarantined while the policy
        kept payloads is redacted now; one redacted already is left as it is."""
        if self.s.quarantine is None:
            return value, list(headers)
        if self._redactor is None:
            from antidote_consumer.worker.redact import redactor_for

            self._redactor = redactor_for(self.s)
        done = self._redactor(value, headers)
        return done.value, list(headers) + done.headers

    def _redrive(self, part: int, act: list[Polled], lo: int, hi: int, keep: list[int]) -> None:
        prog = self.progress[part]
        targets = [self._target(m, part) for m in act]
        try:
            self._transaction(
                [(t, q, m.key, m.value, hd) for m, (t, q, hd, _) in zip(act, targets)],
                {part: resolved(prog, lo, hi, keep)})
        except Failed as err:
            log.warning("%s/%d: a chunk of %d failed (%s); one message at a time", self.topic,
                        part, len(act), err)
            self._one_by_one(part, act, targets, lo, hi, keep)
            return
        for _, _, _, counter in targets:
            setattr(self.report, counter, getattr(self.report, counter) + 1)

    def _one_by_one(self, part, act, targets, lo, hi, keep) -> None:
        cursor = lo
        for m, (t, q, hd, counter) in zip(act, targets):
            upto = resolved(self.progress[part], cursor, m.offset, keep)
            last_err = None
            for _ in range(self.p.retries + 1):
                try:
                    self._transaction([(t, q, m.key, m.value, hd)], {part: upto})
                    setattr(self.report, counter, getattr(self.report, counter) + 1)
                    last_err = None
                    break
                except Failed as err:
                    last_err = err
            if last_err is not None:
                self._dispose(part, [m], upto, last_err)
            cursor = m.offset + 1
        self._commit({part: resolved(self.progress[part], cursor, hi, keep)})

    def _dispose(self, part: int, failed: list[Polled], upto: Progress, err: Exception) -> None:
        """The reader's disposition for messages its action could not handle."""
        r, d = self.report, self.p.disposition
        r.failed += len(failed)
        if d == "Fault":
            r.faultAt = f"{self.topic}/{part}/{failed[0].offset}"
            log.error("reader stopped (Fault) at %s: %s", r.faultAt, err)
            raise Stopped(r.faultAt)
        if d == "Drop":
            self._commit({part: upto})
            r.dropped += len(failed)
            log.warning("%d message(s) dropped after the reader's retries, last %s/%d/%d: %s",
                        len(failed), self.topic, part, failed[-1].offset, err)
            return
        dlq = self.s.topics.dlq
        self._ensure(dlq, self.topic)  # what fit in the topic read fits there too
        why = [(READER_ERROR_CLASS, str(self.p.action).encode()),
               (READER_ERROR_MESSAGE, h.truncate(str(err), h.MAX_MESSAGE).encode("utf-8", "replace"))]
        n = partitions_of(self.admin, dlq)
        try:
            self._transaction([(dlq, part % n, m.key, *self._with(self._quarantined(m.value, m.headers), why))
                               for m in failed], {part: upto})
        except Failed as dlq_err:  # nowhere to put it: stop rather than lose it
            r.faultAt = f"{self.topic}/{part}/{failed[0].offset}"
            log.error("reader stopped at %s: the dead-letter topic %s refused it too: %s",
                      r.faultAt, dlq, dlq_err)
            raise Stopped(r.faultAt) from dlq_err
        r.rejected += len(failed)
        log.warning("%d message(s) rejected to %s after the reader's retries: %s", len(failed), dlq, err)

    def _archive(self, part: int, act: list[Polled], lo: int, hi: int, keep: list[int]) -> None:
        from .archive import row, slice_name

        prog = self.progress[part]
        done = resolved(prog, lo, hi, keep)
        if not act:
            self._commit({part: done})
            return
        for _ in act:
            self.limiter.acquire()
        name = slice_name(self.topic, part, act[0].offset, act[-1].offset)
        rows = [row(self.topic, part, m.offset, m.timestamp, m.key, *self._quarantined(m.value, m.headers))
                for m in act]
        self._commit({}, pending=name)  # so a killed run's files are found and removed
        archive = self.archive
        assert archive is not None  # opened by the run for action Archive
        last_err = None
        for _ in range(self.p.retries + 1):
            try:
                archive.write(name, rows)
                last_err = None
                break
            except Exception as err:  # noqa: BLE001 - the reader's own retries, then its disposition
                last_err = err
                log.warning("archive slice %s failed: %s", name, str(err).splitlines()[0][:300])
        if last_err is None:
            self._commit({part: done}, pending=None)
            self.report.archived += len(act)
            return
        try:
            archive.discard(name)
        except Exception:  # noqa: BLE001
            log.exception("could not remove the failed archive slice %s", name)
        self.pending = name  # still pending in the ledger until a disposition commits
        self._dispose(part, act, done, last_err)
        self._commit({}, pending=None)

    @staticmethod
    def _with(record: tuple[bytes | None, list], more: list) -> tuple[bytes | None, list]:
        value, headers = record
        return value, headers + more

    # --- committing -----------------------------------------------------------------------
