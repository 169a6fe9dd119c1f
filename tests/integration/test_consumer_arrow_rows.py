"""Rows per Arrow batch of source batches, sized from the records seen (spark.ArrowRows): the
Spark behaviour it stands on, the bound it learns, and a failed batch run again at the
topic's bound. Real broker, real local Spark."""

from __future__ import annotations

from antidote_api.wire import ExitCode
from antidote_consumer.spark import ARROW_ROWS_CONF, MAX_ARROW_ROWS, ArrowRows

from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce, read_all

DEFAULT_MAX_MESSAGE_BYTES = 1_048_588  # the broker's default, which the test topics keep


def arrow_batch_rows(batches):
    import pyarrow as pa

    for b in batches:
        yield pa.RecordBatch.from_pydict({"n": [b.num_rows]})


def test_a_bound_set_on_a_batchs_session_sizes_that_batchs_arrow_batches_only(
        spark, kafka_bootstrap, topic_factory, tmp_path) -> None:
    # What the consumer relies on: foreachBatch hands over a frame of the query's own session
    # (cloned at its start), and maxRecordsPerBatch set there applies to that batch's job.
    source = topic_factory()
    produce(kafka_bootstrap, source, [(None, b"m%d" % i, None) for i in range(200)])
    before = spark.conf.get(ARROW_ROWS_CONF, None)
    bound = {0: 7, 1: 50}
    seen: dict[int, list[int]] = {}

    def each(df, batch_id: int) -> None:
        df.sparkSession.conf.set(ARROW_ROWS_CONF, str(bound[batch_id]))
        rows = df.selectExpr("value").mapInArrow(arrow_batch_rows, "n long").collect()
        seen[batch_id] = sorted((r.n for r in rows), reverse=True)

    query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", kafka_bootstrap)
             .option("subscribe", source).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "100").load()
             .writeStream.foreachBatch(each).trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "ckpt")).start())
    try:
        assert query.awaitTermination(120), "the query did not end"
    finally:
        query.stop()
    assert seen[0] == [7] * 14 + [2]
    assert seen[1] == [50, 50]
    assert spark.conf.get(ARROW_ROWS_CONF, None) == before  # the query's session only


def test_small_records_get_full_arrow_batches_and_a_larger_one_shrinks_them_nothing_lost(
        spark, kafka_bootstrap, topic_factory, tmp_path) -> None:
    source, sink = topic_factory(), topic_factory("-out")
    # Keys, values and headers of different sizes; the largest of each in one record, so the
    # largest record is what the executors report (they add up each column's largest).
    small = [(b"k%03d" % i, b"v" * (i % 50), [("trace", b"t" * (i % 20))]) for i in range(600)]
    produce(kafka_bootstrap, source, small)
    s = cu.settings(kafka_bootstrap, source, tmp_path, sink=sink, max_batch=200)

    code, m = cu.run(spark, s)

    assert code == ExitCode.OK
    assert cu.metric(m, "antidote_largest_record_bytes") == 4 + 49 + len("trace") + 19
    # Learned from the first batch: Spark's own default, where 1 MB records would allow 255.
    assert ArrowRows(DEFAULT_MAX_MESSAGE_BYTES).safe == 255
    assert cu.metric(m, "antidote_arrow_batch_rows") == MAX_ARROW_ROWS

    big = 100_000
    produce(kafka_bootstrap, source, [(b"k-big", b"b" * big, None)] + small[:300])
    # A new run starts at the topic's bound and learns again: its first batch holds the
    # large record, and the second runs with the bound that record leaves.
    code, m = cu.run(spark, s)

    assert code == ExitCode.OK
    # Reported as its Arrow batch's largest key, value and headers added up: the large record
    # has no headers, the small ones beside it do.
    largest = len(b"k-big") + big + len("trace") + 19
    assert cu.metric(m, "antidote_largest_record_bytes") == largest
    expected = ArrowRows(DEFAULT_MAX_MESSAGE_BYTES)
    expected.seen(largest)
    assert cu.metric(m, "antidote_arrow_batch_rows") == expected.rows() < MAX_ARROW_ROWS
    values = [r.value for r in read_all(kafka_bootstrap, sink)]
    assert sorted(values) == sorted([v.upper() for _, v, _ in small]
                                    + [b"B" * big] + [v.upper() for _, v, _ in small[:300]])


def test_a_batch_that_fails_runs_again_at_the_topics_bound(
        spark, kafka_bootstrap, topic_factory, tmp_path) -> None:
    # The first batch's small records raise the bound; the second batch kills its Python
    # worker. Its rollback and bisection run at the topic's bound (a batch failed by a burst
    # of records larger than any seen cannot fail twice for its size), and the last Spark job
    # of the run was one of them.
    source, sink = topic_factory(), topic_factory("-out")
    values = [b"m%d" % i for i in range(400)]
    values[300] = b"crash"
    produce(kafka_bootstrap, source, [(None, v, None) for v in values])
    s = cu.settings(kafka_bootstrap, source, tmp_path, handler="crash_on_crash", sink=sink,
                    max_batch=200, policy={"queueDisable": {"consecutiveBatchFailures": 1}})

    code, m = cu.run(spark, s)

    assert code == ExitCode.OK
    assert cu.metric(m, "antidote_batch_failures_total") == 1
    assert cu.metric(m, "antidote_arrow_batch_rows") == ArrowRows(DEFAULT_MAX_MESSAGE_BYTES).safe
    assert set(cu.quarantined(kafka_bootstrap, s.topics.poison)) == {(0, 300)}
    assert sorted(r.value for r in read_all(kafka_bootstrap, sink)) == sorted(
        v for v in values if v != b"crash")
