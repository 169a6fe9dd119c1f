"""Where redaction applies (PoisonPolicy spec.quarantine): the poison and dead-letter records a
batch settles and the held-overflow ones carry the redacted value and its headers, retry and
held records keep the value; the settings carry the block only when it changes a payload;
the reader refuses to redrive a redacted record, naming it, and counts it; the driver's and
the reader Job's pods mount the HMAC key's Secret."""

from __future__ import annotations

import hmac
import json

from antidote_api import PoisonPolicySpec, QueueConsumerSpec, resolve
from antidote_api import headers as hn
from antidote_api.redaction import MARKER
from antidote_consumer.driver.frames import BatchResult
from antidote_consumer.driver.ledger import LedgerState
from antidote_consumer.driver.outcomes import Targets, settlement
from antidote_consumer.reader.rules import ReaderReport, read_fields, redrive_refusal
from antidote_consumer.worker.redact import Redactor
from antidote_consumer.worker.verdict import Verdict

from ..api_cases import valid_consumer
from .test_consumer_outcomes_rules import NOW, row

VALUE = json.dumps({"card": {"number": "4111111111111111"}, "name": "Ann"}).encode()
REDACT = {"payload": "Redact", "redact": [{"path": "$.card.number"}]}


def settings(quarantine=None, **policy):
    spec = QueueConsumerSpec.model_validate(valid_consumer()["spec"])
    pol = PoisonPolicySpec.model_validate({"retries": {"immediate": 0, "cycles": 2, "cycleDelay": "10s"},
                                           **({"quarantine": quarantine} if quarantine else {}), **policy})
    return resolve(spec, pol, name="c", namespace="shop")


def targets(s) -> Targets:
    red = Redactor(s.quarantine, "Json", None, None) if s.quarantine is not None else None
    return Targets(s, partitions=3, max_bytes={}, consumer_id="shop/c", redact=red)


def test_settings_carry_quarantine_only_when_it_changes_a_payload() -> None:
    assert settings().quarantine is None and settings({"payload": "Keep"}).quarantine is None
    assert "quarantine" not in settings().model_dump(exclude_none=True)  # an upgrade restarts nothing
    assert settings(REDACT).quarantine.redact[0].path == "$.card.number"


def test_poison_records_are_redacted_retry_records_keep_the_value() -> None:
    s = settings(REDACT)
    result = BatchResult(failures=[row(Verdict.FINAL, 7, value=VALUE), row(Verdict.RETRY, 8, value=VALUE),
                                   row(Verdict.HELD, 9, value=VALUE, cycle=1, last_failure=NOW + 9),
                                   row(Verdict.OVERFLOW, 10, value=VALUE, reason="held-overflow")])
    done = settlement(targets(s), LedgerState(), result, [], None, None, NOW)
    moved, retry, held, overflow = done.records
    assert moved[0] == "orders.poison" and json.loads(moved[3]) == {"card": {"number": MARKER}, "name": "Ann"}
    hdrs = dict(moved[4])
    assert hdrs[hn.REDACTED] == b"Redact" and hdrs[hn.REDACTED_PATHS] == b'["$.card.number"]'
    assert hdrs[hn.REASON] == b"max-attempts" and hdrs["user"] == b"1"  # the rest as always
    assert retry[0] == "orders.retry-1" and retry[3] == VALUE and hn.REDACTED not in dict(retry[4])
    assert held[0] == "orders.retry-1" and held[3] == VALUE and hn.REDACTED not in dict(held[4])
    assert overflow[0] == "orders.poison" and dict(overflow[4])[hn.REDACTED] == b"Redact"
    assert b"4111" not in overflow[3]


def test_dead_letter_records_and_batch_isolated_ones_too_and_drop_removes_the_value() -> None:
    s = settings({"payload": "Drop"}, disposition="Reject")
    done = settlement(targets(s), LedgerState(), BatchResult(failures=[row(Verdict.FINAL, 7, value=VALUE)]),
                      [], None, None, NOW)
    [(topic, _p, key, value, hdrs)] = done.records
    assert (topic, key, value, dict(hdrs)[hn.REDACTED]) == ("orders.dlq", b"k", None, b"Drop")


def test_keep_writes_the_value_byte_identical() -> None:
    s = settings()
    done = settlement(targets(s), LedgerState(), BatchResult(failures=[row(Verdict.FINAL, 7, value=VALUE)]),
                      [], None, None, NOW)
    assert done.records[0][3] == VALUE and hn.REDACTED not in dict(done.records[0][4])


def test_redrive_refuses_a_redacted_or_dropped_record_naming_it() -> None:
    redacted = [(hn.REDACTED, b"Redact"), (hn.REDACTED_PATHS, b'["$.card.number"]')]
    why = redrive_refusal("orders.poison", 2, 41, redacted)
    assert why == ("cannot redrive orders.poison/2/41: its payload was redacted ($.card.number masked or "
                   "hashed): it cannot be processed again; Archive or Drop it")
    assert redrive_refusal("orders.poison", 0, 1, [], read_fields(redacted)) is not None
    dropped = redrive_refusal("orders.dlq", 0, 3, [(hn.REDACTED, b"Drop")])
    assert dropped is not None and "orders.dlq/0/3: its payload was dropped" in dropped
    # A Redact that matched nothing left the value as produced: it may be processed again.
    assert redrive_refusal("p", 0, 1, [(hn.REDACTED, b"Redact"), (hn.REDACTED_PATHS, b"[]")]) is None
    assert redrive_refusal("p", 0, 1, [("x", b"1")]) is None


def test_the_report_counts_refused_records() -> None:
    r = ReaderReport(action="Redrive", dryRun=False, source="poison", messages=3, redriven=2, refused=1)
    assert r.to_json()["refused"] == 1
    assert "2 redriven, 1 refused (payload redacted)" in r.summary()


def test_the_hmac_key_secret_is_mounted_in_the_driver_and_reader_pods() -> None:
    from antidote_operator.builders.driver import secret_names

    s = settings({"payload": "Redact", "mode": "Hash", "redact": [{"path": "$.a"}],
                  "hashKeyRef": {"name": "redaction-key"}})
    assert "redaction-key" in secret_names(s)


def test_inspect_shows_what_was_removed() -> None:
    from antidote_cli.oncall.quarantine import quarantined
    from antidote_cli.oncall.table import render_table

    q = quarantined("orders.poison", 0, 5, [(hn.REASON, b"validation"), (hn.REDACTED, b"Redact"),
                                            (hn.REDACTED_PATHS, b'["$.card.number","$.customer.email"]')],
                    b"{}", handled=False, show_payload=False)
    assert q.redacted == "Redact $.card.number, $.customer.email"
    assert "    redacted: Redact $.card.number, $.customer.email" in render_table([q])
    dropped = quarantined("orders.poison", 0, 6, [(hn.REDACTED, b"Drop"),
                                                  (hn.REDACTED_REASON, b"value: not JSON: Expecting value")],
                          None, handled=False, show_payload=False)
    assert dropped.redacted == "Drop: value: not JSON: Expecting value"
    assert quarantined("p", 0, 1, [], b"x", handled=False, show_payload=False).redacted is None


class _AwayThenBack:
    """A redactor whose registry is away for `n` calls (an outage), then redacts."""

    def __init__(self, s, n: int):
        self.red, self.left, self.calls = Redactor(s.quarantine, "Json", None, None), n, 0

    def __call__(self, value, headers=()):
        from antidote_consumer.worker.registry import RegistryUnavailable

        self.calls += 1
        if self.left:
            self.left -= 1
            raise RegistryUnavailable("registry.test: connection refused")
        return self.red(value, headers)


def _settler(s, redact, threshold: int = 3):
    import threading
    from types import SimpleNamespace

    from antidote_consumer.driver.metrics import Metrics
    from antidote_consumer.driver.settle import Settler
    from antidote_consumer.driver.settle_refused import RefusedCommit
    from antidote_consumer.driver.systemic import SystemicRule

    log = SimpleNamespace(state=LedgerState(), committed=[], failures=0)
    log.commit = lambda state, records: log.committed.append(records)

    def rollback(err) -> int:
        log.failures += 1
        return log.failures
    qd = SimpleNamespace(enabled=True, consecutive_batch_failures=threshold)
    t = Targets(s, partitions=3, max_bytes={}, consumer_id="shop/c", redact=redact)
    return Settler(t, log, Metrics("shop", "c"), SystemicRule.of(s.queue_disable),
                   RefusedCommit(log, qd, rollback, threading.Event(), 0.0), max_held=0), log


def test_a_registry_away_while_redacting_is_tried_again_without_running_handlers_then_disables() -> None:
    import pytest

    from antidote_consumer.driver.disabled import QueueDisabled

    s = settings(REDACT)
    result = BatchResult(failures=[row(Verdict.FINAL, 7, value=VALUE)], n_attempts=1)
    settler, log = _settler(s, _AwayThenBack(s, 2))
    done = settler.settle(result, [], None, None)
    assert log.failures == 2 and len(log.committed) == 1  # counted as rollbacks, then written once
    assert json.loads(done.records[0][3])["card"]["number"] == MARKER
    settler, log = _settler(s, _AwayThenBack(s, 10), threshold=3)
    with pytest.raises(QueueDisabled) as err:
        settler.settle(result, [], None, None)
    assert err.value.reason == "ConsecutiveBatchFailures" and log.committed == [] and log.failures == 3
    assert "could not be redacted 3 times in a row: registry.test: connection refused" in err.value.message


def test_antidote_testing_shows_the_record_redacted_as_the_consumer_writes_it() -> None:
    from antidote.testing import TEST_HASH_KEY, message, run

    def handle(msg):
        raise ValueError("no")

    policy = {"retries": {"immediate": 0, "cycles": 0},
              "quarantine": {"payload": "Redact", "hashKeyRef": {"name": "redaction-key"},
                             "redact": [{"path": "$.card.number"}, {"path": "$.name", "mode": "Hash"}]}}
    out = run(handle, message(VALUE), policy)
    assert out.outcome == "moved" and json.loads(out.value) == {
        "card": {"number": MARKER},
        "name": "hmac-sha256:" + hmac.new(TEST_HASH_KEY, b"Ann", "sha256").hexdigest()}
    assert out.header(hn.REDACTED) == "Redact"
    kept = run(handle, message(VALUE), {"retries": {"immediate": 0, "cycles": 0}})
    assert kept.value == VALUE and kept.header(hn.REDACTED) is None
