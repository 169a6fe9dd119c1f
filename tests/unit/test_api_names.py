"""The Kafka client names the consumer, the reader and the CLI share."""

from __future__ import annotations

import itertools

from antidote_api.names import reader_group_id, transactional_id


def test_names_that_join_alike_with_a_dash_stay_apart() -> None:
    pairs = [("team-a", "orders"), ("team", "a-orders"), ("team-a-orders", ""), ("", "team-a-orders")]
    ids = [transactional_id(ns, name) for ns, name in pairs]
    assert len(set(ids)) == len(ids)
    groups = [reader_group_id(ns, name) for ns, name in pairs]
    assert len(set(groups)) == len(groups)


def test_a_consumer_and_its_readers_never_share_an_id() -> None:
    ids = [transactional_id("shop", "orders", role) for role in ("", "reader-poison", "reader-dlq")]
    ids.append(reader_group_id("shop", "orders"))
    assert all(a != b for a, b in itertools.combinations(ids, 2))
    assert transactional_id("shop", "orders") == "antidote/shop/orders"
