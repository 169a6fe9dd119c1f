"""Which Kopf triggers make a reconcile read the children back and compare them."""

from __future__ import annotations

import kopf

from antidote_operator.handlers import renders_children


def diff(*fields: tuple[str, ...]) -> kopf.Diff:
    return kopf.Diff([kopf.DiffItem(kopf.DiffOperation.CHANGE, field, "old", "new") for field in fields])


def test_create_and_resume_verify_the_children() -> None:
    assert renders_children(kopf.Reason.CREATE, diff())
    assert renders_children(kopf.Reason.RESUME, diff())


def test_an_update_of_annotations_alone_does_not() -> None:
    # `antidote resume`, `antidote drain`: the annotation added, or the first one of all.
    assert not renders_children(kopf.Reason.UPDATE, diff(("metadata", "annotations", "antidote.dev/resume")))
    assert not renders_children(kopf.Reason.UPDATE, diff(("metadata", "annotations")))


def test_an_update_of_spec_or_labels_does() -> None:
    assert renders_children(kopf.Reason.UPDATE, diff(("spec", "handler")))
    assert renders_children(kopf.Reason.UPDATE, diff(("metadata", "labels", "team")))
    assert renders_children(kopf.Reason.UPDATE, diff(("metadata", "annotations", "x"), ("spec", "handler")))
