"""Redaction of quarantined payloads (worker.redact, PoisonPolicy spec.quarantine): the field
paths, the walk and replacements per format (Json, Avro, Protobuf, JsonSchema, with the
registry's schemas given in-process), the headers, the value dropped when it cannot be read or
written back, and the HMAC key read from its Secret."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import struct

import fastavro
import pytest

from antidote_api import headers as hn
from antidote_api.policy import PoisonPolicySpec, Quarantine
from antidote_api.redaction import HASH_PREFIX, MARKER, parse_path
from antidote_consumer.worker import decode as d
from antidote_consumer.worker import redact as rd
from antidote_consumer.worker import registry as r

KEY = b"k" * 32
CARD = {"card": {"number": "4111111111111111", "cvv": 123}, "customer": {"email": "a@b.c", "name": "Ann"},
        "lines": [{"sku": "x", "iban": "DE00"}, {"sku": "y", "iban": "FR11"}], "total": 12.5}


def q(*paths, payload="Redact", mode="Mask", **kw) -> Quarantine:
    redact = [{"path": p} if isinstance(p, str) else p for p in paths] or None
    return Quarantine.model_validate({"payload": payload, "redact": redact, "mode": mode,
                                      **({"hashKeyRef": {"name": "k"}} if "Hash" in json.dumps([mode, paths]) else {}), **kw})


def mac(text: str) -> str:
    return HASH_PREFIX + hmac.new(KEY, text.encode(), hashlib.sha256).hexdigest()


def hdrs(res: rd.Redacted) -> dict[str, str]:
    return {k: v.decode() for k, v in res.headers}


# --- paths ---------------------------------------------------------------------------------

def test_paths_parse_into_steps() -> None:
    assert parse_path("$.card.number") == (("key", "card"), ("key", "number"))
    assert parse_path("$['first name'][2][*].*") == (("key", "first name"), ("index", 2), ("any",), ("any",))
    assert parse_path('$["a.b"]') == (("key", "a.b"),)


@pytest.mark.parametrize("bad", ["card.number", "$", "$..a", "$.a[-1]", "$.a.", "$.1a", "$[?(@.a)]"])
def test_bad_paths_are_refused_saying_what(bad: str) -> None:
    with pytest.raises(ValueError, match="field path|does not start|whole record"):
        parse_path(bad)


def test_policy_refuses_redact_without_paths_and_hash_without_key() -> None:
    from pydantic import ValidationError

    from antidote_api.base import explain

    with pytest.raises(ValidationError) as err:
        PoisonPolicySpec.model_validate({"quarantine": {"payload": "Redact"}})
    assert explain(err.value) == ["quarantine.redact: is required when payload is Redact: the field "
                                  "paths to mask or hash"]
    with pytest.raises(ValidationError) as err:
        PoisonPolicySpec.model_validate({"quarantine": {"payload": "Redact", "redact": [
            {"path": "$.a"}, {"path": "$.b"}, {"path": "$.c", "mode": "Hash"}]}})
    assert explain(err.value)[0].startswith("quarantine.hashKeyRef: is required when a field is hashed")
    with pytest.raises(ValidationError) as err:
        PoisonPolicySpec.model_validate({"quarantine": {"payload": "Redact", "redact": [
            {"path": "$.a"}, {"path": "$.b"}, {"path": "$.c d"}]}})
    assert explain(err.value)[0].startswith("quarantine.redact[2].path: ")


# --- the walk (pure) -------------------------------------------------------------------------

def test_walk_replaces_what_the_paths_name_and_reports_which_matched() -> None:
    fields = rd.fields_of(q("$.card.number", "$.lines[*].iban", "$.nope.x", "$.customer.*"))
    new, matched = rd.redact_tree(CARD, fields, rd.json_replacement(None))
    assert matched == ["$.card.number", "$.lines[*].iban", "$.customer.*"]
    assert new["card"] == {"number": MARKER, "cvv": 123}
    assert new["lines"] == [{"sku": "x", "iban": MARKER}, {"sku": "y", "iban": MARKER}]
    assert new["customer"] == {"email": MARKER, "name": MARKER}
    assert new["total"] == 12.5 and CARD["card"]["number"] == "4111111111111111"  # input unchanged


def test_index_past_the_end_and_a_key_on_a_list_match_nothing() -> None:
    fields = rd.fields_of(q("$.lines[5].iban", "$.lines.iban", "$.total.x"))
    assert rd.redact_tree(CARD, fields, rd.json_replacement(None)) == (CARD, [])


def test_json_hash_is_the_hmac_of_the_text_under_the_key() -> None:
    fields = rd.fields_of(q({"path": "$.customer.email", "mode": "Hash"}, "$.card"))
    new, _ = rd.redact_tree(CARD, fields, rd.json_replacement(KEY))
    assert new["customer"]["email"] == mac("a@b.c")
    assert new["card"] == MARKER  # a whole object masked, as JSON has no types to keep
    other, _ = rd.redact_tree(CARD, fields, rd.json_replacement(b"x" * 32))
    assert other["customer"]["email"] != new["customer"]["email"]  # keyed: no key, no lookup table


def test_typed_replacement_keeps_the_type() -> None:
    rep = rd.typed_replacement(KEY)
    assert rep("4111", "Mask") == MARKER and rep("4111", "Hash") == mac("4111")
    assert rep(b"\x01", "Mask") == MARKER.encode() and len(rep(b"\x01", "Hash")) == 32
    assert rep(123, "Mask") == 0 and rep(123, "Hash") == 0  # a number's hash is no number: zeroed
    assert rep(1.5, "Mask") == 0.0 and rep(True, "Mask") is False and rep(None, "Mask") is None
    assert rep({"a": "x", "b": [1], "c": 2}, "Mask") == {"a": MARKER, "b": [], "c": 0}


# --- Json values ------------------------------------------------------------------------------

def test_json_value_masked_others_intact_headers_list_the_paths() -> None:
    red = rd.Redactor(q("$.card.number", "$.customer.email", "$.absent"), "Json", None, None)
    res = red(json.dumps(CARD).encode(), [("trace", b"1")])
    doc = json.loads(res.value)
    assert doc["card"]["number"] == MARKER and doc["customer"]["email"] == MARKER
    assert doc["customer"]["name"] == "Ann" and doc["lines"] == CARD["lines"] and doc["card"]["cvv"] == 123
    assert res.changed and hdrs(res) == {hn.REDACTED: "Redact",
                                         hn.REDACTED_PATHS: '["$.card.number","$.customer.email"]'}


def test_bytes_values_are_read_as_json_too() -> None:
    res = rd.Redactor(q("$.a"), None, None, None)(b'{"a": "secret", "b": 1}')
    assert json.loads(res.value) == {"a": MARKER, "b": 1}


def test_nothing_matched_keeps_the_bytes_and_says_so() -> None:
    value = b'{"x":  1}'
    res = rd.Redactor(q("$.a"), "Json", None, None)(value)
    assert res.value == value and not res.changed and hdrs(res) == {hn.REDACTED: "Redact", hn.REDACTED_PATHS: "[]"}


def test_invalid_json_is_dropped_whole_with_the_reason_and_nothing_of_it() -> None:
    res = rd.Redactor(q("$.a"), "Json", None, None)(b'{"card": "4111111111111111"')
    assert res.value is None and res.changed
    h = hdrs(res)
    assert h[hn.REDACTED] == "Drop" and h[hn.REDACTED_REASON].startswith("value: not JSON")
    assert "4111" not in h[hn.REDACTED_REASON]


def test_drop_removes_the_value_and_keep_changes_nothing() -> None:
    res = rd.Redactor(q(payload="Drop"), "Json", None, None)(b'{"a": 1}')
    assert (res.value, hdrs(res), res.changed) == (None, {hn.REDACTED: "Drop"}, True)
    kept = rd.Redactor(q(payload="Keep"), "Json", None, None)(b'{"a": 1}')
    assert (kept.value, kept.headers) == (b'{"a": 1}', [])


def test_a_record_redacted_once_is_not_redacted_again() -> None:
    red = rd.Redactor(q(payload="Drop"), "Json", None, None)
    res = red(b"x", [(hn.REDACTED, b"Redact")])
    assert (res.value, res.headers) == (b"x", [])


def test_tombstone_stays_a_tombstone() -> None:
    res = rd.Redactor(q("$.a"), "Json", None, None)(None)
    assert res.value is None and not res.changed


# --- registry formats ---------------------------------------------------------------------------

AVRO = json.dumps({"type": "record", "name": "Pay", "fields": [
    {"name": "card", "type": "string"}, {"name": "cvv", "type": "int"},
    {"name": "raw", "type": "bytes"}, {"name": "note", "type": ["null", "string"]},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
    {"name": "who", "type": {"type": "record", "name": "Who", "fields": [
        {"name": "email", "type": "string"}, {"name": "age", "type": "int"}]}}]})
PROTO = """syntax = "proto3";
package shop;
message Pay { string card = 1; int32 cvv = 2; bytes raw = 3; repeated string tags = 4;
  message Who { string email = 1; int32 age = 2; } Who who = 5; repeated Who all = 6; }
"""
JSON_SCHEMA = json.dumps({"type": "object", "properties": {
    "card": {"type": "string"}, "pin": {"type": "string", "pattern": "^[0-9]+$"}, "n": {"type": "integer"}}})
PAY = {"card": "4111111111111111", "cvv": 123, "raw": b"\x01\x02", "note": "hi", "kind": "B",
       "who": {"email": "a@b.c", "age": 40}}


class Schemas(r.Registry):
    def __init__(self) -> None:
        super().__init__("http://registry.test")
        self._schemas = {7: r.Schema(7, "AVRO", AVRO), 8: r.Schema(8, "PROTOBUF", PROTO),
                         9: r.Schema(9, "JSON", JSON_SCHEMA)}

    def _fetch(self, schema_id: int) -> r.Schema:
        raise r.UnknownSchema(schema_id)


def framed(schema_id: int, body: bytes) -> bytes:
    return b"\0" + struct.pack(">I", schema_id) + body


def avro(record: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(json.loads(AVRO)), record)
    return framed(7, out.getvalue())


def test_avro_fields_masked_re_encoded_with_the_same_schema_id() -> None:
    red = rd.Redactor(q("$.card", "$.cvv", "$.who.email", "$.raw", {"path": "$.note", "mode": "Hash"}),
                      "Avro", Schemas(), KEY)
    res = red(avro(PAY))
    assert res.value[:5] == framed(7, b"")
    back = d.decode_registered("Avro", res.value, Schemas(), "value")
    assert back == {**PAY, "card": MARKER, "cvv": 0, "raw": MARKER.encode(), "note": mac("hi"),
                    "who": {"email": MARKER, "age": 40}}
    assert json.loads(hdrs(res)[hn.REDACTED_PATHS]) == ["$.card", "$.cvv", "$.who.email", "$.raw", "$.note"]


def test_avro_field_that_cannot_hold_the_marker_drops_the_value() -> None:
    res = rd.Redactor(q("$.kind"), "Avro", Schemas(), None)(avro(PAY))  # an enum: no such symbol
    h = hdrs(res)
    assert res.value is None and h[hn.REDACTED] == "Drop"
    assert "does not encode with schema id 7" in h[hn.REDACTED_REASON]


def test_undecodable_avro_is_dropped_naming_why() -> None:
    res = rd.Redactor(q("$.card"), "Avro", Schemas(), None)(framed(7, b"\x08abc"))
    assert res.value is None and "schema id 7" in hdrs(res)[hn.REDACTED_REASON]
    res = rd.Redactor(q("$.card"), "Avro", Schemas(), None)(b'{"card": "4111"}')
    assert res.value is None and "magic byte" in hdrs(res)[hn.REDACTED_REASON]
    res = rd.Redactor(q("$.card"), "Avro", Schemas(), None)(framed(99, b"\x00"))
    assert res.value is None and "unknown schema id 99" in hdrs(res)[hn.REDACTED_REASON]


def test_registry_away_is_an_outage_not_a_drop() -> None:
    class Away(Schemas):
        def schema(self, schema_id: int) -> r.Schema:
            raise r.RegistryUnavailable("registry.test: connection refused")

    with pytest.raises(r.RegistryUnavailable):
        rd.Redactor(q("$.card"), "Avro", Away(), None)(avro(PAY))


def test_protobuf_fields_masked_keeping_the_message_indexes() -> None:
    cls = d._proto_class(PROTO, (0,))
    msg = cls(card="4111", cvv=123, raw=b"\x01", tags=["t1", "t2"],
              who=cls.Who(email="a@b.c", age=40), all=[cls.Who(email="x@y", age=1)])
    value = framed(8, b"\x00" + msg.SerializeToString())
    red = rd.Redactor(q("$.card", "$.cvv", "$.tags[1]", "$.who.email", "$.all[*].email",
                        {"path": "$.raw", "mode": "Hash"}), "Protobuf", Schemas(), KEY)
    res = red(value)
    assert res.value[:6] == value[:6]
    back = d.decode_registered("Protobuf", res.value, Schemas(), "value")
    assert (back.card, back.cvv, list(back.tags), back.who.email, back.who.age, back.all[0].email) == (
        MARKER, 0, ["t1", MARKER], MARKER, 40, MARKER)
    assert back.raw == hmac.new(KEY, b"\x01", hashlib.sha256).digest()


def test_json_schema_value_masked_and_checked_against_its_schema() -> None:
    value = framed(9, json.dumps({"card": "4111", "pin": "1234", "n": 5}).encode())
    res = rd.Redactor(q("$.card", "$.n"), "JsonSchema", Schemas(), None)(value)
    assert json.loads(res.value[5:]) == {"card": MARKER, "pin": "1234", "n": 0} and res.value[:5] == value[:5]
    broken = rd.Redactor(q("$.pin"), "JsonSchema", Schemas(), None)(value)  # the marker breaks its pattern
    assert broken.value is None and "breaks its JSON Schema" in hdrs(broken)[hn.REDACTED_REASON]


# --- the key ------------------------------------------------------------------------------------

def test_hmac_key_is_read_from_the_mounted_secret(tmp_path) -> None:
    from antidote_api.policy import SecretKeyRef

    (tmp_path / "redact").mkdir()
    (tmp_path / "redact" / "key").write_bytes(KEY)
    assert rd.hmac_key(SecretKeyRef(name="redact"), str(tmp_path)) == KEY
    with pytest.raises(rd.RedactionKeyError, match="hashKeyRef: key 'other' of Secret redact cannot be read"):
        rd.hmac_key(SecretKeyRef(name="redact", key="other"), str(tmp_path))
    (tmp_path / "redact" / "short").write_bytes(b"abc")
    with pytest.raises(rd.RedactionKeyError, match="at least 16"):
        rd.hmac_key(SecretKeyRef(name="redact", key="short"), str(tmp_path))
