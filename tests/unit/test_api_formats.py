"""spec.source.kafka.valueFormat / keyFormat / schemaRegistry: the models, the effective
settings the consumer runs with, and what the operator renders for them."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from antidote_api.base import explain
from antidote_api.consumer import KafkaSource
from antidote_api.formats import REGISTRY_FORMATS
from antidote_api.semantics import EffectiveSettings
from antidote_operator.builders.driver import secret_names, settings_document, spark_defaults, RenderOptions

from .test_operator_builders import settings

REGISTRY = {"url": "https://registry.example:8081", "secretRef": {"name": "registry-creds"}}


def source(**over) -> dict:
    return {"kafka": {"bootstrapServers": "kafka:9092", "topic": "orders", **over}}


@pytest.mark.parametrize("fmt", REGISTRY_FORMATS)
@pytest.mark.parametrize("field", ["valueFormat", "keyFormat"])
def test_a_registry_format_without_a_registry_is_refused_naming_the_field(fmt: str, field: str) -> None:
    with pytest.raises(ValidationError) as err:
        KafkaSource.model_validate(source(**{field: fmt})["kafka"])
    (line,) = explain(err.value)
    assert line.startswith(f"{field}: ") and "spec.source.kafka.schemaRegistry" in line


@pytest.mark.parametrize("fmt", ["Bytes", "Json"])
def test_bytes_and_json_need_no_registry(fmt: str) -> None:
    assert KafkaSource.model_validate(source(valueFormat=fmt, keyFormat=fmt)["kafka"]).value_format == fmt


def test_the_effective_settings_carry_the_formats_and_the_registry() -> None:
    s = settings(source=source(valueFormat="Avro", keyFormat="Json", schemaRegistry=REGISTRY))
    assert (s.source.value_format, s.source.key_format) == ("Avro", "Json")
    assert s.source.schema_registry is not None
    assert s.source.schema_registry.url == REGISTRY["url"]
    # The document the driver loads has them and loads back to the same settings.
    doc = yaml.safe_load(settings_document(s))
    assert doc["source"]["valueFormat"] == "Avro" and doc["source"]["schemaRegistry"] == REGISTRY
    assert EffectiveSettings.model_validate(doc) == s


def test_a_consumer_without_formats_keeps_its_settings_document() -> None:
    """No new key in the document (whose hash rolls the driver) of a consumer without them."""
    doc = yaml.safe_load(settings_document(settings()))
    assert not {"valueFormat", "keyFormat", "schemaRegistry"} & set(doc["source"])


def test_the_registrys_secret_is_mounted_in_the_driver_and_the_executors() -> None:
    s = settings(source=source(valueFormat="Protobuf", schemaRegistry=REGISTRY))
    assert secret_names(s) == ["registry-creds"]
    conf = spark_defaults(s, RenderOptions())
    assert conf["spark.kubernetes.executor.secrets.registry-creds"].endswith("/registry-creds")
    anonymous = settings(source=source(valueFormat="Avro", schemaRegistry={"url": "http://r:8081"}))
    assert secret_names(anonymous) == []
