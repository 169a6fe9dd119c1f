"""Topic settings that would lose records (issue 43, item 6): a compacted poison or
dead-letter topic, a size-bounded retry topic, a ledger that expires; refused at start."""

from __future__ import annotations

from antidote_consumer.kafka.topics import DAY_MS, ledger_misfits, misfits

HOUR = 3_600_000
OK = {"retention.ms": str(7 * DAY_MS), "retention.bytes": "-1", "cleanup.policy": "delete"}


def test_a_compacted_poison_or_dead_letter_topic_is_refused_naming_the_setting() -> None:
    assert misfits(3, 3, OK, retry=False, longest_delay_ms=HOUR) == []
    for policy in ("compact", "compact,delete", "delete,compact"):
        (why,) = misfits(3, 3, {**OK, "cleanup.policy": policy}, retry=False, longest_delay_ms=HOUR)
        assert why.startswith(f"cleanup.policy is {policy!r}") and "quarantined" in why


def test_a_retry_topic_bounded_by_size_is_refused() -> None:
    (why,) = misfits(3, 3, {**OK, "retention.bytes": "1073741824"}, retry=True, longest_delay_ms=HOUR)
    assert why.startswith("retention.bytes is 1073741824") and "-1" in why
    (why,) = misfits(3, 3, {**OK, "retention.bytes": "0"}, retry=True, longest_delay_ms=HOUR)
    assert "retention.bytes is 0" in why
    assert misfits(3, 3, {**OK, "retention.bytes": "-1"}, retry=True, longest_delay_ms=HOUR) == []
    assert misfits(3, 3, {"retention.ms": "-1"}, retry=True, longest_delay_ms=HOUR) == []  # unset


def test_quarantine_topics_keep_their_own_retention() -> None:
    # How long quarantined records stay is the team's choice (the reader drains them); only
    # parked retry records are held to the policy's delays.
    assert misfits(3, 3, {"retention.ms": "1000", "retention.bytes": "1024", "cleanup.policy": "delete"},
                   retry=False, longest_delay_ms=HOUR) == []


def test_every_reason_of_a_retry_topic_is_given_at_once() -> None:
    whys = misfits(2, 3, {"retention.ms": str(HOUR), "retention.bytes": "10", "cleanup.policy": "compact"},
                   retry=True, longest_delay_ms=HOUR)
    assert [w.split(" ")[0] for w in whys] == ["it", "cleanup.policy", "retention.ms", "retention.bytes"]


def test_a_ledger_topic_that_expires_entries_is_refused() -> None:
    assert ledger_misfits({"cleanup.policy": "compact"}) == []
    for policy in ("delete", "compact,delete"):
        (why,) = ledger_misfits({"cleanup.policy": policy})
        assert why.startswith(f"cleanup.policy is {policy!r}, not 'compact'")
    assert ledger_misfits({}) != []  # the broker's default policy is delete
