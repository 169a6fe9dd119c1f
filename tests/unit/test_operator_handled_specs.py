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
