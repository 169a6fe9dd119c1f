"""Which files of a Spark checkpoint the consumer removes before a start (driver.checkpoint)."""

from __future__ import annotations

from antidote_consumer.driver.checkpoint import torn_first_write

TEMP = ".0.479e21dc-aae5-4422-9ee0-a26d3f34664c.tmp"
CRC = "..0.479e21dc-aae5-4422-9ee0-a26d3f34664c.tmp.crc"


def test_the_remains_of_a_first_write_cut_short_are_removed() -> None:
    assert torn_first_write({"offsets": [TEMP, CRC], "commits": []}) == [("offsets", TEMP), ("offsets", CRC)]
    assert torn_first_write({"offsets": [TEMP], "commits": [TEMP.replace("479e", "9999")]}) == [
        ("offsets", TEMP), ("commits", TEMP.replace("479e", "9999"))]


def test_a_checkpoint_with_an_entry_or_a_file_of_its_own_is_left_alone() -> None:
    # A later batch's write cut short costs nothing: Spark reads the entries only.
    assert torn_first_write({"offsets": ["0", ".0.crc", TEMP.replace(".0.", ".1."), CRC], "commits": ["0"]}) == []
    # Anything else is not ours to remove: Spark's own check stops a shared checkpoint.
    assert torn_first_write({"offsets": [TEMP, "notes.txt"], "commits": []}) == []
    assert torn_first_write({"offsets": [TEMP], "commits": ["0"]}) == []
    # Nothing there: nothing to do.
    assert torn_first_write({"offsets": [], "commits": []}) == []
    assert torn_first_write({}) == []
