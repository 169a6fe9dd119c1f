"""What counts as waiting in a poison or dead-letter topic, and how old its oldest record is
(driver.poison_age's pure part; the measurement against a broker is in
tests/integration/test_prometheus_poison_age.py)."""

from antidote_consumer.driver.metrics import Metrics
from antidote_consumer.driver.poison_age import (Found, Partition, PoisonAge, age_seconds, summed,
                                                 waiting_from)


def test_a_partition_nobody_read_waits_from_its_log_start() -> None:
    assert waiting_from(low=3, high=10, committed=None) == 3
    assert waiting_from(low=3, high=10, committed=-1001) == 3  # librdkafka: no offset


def test_the_reader_position_is_where_waiting_starts() -> None:
    assert waiting_from(low=0, high=10, committed=7) == 7
    assert waiting_from(low=0, high=10, committed=10) == 10  # all resolved: nothing waits


def test_a_position_removed_by_retention_waits_from_the_log_start() -> None:
    assert waiting_from(low=5, high=10, committed=2) == 5


def test_a_position_past_the_end_waits_for_nothing() -> None:
    # A topic deleted and recreated under the reader's group offsets.
    assert waiting_from(low=0, high=4, committed=9) == 4


def test_a_topic_sums_its_partitions_and_its_oldest_is_the_earliest_first_record() -> None:
    found = summed([Partition(2, 5_000), Partition(0, None), Partition(3, 2_000)])
    assert found == Found(5, 2_000)


def test_a_partition_with_nothing_waiting_does_not_set_the_age() -> None:
    # Its timestamp, if any, is of a record already resolved.
    assert summed([Partition(0, 1_000), Partition(1, 9_000)]) == Found(1, 9_000)
    assert summed([]) == Found(0, None)


def test_the_age_is_now_minus_the_oldest_timestamp_and_zero_when_none_waits() -> None:
    assert age_seconds(None, now=100.0) == 0.0
    assert age_seconds(40_000, now=100.0) == 60.0
    assert age_seconds(200_000, now=100.0) == 0.0  # a clock behind the broker's: never negative


def test_the_age_gauge_grows_between_rounds() -> None:
    """Read at each scrape from the last round's timestamp: the age keeps growing while the
    brokers do not answer, and drops once a round finds nothing waiting."""
    now = [1_000.0]
    m = Metrics("ns", "orders")
    age = PoisonAge.__new__(PoisonAge)
    age.metrics, age.clock, age.oldest = m, lambda: now[0], {}

    def value(name: str) -> float:
        (v,) = [s.value for fam in m.registry.collect() for s in fam.samples
                if s.name == name and s.labels["topic"] == "t.poison"]
        return v

    age._export("t.poison", "poison", Found(2, 400_000))
    assert value("antidote_poison_oldest_age_seconds") == 600.0
    assert value("antidote_poison_waiting_records") == 2
    now[0] = 1_030.0
    assert value("antidote_poison_oldest_age_seconds") == 630.0
    age._export("t.poison", "poison", Found(0, None))
    assert value("antidote_poison_oldest_age_seconds") == 0.0
    assert value("antidote_poison_waiting_records") == 0


def test_a_routes_own_topic_is_measured_beside_the_poison_and_dead_letter_topics() -> None:
    from antidote_api.consumer import QueueConsumerSpec
    from antidote_api.policy import PoisonPolicySpec
    from antidote_api.semantics import resolve

    from antidote_consumer.driver.poison_age import quarantine_topics

    qc = QueueConsumerSpec.model_validate({"policyRef": {"name": "p"}, "handler": "m:f",
                                           "source": {"kafka": {"bootstrapServers": "k:9092", "topic": "orders"}},
                                           "checkpoint": {"location": "/ckpt"}})
    pp = PoisonPolicySpec.model_validate({"routes": [
        {"errors": ["payments.CardDeclined"], "disposition": "Reject", "topic": "orders-declined"},
        {"errors": ["validation"], "disposition": "Move"},  # the poison topic: measured once
        {"errors": ["KeyError"], "disposition": "Drop"}]})  # nothing written: nothing to measure
    s = resolve(qc, pp, name="c", namespace="ns")
    assert quarantine_topics(s) == [(s.topics.poison, "poison"), (s.topics.dlq, "dlq"),
                                    ("orders-declined", "route")]
