"""`antidote inspect --decode`'s pure parts: records decoded with the workers' decoders (the
registry's answers given in-process), what does not decode says why, the table's line, and
the refusals (a Bytes consumer, a missing decoder package, a registry not reachable)."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest

from antidote_api.consumer import KafkaSource
from antidote_cli.errors import CliError
from antidote_cli.oncall import decoded as dd, quarantine, table
from antidote_consumer.worker import decode as d
from antidote_consumer.worker.registry import auth_header

from .test_cli_oncall import headers
from .test_worker_decode import PROTO, Schemas, avro, proto


def settings(**source) -> SimpleNamespace:
    src = KafkaSource.model_validate({"bootstrapServers": "k:9092", "topic": "orders", **source})
    return SimpleNamespace(namespace="shop", consumer="orders", source=src)


def test_a_record_decodes_to_its_value_and_key_as_json_can_show_them() -> None:
    decode = dd.record_decoder("Avro", "Json", Schemas())
    assert decode(b'{"k": 1}', avro({"id": "o-1", "qty": 2})) == {"value": {"id": "o-1", "qty": 2}, "key": {"k": 1}}
    refund = dd.record_decoder("Protobuf", None, Schemas())(None, proto(b"\x02\x02"))  # the second message
    assert refund == {"value": {"@type": "shop.Refund"}}
    order = d._proto_class(PROTO, (0,))(id="o-2", qty=5)
    assert dd.jsonable(order) == {"@type": "shop.Order", "id": "o-2", "qty": 5}
    assert dd.jsonable({"raw": b"\x00\xff", "n": [1, b"a"]}) == {"raw": "b64:AP8=", "n": [1, "b64:YQ=="]}


def test_a_record_that_does_not_decode_says_why() -> None:
    decode = dd.record_decoder("Avro", None, Schemas())
    out = decode(None, b"plain text")
    assert out == {"error": "value: magic byte is 112, not 0: not in the Confluent wire format (a producer "
                            "without the registry?)"}
    assert dd.decoded_text(out).startswith("undecodable: value: magic byte is 112")
    assert dd.decoded_text({"value": {"id": "ü"}, "key": None}) == 'decoded key null, value {"id":"ü"}'


def test_the_table_shows_the_decoded_form_under_its_row_cut_to_the_width() -> None:
    q = quarantine.quarantined("orders.poison", 0, 4, headers(), b"x", handled=False, show_payload=False)
    q.decoded = {"value": {"note": "n" * 300}}
    lines = table.render_table([q], source="orders")
    assert lines[2].startswith('    decoded value {"note":"nnn') and len(lines[2]) == table.WIDTH
    q.decoded = None
    assert len(table.render_table([q], source="orders")) == 2  # nothing without --decode


def test_a_consumer_of_bytes_has_nothing_to_decode() -> None:
    with pytest.raises(CliError, match="reads its values and keys as Bytes .* nothing to decode"):
        with dd.decoding(settings(), registry_url=None, secret=None):
            pass


def test_json_needs_no_registry_and_the_registry_url_can_be_replaced() -> None:
    with dd.decoding(settings(valueFormat="Json"), registry_url=None, secret=None) as decode:
        assert decode(None, b'{"a": 1}') == {"value": {"a": 1}}
        assert "error" in decode(None, b"{")


def test_the_registrys_secret_is_read_into_a_private_directory_for_the_command_only(monkeypatch) -> None:
    seen = {}

    class Spy(dd.Registry):
        def __init__(self, url, secret_dir=None):
            super().__init__(url, secret_dir)
            seen["url"], seen["auth"] = url, auth_header(secret_dir)  # read while the command runs

    monkeypatch.setattr(dd, "Registry", Spy)
    s = settings(valueFormat="Avro", schemaRegistry={"url": "http://in-cluster:8080", "secretRef": {"name": "reg"}})
    asked = []
    with dd.decoding(s, registry_url="http://localhost:18080",
                     secret=lambda name: asked.append(name) or {"token": b"tok"}):
        pass
    assert asked == ["reg"] and seen == {"url": "http://localhost:18080", "auth": {"Authorization": "Bearer tok"}}


def test_a_registry_not_reachable_from_here_stops_the_command_naming_the_flag() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    s = settings(valueFormat="Avro", schemaRegistry={"url": f"http://127.0.0.1:{port}"})
    with dd.decoding(s, registry_url=None, secret=None) as decode:
        with pytest.raises(CliError, match=f"cannot ask the schema registry: .*127.0.0.1:{port}.*--schema-registry"):
            decode(None, avro({"id": "a", "qty": 1}))


def test_a_missing_decoder_package_is_named(monkeypatch) -> None:
    import importlib

    real = importlib.import_module

    def no_fastavro(name, *a):
        if name == "fastavro":
            raise ImportError(name)
        return real(name, *a)

    monkeypatch.setattr(importlib, "import_module", no_fastavro)
    with pytest.raises(CliError, match=r"Avro needs the Python package of fastavro.*antidote\[consumer\]"):
        with dd.decoding(settings(valueFormat="Avro", schemaRegistry={"url": "http://r:1"}), registry_url=None,
                         secret=None):
            pass


def test_inspect_takes_decode_and_schema_registry() -> None:
    from antidote_cli.main import build_parser

    args = build_parser().parse_args(["inspect", "orders", "--decode", "--schema-registry", "http://localhost:1"])
    assert args.decode and args.schema_registry == "http://localhost:1"
