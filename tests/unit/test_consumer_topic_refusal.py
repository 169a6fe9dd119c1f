"""A transaction an ACL refuses is reported as a refused record naming the topic (the broker's
error names none): kafka.transactions.topic_refusal; the refusal itself, on a broker with an
authorizer, is in tests/integration/test_consumer_refused_quarantine.py."""

from confluent_kafka import KafkaError

from antidote_consumer.kafka.transactions import TOPIC_REFUSALS, topic_refusal

ERROR = "Failed to add partition(s) to transaction on broker TxnCoordinator/1: Broker: Topic authorization failed"


def test_one_topic_is_named_as_a_refused_record_names_it() -> None:
    assert topic_refusal(["orders.dlq"], ERROR) == f"orders.dlq: {ERROR}"


def test_several_topics_are_named_as_one_of_them() -> None:
    assert topic_refusal(["orders.dlq", "orders.out"], ERROR) == f"one of orders.dlq, orders.out: {ERROR}"


def test_only_an_authorization_refusal_is_a_topic_refusal() -> None:
    # Fencing, timeouts and a transactional id's own authorization are not a topic's refusal.
    assert TOPIC_REFUSALS == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
