"""The Kafka flags of the commands that read Kafka from here (`inspect`, `redrive`, `reader`):
`--bootstrap-servers`, `--kafka-property KEY=VALUE` and `-v` (docs/cli.md).

A property is checked by librdkafka itself before anything is asked: a key it does not
know or a value it refuses would otherwise surface as a traceback from the first client
made. librdkafka also logs every failed connection attempt (~600 lines in the 30 s a dead
broker took to give up): off unless `-v` (then its default level, 6); the failure itself is
said in one line."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .errors import usage_error

QUIET_CLIENT, VERBOSE_CLIENT = {"log_level": "0"}, {"log_level": "6"}
# The Python client's own keys: functions and objects, which a command line cannot give.
PYTHON_ONLY = frozenset({"error_cb", "throttle_cb", "stats_cb", "oauth_cb", "on_delivery",
                         "on_commit", "logger"})


def add_kafka_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap-servers", default=None,
                   help="reach Kafka here instead of the consumer's bootstrapServers (from outside the cluster)")
    p.add_argument("--kafka-property", action="append", metavar="KEY=VALUE",
                   help="extra Kafka client property, e.g. security.protocol=SSL (repeatable)")


def add_verbose_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("-v", "--verbose", action="store_true",
                   help="also print the Kafka client's (librdkafka's) own log lines")


def log_conf(args: argparse.Namespace) -> dict[str, str]:
    """librdkafka's log level as -v asks (a --kafka-property log_level= given after it wins)."""
    return dict(VERBOSE_CLIENT if getattr(args, "verbose", False) else QUIET_CLIENT)


def parse_props(items: Sequence[str]) -> dict[str, str]:
    """`--kafka-property` items as a dict; each one checked by librdkafka (exit 2 naming it)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise usage_error(f"--kafka-property: {item!r} is not KEY=VALUE")
        refused = (f"{key} is the Python client's callback or object, not a property"
                   if key in PYTHON_ONLY else refusal({key: value}))
        if refused is not None:
            raise usage_error(f"--kafka-property {item}: {refused}")
        out[key] = value
    if len(out) > 1 and (refused := refusal(out)) is not None:  # a pair that cannot go together
        raise usage_error(f"--kafka-property: {refused}")
    return out


def refusal(props: dict[str, str]) -> str | None:
    """Why librdkafka refuses these client properties, or None. A client made without
    bootstrap.servers connects nowhere; consumer-only keys are only a warning on it (its log
    lines go nowhere), so any client's property passes."""
    import logging

    from confluent_kafka import KafkaError, KafkaException, Producer

    silent = logging.getLogger("antidote.kafka-property-check")  # its warnings: not ours to say
    if not silent.handlers:
        silent.addHandler(logging.NullHandler())
        silent.propagate = False
    try:
        Producer({**props, "logger": silent})
    except KafkaException as err:
        kerr = err.args[0] if err.args else None
        return kerr.str() if isinstance(kerr, KafkaError) else str(err)
    except (TypeError, ValueError) as err:
        return str(err)
    return None
