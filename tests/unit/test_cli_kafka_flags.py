"""`--kafka-property` checked by librdkafka itself before anything is asked (no traceback
from the first client made), and `-v` on every command that reads Kafka from here
(antidote_cli.kafka_flags; against the stack: tests/integration/test_cli_kafka_flags.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from antidote_api.wire import cli_prefix
from antidote_cli.kafka_flags import QUIET_CLIENT, VERBOSE_CLIENT, log_conf, parse_props
from antidote_cli.main import build_parser, main

from ..api_cases import ROOT

EXAMPLES = ROOT / "examples"


def test_properties_of_either_client_pass() -> None:
    # Consumer-only and producer-only keys both pass: the commands make both kinds of client.
    props = ["isolation.level=read_committed", "enable.idempotence=true", "security.protocol=SSL",
             "ssl.endpoint.identification.algorithm=none", "client.id=on-call", "log_level=7"]
    assert parse_props(props) == dict(p.split("=", 1) for p in props)


@pytest.mark.parametrize(("prop", "says"), [
    ("no.such.property=1", 'No such configuration property: "no.such.property"'),
    ("security.protocol=carrier-pigeon",
     'Invalid value "carrier-pigeon" for configuration property "security.protocol"'),
    ("log_level=loud", 'Invalid value for configuration property "log_level"'),
    ("error_cb=print", "error_cb is the Python client's callback or object, not a property"),
    ("logger=root", "logger is the Python client's callback or object, not a property"),
])
@pytest.mark.parametrize("argv", [
    ["inspect", "orders"],
    ["redrive", "orders"],
    ["redrive", "-f", str(EXAMPLES / "queueconsumer-minimal.yaml"), "--dry-run"],
], ids=["inspect", "redrive-in-cluster", "redrive-local"])
def test_a_property_librdkafka_refuses_is_one_usage_line(argv: list[str], prop: str, says: str,
                                                         tmp_path: Path, monkeypatch, capsys) -> None:
    """Exit 2, one line naming the flag, before any kubeconfig, manifest or broker is read:
    here there is no kubeconfig, and the manifest lacks its policy."""
    for var in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main([*argv, "--kafka-property", prop]) == 2
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", f"{cli_prefix(argv[0])}--kafka-property {prop}: {says}\n")


@pytest.mark.parametrize("command", [["inspect", "c"], ["redrive", "c"], ["reader", "--settings", "s.json"]])
def test_every_command_that_reads_kafka_from_here_takes_v(command: list[str]) -> None:
    p = build_parser()
    quiet, loud = p.parse_args(command), p.parse_args([*command, "-v"])
    assert (log_conf(quiet), log_conf(loud)) == (QUIET_CLIENT, VERBOSE_CLIENT)


def test_quiet_means_no_librdkafka_lines() -> None:
    assert QUIET_CLIENT == {"log_level": "0"}  # librdkafka's LOG_EMERG: nothing it writes
    assert log_conf(argparse.Namespace()) == QUIET_CLIENT
