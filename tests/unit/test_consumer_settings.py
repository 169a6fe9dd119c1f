"""Loading settings: clear errors naming the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from antidote_consumer.settings import SettingsError, from_manifests, load_settings

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_examples_resolve_into_settings_that_load_back(tmp_path: Path) -> None:
    s = from_manifests(EXAMPLES / "queueconsumer-minimal.yaml", EXAMPLES / "poisonpolicy-minimal.yaml")
    assert s.consumer == "audit" and s.retries.max_attempts == 18
    assert s.topics.retry == ["audit-events.retry-1", "audit-events.retry-2"]
    path = tmp_path / "settings.json"
    path.write_text(s.model_dump_json(by_alias=True))
    assert load_settings(path) == s


def test_a_bad_manifest_names_the_file_and_field(tmp_path: Path) -> None:
    qc = yaml.safe_load((EXAMPLES / "queueconsumer-minimal.yaml").read_text())
    qc["spec"]["handler"] = "not a handler"
    bad = tmp_path / "qc.yaml"
    bad.write_text(yaml.safe_dump(qc))
    with pytest.raises(SettingsError) as err:
        from_manifests(bad, EXAMPLES / "poisonpolicy-minimal.yaml")
    assert str(bad) in str(err.value) and "spec.handler" in str(err.value)


def test_the_policy_must_be_the_one_referenced(tmp_path: Path) -> None:
    pp = yaml.safe_load((EXAMPLES / "poisonpolicy-minimal.yaml").read_text())
    pp["metadata"]["name"] = "other"
    path = tmp_path / "pp.yaml"
    path.write_text(yaml.safe_dump(pp))
    with pytest.raises(SettingsError, match="refers to PoisonPolicy 'default'"):
        from_manifests(EXAMPLES / "queueconsumer-minimal.yaml", path)


def test_settings_that_set_a_key_the_operator_owns_exit_2_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CRD refuses such a QueueConsumer; a settings file written by hand (or by an older
    operator) is refused again by the consumer, before Spark or Kafka is touched."""
    from antidote_cli.main import main

    s = from_manifests(EXAMPLES / "queueconsumer-minimal.yaml", EXAMPLES / "poisonpolicy-minimal.yaml")
    doc = s.model_dump(mode="json", by_alias=True)
    doc["spark"]["conf"] = {"spark.sql.shuffle.partitions": "4",
                            "spark.kubernetes.authenticate.executor.serviceAccountName": "default"}
    path = tmp_path / "settings.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["consumer", "--settings", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert any("spark.conf" in line and "spark.kubernetes.authenticate.executor.serviceAccountName" in line
               for line in err), err
    assert not any("Traceback" in line for line in err), err


def test_missing_and_non_mapping_files(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="No such file"):
        load_settings(tmp_path / "nope.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(SettingsError, match="expected a mapping"):
        load_settings(tmp_path / "list.yaml")


def test_arrow_batching_turns_off_the_per_row_size_check_and_bounds_rows_by_message_size() -> None:
    from antidote_consumer.spark import arrow_batching

    small = arrow_batching(1_048_588)  # Kafka's default max.message.bytes
    assert small["spark.sql.execution.arrow.maxBytesPerBatch"] == str(2**31 - 1)
    assert small["spark.sql.execution.arrow.maxRecordsPerBatch"] == "255"
    assert arrow_batching(1000)["spark.sql.execution.arrow.maxRecordsPerBatch"] == "10000"
    assert arrow_batching(512 * 1024 * 1024)["spark.sql.execution.arrow.maxRecordsPerBatch"] == "1"


def test_arrow_batching_leaves_what_the_user_set() -> None:
    from antidote_consumer.spark import arrow_batching

    conf = arrow_batching(1000, {"spark.sql.execution.arrow.maxRecordsPerBatch": "50"})
    assert conf == {"spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1)}


def test_checkpoint_files_on_a_local_directory_go_through_the_file_system_api() -> None:
    from antidote_consumer.spark import CHECKPOINT_MANAGER_CONF, FILE_SYSTEM_CHECKPOINTS, checkpoint_files

    for local in ("/checkpoints/orders", "file:///checkpoints/orders", "ckpt/orders"):
        assert checkpoint_files(local) == {CHECKPOINT_MANAGER_CONF: FILE_SYSTEM_CHECKPOINTS}, local
    for remote in ("s3a://bucket/orders", "hdfs://nn:8020/orders", "gs://bucket/orders"):
        assert checkpoint_files(remote) == {}, remote
    # The user's own choice (spec.spark.conf) stays.
    assert checkpoint_files("/checkpoints/orders", {CHECKPOINT_MANAGER_CONF: "my.Manager"}) == {}


def test_arrow_rows_start_at_the_topic_bound_and_follow_the_largest_record_seen() -> None:
    from antidote_consumer.spark import (ARROW_BATCH_BYTES, LEARNED_MARGIN, MAX_ARROW_ROWS,
                                         ROW_OVERHEAD_BYTES, ArrowRows)

    rows = ArrowRows(1_048_588)
    assert rows.rows() == rows.safe == 255  # nothing seen yet: what 1 MB records allow
    rows.seen(200)
    assert rows.rows() == MAX_ARROW_ROWS  # small records: Spark's own default
    assert rows.rows(after_failure=True) == 255  # a failed batch runs again at the topic's bound
    rows.seen(100)
    assert rows.largest == 200  # the largest seen never shrinks
    rows.seen(60_000)
    assert rows.rows() == ARROW_BATCH_BYTES // (LEARNED_MARGIN * (60_000 + ROW_OVERHEAD_BYTES)) == 1117
    rows.seen(500_000)  # 4x would allow fewer rows than the topic's bound: never below it
    assert rows.rows() == 255
    assert ArrowRows(1000).rows() == MAX_ARROW_ROWS


def test_arrow_rows_leave_the_users_own_bound_alone() -> None:
    from antidote_consumer.spark import ArrowRows

    rows = ArrowRows(1_048_588, {"spark.sql.execution.arrow.maxRecordsPerBatch": "50"})
    rows.seen(10)
    assert rows.rows() is None and rows.rows(after_failure=True) is None


def test_committed_offsets_come_from_the_last_progress_of_the_query() -> None:
    from antidote_consumer.driver.offsets import committed_offsets

    progress = {"sources": [{"description": "KafkaV2[Subscribe[orders]]",
                             "endOffset": '{"orders":{"0":120,"1":98}}'}]}
    assert committed_offsets(progress, "orders") == {0: 120, 1: 98}
    assert committed_offsets({"sources": [{"endOffset": {"orders": {"2": 5}}}]}, "orders") == {2: 5}
    assert committed_offsets(None, "orders") is None
    assert committed_offsets({"sources": [{"endOffset": None}]}, "orders") is None
