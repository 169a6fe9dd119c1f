"""The on-call CLI's pure parts: reading quarantine headers, filters, the table (fits 100
columns), the status header line."""

from __future__ import annotations

from datetime import datetime, timezone

from antidote_cli.oncall import quarantine, table


def headers(**over) -> list[tuple[str, bytes]]:
    h = {"antidote.original.topic": "orders", "antidote.original.partition": "0",
         "antidote.original.offset": "13", "antidote.reason": "max-attempts",
         "antidote.error.class": "ValueError", "antidote.attempts": "12",
         "antidote.failure.first": "1795860000000", "antidote.failure.last": "1795860060000"}
    h.update(over)
    return [(k, v.encode()) for k, v in h.items()]


def test_a_quarantined_record_is_read_from_its_headers() -> None:
    q = quarantine.quarantined("orders.poison", 0, 4, headers(**{"antidote.redrive.count": "2"}), b"secret",
                           handled=False, show_payload=False)
    assert (q.origin, q.reason, q.error_class, q.attempts, q.redrives) == ("orders/0/13", "max-attempts",
                                                                          "ValueError", 12, 2)
    assert q.first_failure == "2026-11-28T10:00:00Z" and q.last_failure == "2026-11-28T10:01:00Z"
    assert q.payload is None and q.payload_bytes is None  # never without --show-payload


def test_payload_only_on_request_and_cut() -> None:
    q = quarantine.quarantined("t", 0, 0, headers(), b"x" * 100, handled=False, show_payload=True)
    assert len(q.payload) == quarantine.PAYLOAD_CHARS and q.payload.endswith("…") and q.payload_bytes == 100


def test_filters() -> None:
    # inspect filters with the reader's own Filter: what it shows is what a drain would take.
    def matches(**flags) -> bool:
        return quarantine.inspect_filter(**flags).matches(headers(), 0)

    assert matches(error_classes=[], reasons=[], since=None)
    assert not matches(error_classes=["KeyError"], reasons=[], since=None)
    assert matches(error_classes=["ValueError"], reasons=["max-attempts"], since=None)
    assert not matches(error_classes=[], reasons=["validation"], since=None)
    assert matches(error_classes=[], reasons=[], since=datetime(2026, 11, 28, 10, 1, tzinfo=timezone.utc))
    assert not matches(error_classes=[], reasons=[], since=datetime(2026, 11, 28, 10, 2, tzinfo=timezone.utc))


def test_table_fits_100_columns_even_with_long_values_and_payloads() -> None:
    long = headers(**{"antidote.original.topic": "a-very-long-topic-name-for-orders-of-the-shop",
                      "antidote.error.class": "requests.exceptions.ConnectionErrorWithALongName",
                      "antidote.reason": "batch-isolation"})
    rows = [quarantine.quarantined("t", 0, i, long, ("ü" * 500).encode() if i else None, handled=i == 1, show_payload=True)
            for i in range(3)]
    lines = table.render_table(rows, show_payload=True)
    assert all(len(line) <= 100 for line in lines)
    assert lines[0].split()[:3] == ["ORIGIN", "REASON", "ERROR"]
    assert "batch-isolation" in lines[1] and "11-28 10:00:00" in lines[1]
    assert lines[2] == "    payload null (a tombstone)"
    assert lines[4].startswith("    payload (1000 bytes): \"üü")
    assert "*" in lines[3]  # handled by a reader already
    short = table.render_table(rows[:1], source="a-very-long-topic-name-for-orders-of-the-shop")
    assert short[1].startswith("0/13 ")  # the consumer's own topic goes without saying


def test_header_line_summarises_status() -> None:
    qc = {"metadata": {"name": "orders", "namespace": "shop"},
          "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Fault"},
                                    {"type": "QueueDisabled", "status": "True", "reason": "Fault"}],
                     "counts": {"processed": 18, "moved": 2, "poisoned": 2}}}
    assert table.header_line(qc) == ("shop/orders: Ready=False(Fault) QueueDisabled=True(Fault); "
                                      "processed 18, moved 2")
