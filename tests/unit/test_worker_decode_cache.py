"""A decoder keeps each schema id's compiled body decoder (worker.decode.decode_registered's
`bodies`): the registry and the compiler are asked once per id, and only for a usable schema,
so an unknown id, one of another type and a registry that was away are asked about again."""

from __future__ import annotations

import pytest

from antidote_consumer.worker import decode as d
from antidote_consumer.worker import registry as r

from .test_worker_decode import AVRO, Schemas, avro, framed, proto


class Asked(Schemas):
    """Schemas that count what they were asked, can be away, and learn new ids later."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[int] = []
        self.away = False
        self.later: dict[int, r.Schema] = {}

    def schema(self, schema_id: int) -> r.Schema:
        self.asked.append(schema_id)
        if self.away:
            raise r.RegistryUnavailable("away")
        if schema_id in self.later:
            self._schemas[schema_id] = self.later[schema_id]
        return super().schema(schema_id)


@pytest.fixture
def compiled(monkeypatch) -> list[str]:
    """The schema texts the Avro body decoder was compiled for, in order."""
    made: list[str] = []
    real = d._BODY_DECODERS["Avro"]

    def counting(schema: r.Schema):
        made.append(schema.text)
        return real(schema)

    monkeypatch.setitem(d._BODY_DECODERS, "Avro", counting)
    return made


def test_each_schema_id_is_looked_up_and_compiled_once_per_decoder(compiled) -> None:
    reg = Asked()
    decode = d.decoder("Avro", reg, "value")
    assert [decode(avro({"id": f"o-{i}", "qty": i})) for i in range(3)] == \
        [{"id": f"o-{i}", "qty": i} for i in range(3)]
    assert reg.asked == [1] and compiled == [AVRO]


def test_an_unknown_id_is_asked_again_and_decodes_once_the_registry_has_it(compiled) -> None:
    reg = Asked()
    decode = d.decoder("Avro", reg, "value")
    body = avro({"id": "o-1", "qty": 1})[5:]
    for _ in range(2):
        with pytest.raises(d.DeserializationError, match="unknown schema id 9"):
            decode(framed(9, body))
    reg.later[9] = r.Schema(9, "AVRO", AVRO)
    assert decode(framed(9, body)) == {"id": "o-1", "qty": 1}
    assert reg.asked == [9, 9, 9] and compiled == [AVRO]


def test_a_registry_that_was_away_is_asked_again(compiled) -> None:
    reg = Asked()
    decode = d.decoder("Avro", reg, "value")
    reg.away = True
    with pytest.raises(r.RegistryUnavailable):
        decode(avro({"id": "o-1", "qty": 1}))
    reg.away = False
    assert decode(avro({"id": "o-1", "qty": 1})) == {"id": "o-1", "qty": 1}
    assert reg.asked == [1, 1] and compiled == [AVRO]


def test_a_schema_of_another_type_is_refused_every_time_and_not_kept(compiled) -> None:
    reg = Asked()
    decode = d.decoder("Avro", reg, "value")
    for _ in range(2):
        with pytest.raises(d.DeserializationError, match="schema id 2 is a PROTOBUF schema, not Avro"):
            decode(proto(b"\x00", id="o-1", qty=1))
    assert reg.asked == [2, 2] and compiled == []


def test_a_bad_record_after_a_good_one_still_says_why(compiled) -> None:
    """The kept decoder raises as the first one did: the record's fault, with the schema id."""
    decode = d.decoder("Avro", Asked(), "value")
    good = avro({"id": "o-1", "qty": 1})
    assert decode(good) == {"id": "o-1", "qty": 1}
    with pytest.raises(d.DeserializationError, match=r"value \(schema id 1\): Avro body does not decode: ValueError: 1 bytes left after the record"):
        decode(good + b"\x02")
    with pytest.raises(d.DeserializationError, match="Avro body does not decode: EOFError"):
        decode(good[:-1])
    assert compiled == [AVRO]


def test_a_schema_that_does_not_compile_is_the_records_fault() -> None:
    reg = Schemas()
    reg._schemas[5] = r.Schema(5, "AVRO", '{"type": "no-such-type"}')
    with pytest.raises(d.DeserializationError, match=r"value \(schema id 5\): Avro body does not decode"):
        d.decoder("Avro", reg, "value")(framed(5, b"\x00"))
