"""spec.sink.kafka.valueFormat / schemaRegistry: the model's refusal of an encoded sink without
a registry, the effective settings (the sink's registry, or the source's), the WorkerConfig the
workers get, and what the operator renders for them."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from antidote_api.base import explain
from antidote_api.consumer import QueueConsumerSpec
from antidote_api.formats import REGISTRY_FORMATS
from antidote_api.semantics import EffectiveSettings
from antidote_consumer.driver.worker_config import worker_config
from antidote_operator.builders.driver import secret_names, settings_document

from .test_api_formats import REGISTRY, source
from .test_operator_builders import settings

SINK_REGISTRY = {"url": "http://sink-registry:8080/apis/ccompat/v6", "secretRef": {"name": "sink-registry-creds"}}


def sink(**over) -> dict:
    return {"kafka": {"topic": "orders-out", **over}}


@pytest.mark.parametrize("fmt", REGISTRY_FORMATS)
def test_an_encoded_sink_without_any_registry_is_refused_naming_the_field(fmt: str) -> None:
    spec = {"policyRef": {"name": "p"}, "handler": "shop.h:f", "checkpoint": {"location": "/tmp/c"},
            "source": source(), "sink": sink(valueFormat=fmt)}
    with pytest.raises(ValidationError) as err:
        QueueConsumerSpec.model_validate(spec)
    (line,) = explain(err.value)
    assert line.startswith("sink.kafka.valueFormat: ") and "spec.sink.kafka.schemaRegistry" in line, line
    # Either registry will do.
    QueueConsumerSpec.model_validate({**spec, "sink": sink(valueFormat=fmt, schemaRegistry=SINK_REGISTRY)})
    QueueConsumerSpec.model_validate({**spec, "source": source(schemaRegistry=REGISTRY)})


def test_the_sink_uses_its_own_registry_or_else_the_sources() -> None:
    own = settings(source=source(schemaRegistry=REGISTRY), sink=sink(valueFormat="Avro", schemaRegistry=SINK_REGISTRY))
    assert own.sink is not None and own.sink.kafka is not None
    assert own.sink.kafka.value_format == "Avro"
    assert own.sink.kafka.schema_registry is not None and own.sink.kafka.schema_registry.url == SINK_REGISTRY["url"]
    assert secret_names(own) == ["registry-creds", "sink-registry-creds"]  # both mounted
    inherited = settings(source=source(schemaRegistry=REGISTRY), sink=sink(valueFormat="Protobuf"))
    assert inherited.sink is not None and inherited.sink.kafka is not None
    assert inherited.sink.kafka.schema_registry == inherited.source.schema_registry
    doc = yaml.safe_load(settings_document(inherited))
    assert doc["sink"]["kafka"]["valueFormat"] == "Protobuf"
    assert EffectiveSettings.model_validate(doc) == inherited


def test_the_workers_get_the_format_the_subject_and_the_registry() -> None:
    cfg = worker_config(settings(source=source(schemaRegistry={"url": "http://r:8081"}),
                                 sink=sink(valueFormat="JsonSchema")))
    assert cfg.sink_format == {"value": "JsonSchema", "subject": "orders-out-value",
                               "registry": {"url": "http://r:8081", "secret_dir": None}}
    with_secret = worker_config(settings(sink=sink(valueFormat="Avro", schemaRegistry=SINK_REGISTRY)))
    assert with_secret.sink_format is not None
    assert with_secret.sink_format["registry"]["secret_dir"].endswith("/sink-registry-creds")


@pytest.mark.parametrize("value_format", [None, "Bytes"])
def test_a_bytes_sink_keeps_its_settings_document_and_encodes_nothing(value_format: str | None) -> None:
    """No new key in the document (whose hash rolls the driver), not even the source's registry."""
    over = {} if value_format is None else {"valueFormat": value_format}
    s = settings(source=source(schemaRegistry=REGISTRY, valueFormat="Avro"), sink=sink(**over))
    doc = yaml.safe_load(settings_document(s))
    assert not {"valueFormat", "schemaRegistry"} & set(doc["sink"]["kafka"])
    assert worker_config(s).sink_format is None
