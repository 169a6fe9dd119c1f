"""consumer_object: the typed view of a QueueConsumer that the operator's handlers build
where a body enters (a pure function of the body)."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

import pytest

from antidote_operator.consumer_object import consumer_object


def body(**meta: object) -> dict:
    return {"apiVersion": "antidote.dev/v1alpha1", "kind": "QueueConsumer",
            "metadata": {"namespace": "shop", "name": "orders", "uid": "u-1", "resourceVersion": "42",
                         **meta},
            "spec": {"source": {"topic": "orders"}, "policyRef": {"name": "strict"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


def test_a_stored_object_is_read_field_by_field() -> None:
    raw = body(generation=3, creationTimestamp="2026-01-02T03:04:05Z", labels={"team": "a"},
               annotations={"antidote.dev/resume": "now"})
    obj = consumer_object(raw)
    assert (obj.namespace, obj.name, obj.uid, obj.resource_version, obj.generation) == (
        "shop", "orders", "u-1", "42", 3)
    assert obj.deleting is False
    assert obj.created == datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert obj.labels == {"team": "a"} and obj.annotations == {"antidote.dev/resume": "now"}
    assert obj.spec == raw["spec"] and obj.status == raw["status"]
    assert obj.policy_name == "strict"
    assert obj.body == raw


def test_missing_optional_fields_read_as_the_reconcile_always_read_them() -> None:
    raw = body()
    del raw["spec"], raw["status"]
    obj = consumer_object(raw)
    assert obj.generation == 1
    assert obj.created is None
    assert obj.labels == {} and obj.annotations == {} and obj.spec == {} and obj.status == {}
    assert obj.policy_name == ""
    # Null where a mapping is expected (a merge patch that removed it) reads as empty too.
    obj = consumer_object({**body(labels=None, annotations=None), "spec": None, "status": None})
    assert obj.labels == {} and obj.annotations == {} and obj.spec == {} and obj.status == {}
    assert consumer_object({**body(), "spec": {"policyRef": None}}).policy_name == ""


@pytest.mark.parametrize("field", ["namespace", "name", "uid", "resourceVersion"])
def test_a_body_without_a_field_the_api_server_always_sets_is_refused_by_name(field: str) -> None:
    raw = body()
    del raw["metadata"][field]
    with pytest.raises(ValueError, match=rf"has no metadata\.{field}\b"):
        consumer_object(raw)


def test_a_body_without_metadata_names_every_missing_field() -> None:
    with pytest.raises(ValueError) as err:
        consumer_object({"spec": {}})
    assert str(err.value) == ("QueueConsumer ?/? has no metadata.namespace, metadata.name, metadata.uid, "
                              "metadata.resourceVersion: not an object read from the API server")


def test_a_deleting_object_says_so() -> None:
    obj = consumer_object(body(deletionTimestamp="2026-01-02T03:04:05Z"))
    assert obj.deleting is True
    assert consumer_object(body(deletionTimestamp=None)).deleting is False


def test_the_view_is_frozen_and_keeps_a_copy_of_the_top_level() -> None:
    raw = body()
    obj = consumer_object(raw)
    with pytest.raises(dataclasses.FrozenInstanceError):
        obj.name = "other"  # type: ignore[misc]  # the point of the test
    raw["spec"] = {"replaced": True}  # the caller's body replaced after the view was built
    assert obj.body["spec"] == {"source": {"topic": "orders"}, "policyRef": {"name": "strict"}}
    assert obj.spec == obj.body["spec"]
