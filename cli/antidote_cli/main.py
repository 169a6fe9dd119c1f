"""Entry point: `antidote <command> ...`."""

from __future__ import annotations

import argparse
import sys

from antidote_api.wire import CliExit

from . import consumer, crds, demo, dev, operator, rebase, skip
from .errors import CliError, Parser, fail
from .oncall import commands as oncall
from .version import version
from . import reader as reader_cli


def build_parser() -> argparse.ArgumentParser:
    # Parser: one-line usage errors with the command's prefix, exit 2 (docs/cli.md).
    parser = Parser(
        prog="antidote",
        description="Poison-message handling for Kafka consumers on Spark and Kubernetes.")
    parser.add_argument("--version", action="version", version=f"antidote {version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    dev.register(commands)
    demo.register(commands)
    crds.register(commands)
    consumer.register(commands)
    operator.register(commands)
    reader_cli.register(commands)
    oncall.register(commands)  # after reader: `redrive CONSUMER` joins its `redrive`
    skip.register(commands)
    rebase.register(commands)
    return parser


# The `consumer` extra (pyproject.toml): what only `antidote consumer`, `reader` and the
# demo's dev runner import. The operator's image and a CLI-only install leave it out.
# The decoders of valueFormat/keyFormat (worker/decode.py, imported when first used) by
# distribution and by module name where they differ (protobuf's module is google.protobuf,
# whose `google` namespace other packages share: not listed).
CONSUMER_EXTRA = frozenset({"pyspark", "py4j", "pyarrow", "pandas", "numpy",
                            "fastavro", "protobuf", "grpcio-tools", "grpc_tools"})
# The dev tooling (dev/: the local stack, the demo, the dev runner): in a checkout and in the
# antidote package, never in the images (docker/*.Dockerfile copy the folders they run).
DEV_TOOLING = frozenset({"antidote_devstack", "antidote_demo", "antidote_devrunner", "antidote_testkit"})


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args) or 0
    except CliError as err:  # every command's one error line, with its prefix
        return fail(args.command, str(err), err.code)
    except KeyboardInterrupt:
        return CliExit.INTERRUPTED
    except ModuleNotFoundError as err:
        package = (err.name or "").partition(".")[0]
        if package in DEV_TOOLING:
            return fail(args.command, f"needs the dev tooling ({package}), which the images leave "
                                      "out: run it from a checkout or an installed antidote package")
        if package == "antidote_operator":  # the consumer image carries no operator
            return fail(args.command, "needs the operator (antidote_operator), which the consumer "
                                      "image leaves out: run it from the operator image")
        if package not in CONSUMER_EXTRA:
            raise
        return fail(args.command, f"needs {package}, from the 'consumer' extra: "
                                  "pip install 'antidote[consumer]' (the consumer image has it)")


if __name__ == "__main__":
    sys.exit(main())
