"""A PoisonPolicy's routes by error class and its age limits (retries.maxAge,
validation.maxAge), as pure decisions: worker.governance, the pass (worker.attempts), the
records the driver writes (driver.outcomes), the settings (semantics) and antidote.testing."""

from __future__ import annotations

import time

import pytest

from antidote import Retry
from antidote.testing import message, run, run_all
from antidote_api import PoisonPolicySpec, QueueConsumerSpec, resolve
from antidote_api.semantics import reader_topic, route_topics
from antidote_api.wire import PoisonReason
from antidote_consumer.driver.frames import BatchResult
from antidote_consumer.driver.ledger import LedgerState
from antidote_consumer.driver.outcomes import fault_stop, settlement
from antidote_consumer.driver.worker_config import governance, worker_config
from antidote_consumer.kafka import headers as h
from antidote_consumer.worker.attempts import plan_of, run_pass
from antidote_consumer.worker.governance import Governance, age_ms, expired, route_of, stale
from antidote_consumer.worker.message import Message
from antidote_consumer.worker.verdict import Verdict

from ..api_cases import valid_consumer
from .test_consumer_outcomes_rules import row, targets

NOW = 1_750_000_000_000
HOUR = 3600 * 1000


class PaymentError(Exception):
    pass


class CardDeclined(PaymentError):
    pass


PAYMENT = f"{__name__}.PaymentError"
DECLINED = f"{__name__}.CardDeclined"


def settings(policy: dict, consumer: dict | None = None):
    spec = valid_consumer()["spec"]
    spec.update(consumer or {})
    return resolve(QueueConsumerSpec.model_validate(spec), PoisonPolicySpec.model_validate(policy),
                   name="c", namespace="shop")


# --- ages -------------------------------------------------------------------------------------

def test_an_age_counts_from_the_timestamp_and_a_future_or_missing_one_is_no_age() -> None:
    assert age_ms(NOW - 5000, NOW) == 5000
    assert age_ms(NOW + 60_000, NOW) == 0  # a producer's clock a minute ahead: not old
    assert age_ms(-1, NOW) == 0 and age_ms(None, NOW) == 0  # no timestamp: no age


def test_validation_max_age_refuses_only_records_older_than_it_and_names_the_limit() -> None:
    assert stale(NOW - HOUR, NOW, HOUR) is None  # exactly at the limit: still young enough
    why = stale(NOW - HOUR - 1, NOW, HOUR)
    assert why is not None and "validation.maxAge 1h" in why and "1h0ms" not in why
    assert stale(NOW + HOUR * 5, NOW, HOUR) is None  # from the future: never stale
    assert stale(NOW - 10 * HOUR, NOW, None) is None  # no limit set


def test_retries_max_age_is_judged_at_the_next_cycles_due_time() -> None:
    assert not expired(NOW, NOW + HOUR, HOUR)
    assert expired(NOW, NOW + HOUR + 1, HOUR)
    assert not expired(NOW + 2 * HOUR, NOW + HOUR, HOUR)  # a future timestamp: age 0
    assert not expired(NOW - 10 * HOUR, NOW, None)


# --- routes -----------------------------------------------------------------------------------

def test_the_first_matching_route_wins_and_subclasses_match_their_base() -> None:
    routes = (frozenset({"KeyError"}), frozenset({PAYMENT}), frozenset({DECLINED, "ValueError"}))
    assert route_of(routes, "max-attempts", DECLINED, CardDeclined) == 1  # by its base, route 1 first
    assert route_of(routes, "max-attempts", "ValueError", ValueError) == 2
    assert route_of(routes, "max-attempts", "IndexError", IndexError) is None  # today's disposition
    assert route_of(routes, "non-retryable", "KeyError", KeyError) == 0


def test_validation_is_a_word_of_its_own_and_header_names_match_as_written() -> None:
    routes = (frozenset({"validation"}), frozenset({"antidote.SerializationError"}))
    assert route_of(routes, "validation", "antidote.ValidationError", None) == 0
    assert route_of(routes, "validation", "antidote.DeserializationError", None) == 0
    assert route_of(routes, "non-retryable", "antidote.SerializationError", None) == 1
    assert route_of(routes, "max-attempts", "ValueError", ValueError) is None
    assert route_of((), "validation", None, None) is None


# --- the pass ---------------------------------------------------------------------------------

def _msg(ts: int) -> Message:
    return Message(b"k", b"v", (), "orders", 0, 7, ts)


def _plan(policy: dict):
    return plan_of(worker_config(settings(policy)))


def test_a_message_older_than_max_age_at_its_next_cycle_expires_instead_of_retrying() -> None:
    calls = []

    def failing(m):
        calls.append(m.attempt)
        raise ValueError("downstream says no")

    plan = _plan({"retries": {"immediate": 1, "cycles": 3, "cycleDelay": "30m", "maxAge": "1h"}})
    now = int(time.time() * 1000)
    young = run_pass(_msg(now), failing, plan, 0)  # due in 30m: 30m old then
    assert young.verdict is Verdict.RETRY and young.reason is None
    old = run_pass(_msg(now - 40 * 60 * 1000), failing, plan, 0)  # 70m old when cycle 1 would start
    assert (old.verdict, old.reason, old.attempts) == (Verdict.FINAL, PoisonReason.EXPIRED, 2)
    assert old.error_class == "ValueError" and old.error_message.startswith("downstream says no (expired: ")
    assert "retry cycle 1" in old.error_message and "retries.maxAge 1h" in old.error_message
    ahead = run_pass(_msg(now + 3 * 3600 * 1000), failing, plan, 0)  # a clock 3h ahead: not old
    assert ahead.verdict is Verdict.RETRY
    assert len(calls) == 6  # every attempt of the pass was made each time


def test_a_retry_the_handler_asks_for_expires_by_its_own_due_time() -> None:
    def later(m):
        raise Retry(after="50m")

    plan = _plan({"retries": {"cycles": 2, "cycleDelay": "1m", "maxCycleDelay": "2h", "maxAge": "1h"}})
    now = int(time.time() * 1000)
    assert run_pass(_msg(now - 5 * 60 * 1000), later, plan, 0).verdict is Verdict.RETRY  # 55m at due
    out = run_pass(_msg(now - 15 * 60 * 1000), later, plan, 0)  # 65m old at its due time
    assert (out.verdict, out.reason, out.chosen) == (Verdict.FINAL, PoisonReason.EXPIRED, "retry")


def test_a_stale_record_is_refused_without_a_call_on_its_first_pass_only() -> None:
    def handler(m):
        raise AssertionError("must not be called")

    plan = _plan({"retries": {"immediate": 0, "cycles": 1, "cycleDelay": "1s"}, "validation": {"maxAge": "1h"}})
    assert plan.check is None  # an age alone adds no content check to the hot loop
    now = int(time.time() * 1000)
    out = run_pass(_msg(now - 2 * HOUR), handler, plan, 0)
    assert (out.verdict, out.reason, out.attempts) == (Verdict.FINAL, PoisonReason.VALIDATION, 0)
    assert out.error_class == "antidote.ValidationError" and "validation.maxAge 1h" in out.error_message
    fine = run_pass(_msg(now - 2 * HOUR), lambda m: b"ok", plan, 1)  # a retry cycle: not first sight
    assert fine.verdict is Verdict.OK
    assert run_pass(_msg(now + 2 * HOUR), lambda m: b"ok", plan, 0).verdict is Verdict.OK  # skewed clock


def test_a_final_failure_takes_its_route_by_class_hierarchy() -> None:
    def declined(m):
        raise CardDeclined("card 4242 declined")

    plan = _plan({"retries": {"immediate": 0, "cycles": 0},
                  "routes": [{"errors": ["KeyError"], "disposition": "Drop"},
                             {"errors": [PAYMENT], "disposition": "Reject", "topic": "orders-declined"}]})
    out = run_pass(_msg(NOW), declined, plan, 0)
    assert (out.verdict, out.reason, out.route, out.error_class) == (Verdict.FINAL, "max-attempts", 1, DECLINED)
    other = run_pass(_msg(NOW), lambda m: 1 / 0, plan, 0)
    assert other.route is None  # no route: the policy's disposition


def test_without_routes_or_ages_the_workers_get_no_governance() -> None:
    assert governance(settings({})) is None and worker_config(settings({})).governance is None
    g = governance(settings({"retries": {"cycles": 2, "cycleDelay": "10s", "maxAge": "1m"},
                             "routes": [{"errors": ["validation"], "disposition": "Drop"}]}))
    assert g == Governance(routes=(frozenset({"validation"}),), max_age_ms=60_000, stale_ms=None,
                           delays=(10_000, 10_000), retry_bound_ms=10_000)


# --- what the driver writes -------------------------------------------------------------------

def test_a_routed_message_goes_to_its_routes_topic_with_its_disposition_and_header() -> None:
    s = settings({"disposition": "Move",
                  "routes": [{"errors": ["validation"], "disposition": "Drop"},
                             {"errors": [PAYMENT], "disposition": "Reject", "topic": "orders-declined"}]})
    result = BatchResult(failures=[row(Verdict.FINAL, 5, route=1, error_class=DECLINED),
                                   row(Verdict.FINAL, 6, route=0, reason="validation"),
                                   row(Verdict.FINAL, 7)], n_attempts=3)
    done = settlement(targets(s), LedgerState(), result, [], batch_id=None, positions=None, now=NOW)
    routed, default = done.records  # the Drop route writes nothing
    assert routed[0] == "orders-declined" and default[0] == "orders.poison"
    hdrs = dict(routed[4])
    assert (hdrs[h.ROUTE], hdrs[h.DISPOSITION], hdrs[h.REASON]) == (b"1", b"Reject", b"max-attempts")
    assert h.ROUTE not in dict(default[4]) and dict(default[4])[h.DISPOSITION] == b"Move"
    counts = done.state.counts
    assert (counts["rejected"], counts["dropped"], counts["moved"]) == (1, 1, 1)
    assert [p[3] for p in done.poisoned] == ["Reject", "Drop", "Move"]


def test_a_route_takes_batch_isolation_by_name_and_a_routed_message_never_faults() -> None:
    s = settings({"disposition": "Fault",
                  "routes": [{"errors": [PAYMENT, "antidote.BatchFailure"], "disposition": "Move"}]})
    assert fault_stop(s, BatchResult(failures=[row(Verdict.FINAL, 5, route=0)]), []) is None
    err, origin = fault_stop(s, BatchResult(failures=[row(Verdict.FINAL, 5, route=0), row(Verdict.FINAL, 6)]), [])
    assert origin.offset == 6  # the first message no route took stops the consumer


def test_settings_resolve_route_topics_and_refuse_the_source_sink_and_retry_topics_by_field() -> None:
    s = settings({"routes": [{"errors": ["A"], "disposition": "Reject", "topic": "orders-declined"},
                             {"errors": ["B"], "disposition": "Move"},
                             {"errors": ["C"], "disposition": "Reject", "topic": "orders-declined"},
                             {"errors": ["D"], "disposition": "Drop"}]})
    assert [r.topic for r in s.routes] == ["orders-declined", "orders.poison", "orders-declined", None]
    assert route_topics(s) == ["orders-declined"]  # created at start, once
    assert reader_topic(s, "orders-declined") == "orders-declined" and reader_topic(s, "dlq") == "orders.dlq"
    with pytest.raises(ValueError, match="--from orders.retry-1: not poison, dlq or a route's topic"):
        reader_topic(s, "orders.retry-1")
    cases = [({"routes": [{"errors": ["A"], "disposition": "Move"},
                          {"errors": ["B"], "disposition": "Move", "topic": "orders"}]}, None,
              r"spec.routes\[1\].topic: orders is the source topic"),
             ({"routes": [{"errors": ["A"], "disposition": "Reject", "topic": "orders.out"}]},
              {"sink": {"kafka": {"topic": "orders.out"}}}, r"spec.routes\[0\].topic: orders.out is the sink's topic"),
             ({"retries": {"cycles": 1}, "routes": [{"errors": ["A"], "disposition": "Move", "topic": "orders.retry-1"}]},
              None, r"spec.routes\[0\].topic: orders.retry-1 is a retry topic"),
             ({"routes": [{"errors": ["A"], "disposition": "Move", "topic": "orders.parking"}]}, None,
              r"spec.routes\[0\].topic: orders.parking is the reader's parking topic"),
             ({"routes": [{"errors": ["A"], "disposition": "Move", "topic": "orders.ledger-shop.c"}]}, None,
              r"spec.routes\[0\].topic: orders.ledger-shop.c is named like a ledger topic of orders")]
    for policy, consumer, match in cases:
        with pytest.raises(ValueError, match=match):
            settings(policy, consumer)
    assert settings({}).routes is None  # no routes: the settings (and their hash) as before


# --- antidote.testing shows the same ------------------------------------------------------------

def test_antidote_testing_shows_routes_and_expiry_as_the_consumer_would() -> None:
    def declined(m):
        raise CardDeclined("no")

    policy = {"retries": {"immediate": 0, "cycles": 2, "cycleDelay": "1h", "maxAge": "90m"},
              "routes": [{"errors": [PAYMENT], "disposition": "Reject", "topic": "orders-declined"}]}
    now = int(time.time() * 1000)
    # run_all does not wait out the delays: ages are judged at the time of the call, so a young
    # message is retried through every cycle, and one 40m old would be 100m old at cycle 1.
    young = run_all(declined, message(b"x", topic="orders", timestamp=now), policy)
    assert [p.outcome for p in young] == ["retried", "retried", "rejected"] and young[-1].reason == "max-attempts"
    [old] = run_all(declined, message(b"x", topic="orders", timestamp=now - 40 * 60 * 1000), policy)
    assert (old.outcome, old.reason, old.topic, old.header(h.ROUTE)) == ("rejected", "expired", "orders-declined", "0")
    stale_out = run(lambda m: b"ok", message(b"x", topic="orders", timestamp=now - 3 * HOUR),
                    {"validation": {"maxAge": "1h"}})
    assert (stale_out.outcome, stale_out.reason, stale_out.calls) == ("moved", "validation", 0)
