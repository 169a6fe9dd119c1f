"""A lost or replaced checkpoint (a pod's ephemeral disk, a new checkpoint.location, a
QueueConsumer recreated under the same name) must neither skip a message nor give one a
second outcome: the ledger knows what is accounted for by source position, not by Spark's
batch id, which starts at 0 again with a new checkpoint. Real broker, real local Spark."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from antidote_consumer.driver.ledger import load_state
from antidote_api.wire import ExitCode
from antidote_api.names import ledger_topic

from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce, read_all

POLICY = {"retries": {"immediate": 0, "cycles": 0}}


def _moved_to(s, checkpoint, max_batch: int | None = None):
    """`s` with its checkpoint at `checkpoint` (and another batch size): the same consumer,
    the same ledger, Spark's batch ids starting at 0 again."""
    update = {"checkpoint": s.checkpoint.model_copy(update={"location": str(checkpoint)})}
    if max_batch is not None:
        update["source"] = s.source.model_copy(update={"max_messages_per_batch": max_batch})
    return s.model_copy(update=update)


def _values(n0: int, n: int) -> list[bytes]:
    """Every seventh one poison, the others fine."""
    return [b"poison-%d" % i if i % 7 == 3 else b"m%d" % i for i in range(n0, n0 + n)]


def _write(bootstrap: str, topic: str, values: list[bytes]) -> None:
    for partition in (0, 1):
        produce(bootstrap, topic, [(None, v, None) for v in values[partition::2]], partition=partition)


def _first_run(spark, bootstrap: str, topic_factory, tmp_path, n_first: int, n_second: int):
    """A consumer (batches of 7) run until idle over `n_first` messages in 2 partitions;
    (its settings, its sink, those messages, the `n_second` that come after them)."""
    source, sink = topic_factory(partitions=2), topic_factory("-out")
    first, second = _values(0, n_first), _values(n_first, n_second)
    _write(bootstrap, source, first)
    s = cu.settings(bootstrap, source, tmp_path, sink=sink, max_batch=7, policy=POLICY)
    code, _ = cu.run(spark, s)
    assert code == ExitCode.OK
    return s, sink, first, second


def _assert_each_once(bootstrap: str, s, sink: str, calls_dir, values: list[bytes]) -> tuple[list, dict]:
    """Every message of `values` has one outcome (the sink, or the poison topic once) and was
    given to the handler exactly once; (the sink's values, the quarantined records)."""
    ok = sorted(v.upper() for v in values if not v.startswith(b"poison"))
    assert sorted(r.value for r in read_all(bootstrap, sink)) == ok
    poison = cu.quarantined(bootstrap, s.topics.poison)  # fails on a duplicate
    assert sorted(r.value for r, _ in poison.values()) == sorted(v for v in values if v.startswith(b"poison"))
    per_offset = cu.calls(calls_dir, s.source.topic)
    assert len(per_offset) == len(values) and set(per_offset.values()) == {1}
    return ok, poison


def test_a_lost_checkpoint_neither_skips_nor_repeats_a_message(
        spark, kafka_bootstrap, topic_factory, tmp_path, calls_dir) -> None:
    s, sink, first, second = _first_run(spark, kafka_bootstrap, topic_factory, tmp_path, 40, 30)
    source = s.source.topic
    before = load_state(kafka_bootstrap, ledger_topic(source, s.namespace, s.consumer))
    assert before.committed_batch >= 4  # several batches, so the new ids collide with them

    # The checkpoint is gone (another location, another batch size); more messages arrive.
    _write(kafka_bootstrap, source, second)
    code, _ = cu.run(spark, _moved_to(s, tmp_path / "new-checkpoint", max_batch=11))
    assert code == ExitCode.OK

    # Each source offset was given to the handler exactly once: nothing ran twice.
    ok, poison = _assert_each_once(kafka_bootstrap, s, sink, calls_dir, first + second)
    state = load_state(kafka_bootstrap, ledger_topic(source, s.namespace, s.consumer))
    assert state.positions[f"{source}:0"] == 35 and state.positions[f"{source}:1"] == 35
    assert (state.counts["processed"], state.counts["moved"]) == (len(ok), len(poison))


def test_a_latest_consumer_whose_checkpoint_is_lost_goes_on_where_its_ledger_ends(
        spark, kafka_bootstrap, topic_factory, tmp_path, calls_dir) -> None:
    source, sink = topic_factory(partitions=2), topic_factory("-out")
    _write(kafka_bootstrap, source, [b"before-start-%d" % i for i in range(4)])
    s = cu.settings(kafka_bootstrap, source, tmp_path, sink=sink, policy=POLICY)
    s = s.model_copy(update={"source": s.source.model_copy(update={"starting_offsets": "latest"})})
    code, _ = cu.run(spark, s)  # starts at the end: nothing to do, but where it started is kept
    assert code == ExitCode.OK
    assert read_all(kafka_bootstrap, sink) == []

    # Written while the consumer was down; then it comes back without its checkpoint. A
    # plain "latest" would start at the end again and never see these.
    while_down = _values(0, 10)
    _write(kafka_bootstrap, source, while_down)
    code, _ = cu.run(spark, _moved_to(s, tmp_path / "new-checkpoint"))
    assert code == ExitCode.OK

    ok = sorted(v.upper() for v in while_down if not v.startswith(b"poison"))
    assert sorted(r.value for r in read_all(kafka_bootstrap, sink)) == ok
    assert len(cu.quarantined(kafka_bootstrap, s.topics.poison)) == 1
    # What was there before the first start was never read, by either run.
    assert Counter(w.rsplit("/", 1)[0] for w in cu.calls(calls_dir, source)) == {
        f"{source}/0": 5, f"{source}/1": 5}
    assert min(int(w.rsplit("/", 1)[1]) for w in cu.calls(calls_dir, source)) == 2


def test_a_checkpoint_whose_first_offsets_write_was_cut_short_starts_again_and_loses_nothing(
        spark, kafka_bootstrap, topic_factory, tmp_path, calls_dir) -> None:
    """A driver killed while Spark wrote a new checkpoint's first offsets (after a lost
    checkpoint, say) leaves the write's temporary file, and Spark since 4.1 refuses to start a
    query whose offsets folder is not empty (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY):
    the consumer would fail the same way on every restart. Found by the chaos run."""
    import shutil
    import uuid

    s, sink, first, second = _first_run(spark, kafka_bootstrap, topic_factory, tmp_path, 20, 20)
    source = s.source.topic

    # What a SIGKILL between Spark's write of offsets/0 and its rename leaves in a new
    # checkpoint: the query's metadata, the source's initial offsets, and offsets/0 as a
    # temporary file with its checksum; no commit.
    ckpt = tmp_path / "new-checkpoint"
    old = Path(s.checkpoint.location)
    shutil.copytree(old, ckpt, ignore=shutil.ignore_patterns("offsets", "commits"))
    (ckpt / "offsets").mkdir()
    (ckpt / "commits").mkdir()
    temp = f".0.{uuid.uuid4()}.tmp"
    shutil.copy(old / "offsets" / "0", ckpt / "offsets" / temp)
    shutil.copy(old / "offsets" / ".0.crc", ckpt / "offsets" / f".{temp}.crc")

    _write(kafka_bootstrap, source, second)
    code, _ = cu.run(spark, _moved_to(s, ckpt))
    assert code == ExitCode.OK

    _assert_each_once(kafka_bootstrap, s, sink, calls_dir, first + second)
    # Only the cut-short write was cleared: the checkpoint now has its own batches.
    assert (ckpt / "offsets" / "0").exists() and not list((ckpt / "offsets").glob(".0.*.tmp"))


def test_a_local_checkpoint_is_written_through_the_file_system_api_and_read_back(
        spark, kafka_bootstrap, topic_factory, tmp_path, calls_dir) -> None:
    """On a local directory the consumer has Spark write its checkpoint through Hadoop's
    FileSystem API, not FileContext, which forks a `readlink` for every status it reads
    (antidote_consumer.spark.checkpoint_files). A second run goes on from the entries the
    first one wrote that way: Spark read them back, and its batch ids go on."""
    from antidote_consumer.spark import CHECKPOINT_MANAGER_CONF, FILE_SYSTEM_CHECKPOINTS

    s, sink, first, second = _first_run(spark, kafka_bootstrap, topic_factory, tmp_path, 20, 14)
    source = s.source.topic
    assert spark.conf.get(CHECKPOINT_MANAGER_CONF) == FILE_SYSTEM_CHECKPOINTS

    commits = Path(s.checkpoint.location) / "commits"

    def batches() -> list[int]:
        return sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit())

    done = batches()
    assert len(done) >= 3 and done == list(range(len(done)))

    _write(kafka_bootstrap, source, second)
    code, _ = cu.run(spark, s)
    assert code == ExitCode.OK
    after = batches()
    assert len(after) > len(done) and after == list(range(len(after)))
    _assert_each_once(kafka_bootstrap, s, sink, calls_dir, first + second)
