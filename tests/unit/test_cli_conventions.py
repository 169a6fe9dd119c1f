"""The CLI's conventions (docs/cli.md): one output flag `-o table|json|yaml`, one error prefix
`antidote <command>: `, usage errors exit 2 in one line, `--from`/`--dlq` and
`-f`/`--consumer` as aliases, multi-document manifests, and no traceback for a missing
kubeconfig. Parsing is tested in-process; the commands that need a cluster or Kafka in
tests/integration/test_cli_output.py."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from antidote_api.wire import CONSUMER_PREFIX, CliExit, ExitCode, cli_prefix
from antidote_cli.main import build_parser, main
from antidote_cli.output import FORMATS, render
from antidote_consumer.settings import SettingsError, from_manifests

from ..api_cases import ROOT

EXAMPLES = ROOT / "examples"
# Every command that prints data (a table, or a document for scripts).
DATA_COMMANDS = ("inspect", "resume", "drain", "redrive", "reader", "skip", "rebase")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own exits (its usage errors: Parser.error)
        code = exit_.code
    return int(code), capsys.readouterr().err


def test_every_data_command_has_the_one_output_flag() -> None:
    commands = _subparsers(build_parser())
    for name in DATA_COMMANDS:
        output = next(a for a in commands[name]._actions if "-o" in a.option_strings)
        assert (output.option_strings, tuple(output.choices), output.default) == (
            ["-o", "--output"], FORMATS, "table"), name
    # ...and no command has another -o.
    for name, p in commands.items():
        for a in p._actions:
            if "-o" in a.option_strings:
                assert tuple(a.choices) == FORMATS, name


@pytest.mark.parametrize("spelling", ["text", "table"])
def test_text_is_an_alias_of_table(spelling: str) -> None:
    args = build_parser().parse_args(["redrive", "orders", "-o", spelling])
    assert args.output == "table"


def test_yaml_is_the_json_document() -> None:
    doc = {"starts": {0: 5, 1: 7}, "when": "2026-11-28T10:00:00Z", "n": None, "yes": "yes",
           "rows": [{"offset": 1, "payload": "ünï"}]}
    assert yaml.safe_load(render(doc, "yaml")) == json.loads(render(doc, "json"))


@pytest.mark.parametrize("command", ["inspect", "drain", "redrive", "reader"])
def test_from_dlq_and_its_alias_dlq_mean_the_same(command: str) -> None:
    p = build_parser()
    base = {"inspect": ["inspect", "c"], "drain": ["drain", "c"], "redrive": ["redrive", "c"],
            "reader": ["reader", "--settings", "s.json"]}[command]
    assert p.parse_args([*base, "--from", "dlq"]).source == "dlq"
    assert p.parse_args([*base, "--dlq"]).source == "dlq"
    assert p.parse_args(base).source == "poison"


@pytest.mark.parametrize("command", ["consumer", "reader", "redrive"])
@pytest.mark.parametrize("flag", ["-f", "--consumer-file", "--consumer"])
def test_consumer_file_has_the_old_name_as_an_alias(command: str, flag: str) -> None:
    args = build_parser().parse_args([command, flag, "qc.yaml"])
    assert args.consumer == Path("qc.yaml")


def test_one_prefix_for_every_error_line_and_the_operators_contract() -> None:
    assert cli_prefix("inspect") == "antidote inspect: "
    # The operator reads the consumer's refusals by CONSUMER_PREFIX: the same function's.
    assert CONSUMER_PREFIX == cli_prefix("consumer")
    # The CLI's codes beside the consumer's own (unchanged: the operator reads them).
    assert (CliExit.ERROR, CliExit.USAGE) == (1, 2)
    assert [int(c) for c in ExitCode] == [0, 2, 3, 4, 5, 6]


USAGE_ERRORS = [
    (["inspect"], "inspect", "the following arguments are required: consumer"),
    (["inspect", "c", "-o", "xml"], "inspect", "argument -o/--output: invalid choice: 'xml'"),
    (["drain", "c", "--rate", "fast"], "drain", "argument --rate: invalid int value: 'fast'"),
    (["explode"], "", "invalid choice: 'explode'"),
    (["inspect", "c", "--bogus"], "inspect", "unrecognized arguments: --bogus (see antidote inspect --help)"),
    (["reader"], "reader", "one of the arguments --settings -f/--consumer-file/--consumer is required"),
    (["redrive"], "redrive", "name a consumer"),
    (["redrive", "c", "-f", "qc.yaml"], "redrive", "not both"),
    (["redrive", "-f", str(EXAMPLES / "queueconsumer-minimal.yaml"), "--kubeconfig", "k"], "redrive",
     "--kubeconfig and --context are for a consumer in the cluster"),
    (["inspect", "c", "--kafka-property", "nokey"], "inspect", "--kafka-property: 'nokey' is not KEY=VALUE"),
]


@pytest.mark.parametrize(("argv", "command", "says"), USAGE_ERRORS, ids=[" ".join(a[:2]) for a, _, _ in USAGE_ERRORS])
def test_usage_errors_exit_2_in_one_line_with_the_prefix(argv, command, says, capsys) -> None:
    code, err = _run(argv, capsys)
    assert code == 2, err
    (line,) = err.splitlines()
    assert line.startswith(cli_prefix(command)) and says in line, line


def test_a_settings_file_without_cluster_refuses_another_namespace(tmp_path: Path, capsys) -> None:
    both = tmp_path / "qc+pp.yaml"
    both.write_text((EXAMPLES / "queueconsumer-minimal.yaml").read_text() + "---\n"
                    + (EXAMPLES / "poisonpolicy-minimal.yaml").read_text())
    code, err = _run(["redrive", "-f", str(both), "-n", "shop", "--dry-run"], capsys)
    assert code == 2
    assert err == ("antidote redrive: -n shop: these settings are consumer default/audit's; -n chooses "
                   "a consumer in the cluster (with CONSUMER)\n")


# --- multi-document manifests -------------------------------------------------------------------

def test_a_consumer_and_its_policy_in_one_file(tmp_path: Path) -> None:
    qc, pp = (EXAMPLES / "queueconsumer-minimal.yaml").read_text(), (EXAMPLES / "poisonpolicy-minimal.yaml").read_text()
    both = tmp_path / "qc+pp.yaml"
    both.write_text(f"{pp}---\n{qc}")  # any order, as kubectl apply -f takes them
    assert from_manifests(both) == from_manifests(EXAMPLES / "queueconsumer-minimal.yaml",
                                                  EXAMPLES / "poisonpolicy-minimal.yaml")
    # A second policy in the file: the one the consumer refers to is taken.
    other = yaml.safe_load(pp)
    other["metadata"]["name"] = "other"
    other["spec"] = {"disposition": "Fault"}
    both.write_text(f"{qc}---\n{yaml.safe_dump(other)}---\n{pp}")
    assert from_manifests(both).disposition == from_manifests(
        EXAMPLES / "queueconsumer-minimal.yaml", EXAMPLES / "poisonpolicy-minimal.yaml").disposition


def test_a_manifest_file_that_does_not_fit_is_refused_naming_it(tmp_path: Path) -> None:
    qc = (EXAMPLES / "queueconsumer-minimal.yaml").read_text()
    only = tmp_path / "qc.yaml"
    only.write_text(qc)
    with pytest.raises(SettingsError, match="refers to PoisonPolicy 'default': give it with --policy FILE"):
        from_manifests(only)
    two = tmp_path / "two.yaml"
    two.write_text(f"{qc}---\n{qc}")
    with pytest.raises(SettingsError, match=r"two.yaml has 2 QueueConsumers \('audit', 'audit'\); give one per file"):
        from_manifests(two, EXAMPLES / "poisonpolicy-minimal.yaml")
    policy_only = tmp_path / "pp.yaml"
    policy_only.write_text((EXAMPLES / "poisonpolicy-minimal.yaml").read_text())
    with pytest.raises(SettingsError, match=r"pp.yaml has no QueueConsumer \(its documents: PoisonPolicy\)"):
        from_manifests(policy_only, policy_only)


def test_the_consumer_takes_a_two_document_manifest(tmp_path: Path, capsys) -> None:
    """`antidote consumer -f qc+pp.yaml` reads both documents (paused: it stops before Spark)."""
    qc = yaml.safe_load((EXAMPLES / "queueconsumer-minimal.yaml").read_text())
    qc["spec"]["paused"] = True
    both = tmp_path / "qc+pp.yaml"
    both.write_text(yaml.safe_dump(qc) + "---\n" + (EXAMPLES / "poisonpolicy-minimal.yaml").read_text())
    code, err = _run(["consumer", "-f", str(both)], capsys)
    assert (code, err) == (0, "antidote consumer: audit is paused (spec.paused); nothing to do\n")


# --- no traceback without a kubeconfig ------------------------------------------------------------

def _antidote(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "antidote_cli.main", *argv], capture_output=True,
                          text=True, timeout=120, env=env, cwd=ROOT)


@pytest.mark.parametrize("where", ["missing-file", "no-kubeconfig-at-all"])
@pytest.mark.parametrize("command", ["inspect", "resume", "drain", "redrive", "skip", "rebase", "operator"])
def test_a_missing_kubeconfig_is_one_line(command: str, where: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = str(tmp_path)  # no ~/.kube/config
    if where == "missing-file":
        env["KUBECONFIG"] = str(tmp_path / "nope")
    argv = {"operator": ["operator", "-n", "x", "--metrics-port", "0"],
            "rebase": ["rebase", "orders", "--topic", "t"]}.get(command, [command, "orders"])
    out = _antidote(*argv, env=env)
    assert "Traceback" not in out.stderr, out.stderr
    lines = [line for line in out.stderr.splitlines() if "antidote.operator" not in line]  # its start line
    assert len(lines) == 1 and lines[0].startswith(cli_prefix(command)), out.stderr
    assert "kubeconfig" in lines[0] or "no configuration found" in lines[0].lower(), lines[0]
    # The on-call commands: a runtime error; the operator refuses to start (exit 2, as the
    # consumer on bad settings, restarted with back-off in its pod).
    assert out.returncode == (2 if command == "operator" else 1), out.stderr


# --- skip and rebase: their documents as JSON and YAML ------------------------------------------
# (Their Kafka work, a consumer stopped by a Fault or a recreated topic, is tested against the
# stack in test_skip_cli.py and test_consumer_recreated_topics.py; here only what they print.)

def _settings_file(tmp_path: Path) -> Path:
    s = from_manifests(EXAMPLES / "queueconsumer-minimal.yaml", EXAMPLES / "poisonpolicy-minimal.yaml")
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(s.model_dump(mode="json", by_alias=True)))
    return path


def _as_json_and_yaml(argv: list[str], capsys) -> tuple[object, object]:
    docs = []
    for fmt in ("json", "yaml"):
        assert main([*argv, "-o", fmt]) == 0
        out = capsys.readouterr().out
        docs.append(json.loads(out) if fmt == "json" else yaml.safe_load(out))
    return docs[0], docs[1]


def test_skip_prints_one_document_as_json_or_yaml(tmp_path: Path, capsys, monkeypatch) -> None:
    from antidote_consumer.reader import skip

    done = skip.Skipped(topic="audit-events", partition=0, offset=5, origin="audit-events/0/5",
                        reason="max-attempts", error_class="ValueError",
                        poison_topic="audit-events.poison", dry_run=True)
    monkeypatch.setattr(skip, "skip_fault", lambda settings, dry_run: done)
    as_json, as_yaml = _as_json_and_yaml(["skip", "audit", "--settings", str(_settings_file(tmp_path)),
                                          "--dry-run"], capsys)
    assert as_yaml == as_json == {**done.__dict__}


def test_rebase_prints_one_document_as_json_or_yaml(tmp_path: Path, capsys, monkeypatch) -> None:
    from antidote_consumer.driver import rebase, recreated

    found = recreated.Recreated(topic="t", recorded_id="a", current_id="b", positions={0: (42, 0)})
    monkeypatch.setattr(rebase, "rebase", lambda settings, topic, dry_run: rebase.Rebased(
        topic=topic, found=found, starts={0: 0, 1: 3}, source=False, dry_run=dry_run))
    as_json, as_yaml = _as_json_and_yaml(["rebase", "audit", "--topic", "t", "--settings",
                                          str(_settings_file(tmp_path)), "--dry-run"], capsys)
    assert as_yaml == as_json == [{"topic": "t", "starts": {"0": 0, "1": 3}, "source": False, "dryRun": True}]


@pytest.mark.parametrize("command", ["skip", "rebase"])
def test_local_settings_refuse_the_flags_that_choose_a_cluster_consumer(command: str, tmp_path: Path, capsys) -> None:
    extra = ["--topic", "t"] if command == "rebase" else []
    path = str(_settings_file(tmp_path))
    for argv, says in ((["audit", "--kubeconfig", "k"], "--kubeconfig and --context are for a consumer in the cluster"),
                       (["orders"], "consumer 'orders': these settings are consumer default/audit's"),
                       (["audit", "-n", "shop"], "-n shop: these settings are consumer default/audit's")):
        code, err = _run([command, *argv, *extra, "--settings", path, "--dry-run"], capsys)
        assert code == 2, err
        assert err.startswith(cli_prefix(command)) and says in err and len(err.splitlines()) == 1, err
