"""The demo's ledger check."""

from __future__ import annotations

from antidote_demo.balance import balance


def test_balanced_when_every_key_is_in_exactly_one_place() -> None:
    b = balance([b"a", b"b", b"c"], sink=[b"a", b"c"], poison=[b"b"])
    assert b.ok and (b.produced, b.processed, b.quarantined) == (3, 2, 1)


def test_missing_duplicated_and_unknown_keys_unbalance_it() -> None:
    b = balance([b"a", b"b", b"c"], sink=[b"a", b"a", b"x"], poison=[b"b"])
    assert not b.ok
    assert (b.missing, b.twice, b.unknown) == (["c"], ["a"], ["x"])
    b = balance([b"a", b"b"], sink=[b"a"], poison=[b"a", b"b"])
    assert b.twice == ["a"] and not b.ok
