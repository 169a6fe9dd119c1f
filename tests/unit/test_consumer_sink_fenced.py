"""Which errors of a chunk's transaction mean "this producer is fenced or unusable" (made
again, the partition's entry read, the chunk committed only if no other attempt did) rather
than a refusal that fails the batch (worker/sink_txn.py)."""

from confluent_kafka import KafkaError

from antidote_consumer.worker.sink_txn import _fenced


def test_a_fence_seen_by_produce_as_a_plain_fatal_error_is_a_fence() -> None:
    # What produce() raises once the broker told the producer in the background that a
    # newer instance took its transactional id (seen in steady_state.py's warm-up: the
    # batch failed as a whole instead of the producer being made again).
    assert _fenced(KafkaError(KafkaError._FATAL, "Unable to produce message: Local: Fatal error"))


def test_fenced_codes_are_fences() -> None:
    for code in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH,
                 KafkaError._STATE):
        assert _fenced(KafkaError(code))


def test_a_refused_record_is_not_a_fence() -> None:
    for code in (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.UNKNOWN_TOPIC_OR_PART,
                 KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._MSG_TIMED_OUT):
        assert not _fenced(KafkaError(code))
