"""Kopf's record of the handled spec, kept in memory (handled_specs)."""

from __future__ import annotations

import kopf

from antidote_operator.handled_specs import KOPF_PREFIX, HandledSpecs


def body(uid: str = "u1", spec: dict | None = None, annotations: dict | None = None) -> kopf.Body:
    return kopf.Body({"apiVersion": "antidote.dev/v1alpha1", "kind": "QueueConsumer",
                      "metadata": {"name": "orders", "namespace": "team", "uid": uid,
                                   "resourceVersion": "7", "annotations": annotations or {}},
                      "spec": spec or {"topic": "orders"}, "status": {"phase": "Running"}})


def test_nothing_goes_into_the_patch_and_the_record_reads_back() -> None:
    store = HandledSpecs()
    b = body(annotations={"antidote.dev/resume": "1"})
    assert store.fetch(body=b) is None  # never handled: Kopf reads a create
    patch = kopf.Patch()
    essence = store.build(body=b)
    store.store(body=b, patch=patch, essence=essence)
    assert dict(patch) == {}
    assert store.fetch(body=b) == {"spec": {"topic": "orders"},
                                   "metadata": {"annotations": {"antidote.dev/resume": "1"}}}


def test_kopf_bookkeeping_under_the_own_prefix_is_no_change() -> None:
    store = HandledSpecs()
    plain = store.build(body=body())
    marked = store.build(body=body(annotations={f"{KOPF_PREFIX}/reconcile_consumer": "{}",
                                                f"{KOPF_PREFIX}/last-handled-configuration": "{}"}))
    assert plain == marked == {"spec": {"topic": "orders"}}


def test_records_are_per_object_and_forgotten() -> None:
    store = HandledSpecs()
    a, b = body("a", {"topic": "a"}), body("b", {"topic": "b"})
    for x in (a, b):
        store.store(body=x, patch=kopf.Patch(), essence=store.build(body=x))
    assert store.fetch(body=a) == {"spec": {"topic": "a"}}
    store.forget("a")
    store.forget(None)
    assert store.fetch(body=a) is None and store.fetch(body=b) == {"spec": {"topic": "b"}}
    assert len(store) == 1


def test_build_gives_what_kopfs_own_build_gives() -> None:
    store = HandledSpecs()
    bodies = [
        body(),
        body(annotations={"antidote.dev/resume": "2026-11-26T00:00:00Z", f"{KOPF_PREFIX}/reconcile_consumer": "{}",
                          "kubectl.kubernetes.io/last-applied-configuration": "{}",
                          "other.example/kopf-managed": "yes", "other.example/x": "1",
                          "kopf.zalando.org/last-handled-configuration": "{}", "team": "a"}),
        kopf.Body({"apiVersion": "v1", "kind": "X", "metadata": {"name": "n", "labels": {"app": "a"},
                                                                  "managedFields": [{"manager": "m"}]},
                   "spec": {"nested": {"list": [1, {"a": 2}]}}, "status": {"conditions": []}, "data": {"k": "v"}}),
        kopf.Body({"metadata": {"name": "n", "labels": {}, "annotations": {}}, "spec": {}}),
        kopf.Body({"metadata": {"name": "n"}}),
    ]
    for b in bodies:
        fast, kopfs = store.build(body=b), store.kopf_build(body=b)
        assert fast == kopfs, (fast, kopfs)
    # A copy: changing the body later does not change the record.
    b = bodies[2]
    essence = store.build(body=b)
    b["spec"]["nested"]["list"].append(3)
    assert essence["spec"]["nested"]["list"] == [1, {"a": 2}]
