"""Bad input to the CLI is one line and one exit code (docs/cli.md, "Errors and exit
codes"): a file that is not YAML is named with its line and column (PyYAML's quoted source
lines would make it five), a settings file or manifest refused is exit 2 in every command
that takes one, and a bad time flag or drain request is a usage error (exit 2) as argparse's own."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from antidote_api.wire import cli_prefix
from antidote_cli.main import main
from antidote_consumer.settings import yaml_problem

NOT_YAML = "kind: QueueConsumer\nspec:\n  a: [1, 2\n  b: 3\n"


def _run(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own usage errors
        code = exit_.code
    return int(code), capsys.readouterr().err


@pytest.mark.parametrize("text, says", [
    (NOT_YAML, "while parsing a flow sequence; expected ',' or ']', but got ':' (line 4, column 4)"),
    ("a: b: c\n", "mapping values are not allowed here (line 1, column 5)"),
    ('a: "x\n', "while scanning a quoted scalar; found unexpected end of stream (line 2, column 1)"),
])
def test_a_yaml_error_is_one_line_with_where(text: str, says: str) -> None:
    with pytest.raises(yaml.YAMLError) as err:
        list(yaml.safe_load_all(text))
    assert yaml_problem(err.value) == says


@pytest.mark.parametrize("argv", [
    ["consumer", "-f", "{file}"],
    ["reader", "-f", "{file}"],
    ["redrive", "-f", "{file}", "--dry-run"],
    ["reader", "--settings", "{file}"],
    ["redrive", "--settings", "{file}", "--dry-run"],
    ["skip", "audit", "--settings", "{file}", "--dry-run"],
    ["rebase", "audit", "--topic", "t", "--settings", "{file}", "--dry-run"],
], ids=lambda a: " ".join(a[:3]))
@pytest.mark.parametrize("content", ["not-yaml", "missing"])
def test_a_settings_file_or_manifest_refused_is_exit_2_in_one_line(argv: list[str], content: str,
                                                                   tmp_path: Path, capsys) -> None:
    path = tmp_path / "qc.yaml"
    if content == "not-yaml":
        path.write_text(NOT_YAML)
    code, err = _run([a.replace("{file}", str(path)) for a in argv], capsys)
    assert code == 2, err
    (line,) = err.splitlines()
    assert line.startswith(cli_prefix(argv[0])) and str(path) in line, line
    assert ("(line 4, column 4)" if content == "not-yaml" else "No such file or directory") in line, line


@pytest.mark.parametrize("argv, flag", [
    (["inspect", "orders", "--since", "yesterday"], "--since"),
    (["drain", "orders", "--since", "yesterday"], "--since"),
    (["drain", "orders", "--until", "later"], "--until"),
])
def test_a_bad_time_is_a_usage_error_before_the_cluster(argv: list[str], flag: str, capsys, monkeypatch,
                                                        tmp_path: Path) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no kubeconfig: the flag is named first
    code, err = _run(argv, capsys)
    assert code == 2, err
    value = argv[-1]
    assert err == f"{cli_prefix(argv[0])}{flag}: {value!r} is not an ISO 8601 time (e.g. 2026-11-22T10:00:00Z)\n"


@pytest.mark.parametrize("argv, says", [
    (["drain", "orders", "--rate", "0"], "--rate must be at least 1 message per second, not 0"),
    (["drain", "orders", "--rate", "-5"], "--rate must be at least 1 message per second, not -5"),
    (["drain", "orders", "--request-id", " "],
     "the drain request: the value is empty; set a request id (any text) or a JSON request"),
])
def test_drain_refuses_a_request_the_operator_would_refuse(argv: list[str], says: str, capsys, monkeypatch,
                                                           tmp_path: Path) -> None:
    """Before the cluster (no kubeconfig here): the operator parses the annotation with the
    same parse_drain and would refuse it only as an Event (rate 0 would mean no limit)."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    code, err = _run(argv, capsys)
    assert (code, err) == (2, f"{cli_prefix('drain')}{says}\n")


def test_a_stack_refusal_is_one_line_with_the_actions_prefix(capsys) -> None:
    """`antidote dev up: ...` as its usage errors (Parser: `antidote dev up: ... --help`)."""
    import argparse

    from antidote_cli.dev import _guarded
    from antidote_devstack.errors import StackError

    def up(args: argparse.Namespace) -> int:
        raise StackError("start kafka", "port 9092 is taken")

    assert _guarded(up)(argparse.Namespace(action="up")) == 1
    assert capsys.readouterr().err == f"{cli_prefix('dev up')}start kafka: port 9092 is taken\n"


def test_settings_an_operator_of_another_version_wrote_are_one_line() -> None:
    """The CLI older than the operator: a field it does not know in ConfigMap
    `<consumer>-settings` (the models refuse extra fields) is said, not a pydantic traceback."""
    import json

    from antidote_cli.oncall.cluster import CliError, parse_settings
    from antidote_consumer.settings import from_manifests

    from ..api_cases import ROOT as repo

    s = from_manifests(repo / "examples" / "queueconsumer-minimal.yaml", repo / "examples" / "poisonpolicy-minimal.yaml")
    doc = s.model_dump(mode="json", by_alias=True)
    assert parse_settings("audit-settings", json.dumps(doc)) == s
    with pytest.raises(CliError) as err:
        parse_settings("audit-settings", json.dumps({**doc, "fromANewerOperator": None}))
    (line,) = str(err.value).splitlines()
    assert line.startswith('ConfigMap "audit-settings": settings this antidote (') and \
        "cannot read: fromANewerOperator: Extra inputs are not permitted; is the operator another version?" in line, line
    with pytest.raises(CliError, match=r'^ConfigMap "audit-settings": settings.yaml is not YAML: .*\(line 1, column 5\)$'):
        parse_settings("audit-settings", "a: b: c")
    with pytest.raises(CliError, match=r'^ConfigMap "audit-settings" has no settings.yaml$'):
        parse_settings("audit-settings", None)


@pytest.mark.parametrize("argv, says", [
    (["inspect", "orders", "--limit", "-1"], "argument --limit: must be at least 0, not -1"),
    (["inspect", "orders", "--limit", "many"], "argument --limit: invalid int value: 'many'"),
    (["drain", "orders", "--wait", "--timeout", "0"], "argument --timeout: must be at least 1, not 0"),
])
def test_counts_and_times_below_their_floor_are_usage_errors(argv: list[str], says: str, capsys) -> None:
    code, err = _run(argv, capsys)
    assert (code, err) == (2, f"{cli_prefix(argv[0])}{says} (see antidote {argv[0]} --help)\n")


def test_counts_at_their_floor_pass() -> None:
    from antidote_cli.main import build_parser

    p = build_parser()
    assert p.parse_args(["inspect", "orders", "--limit", "0"]).limit == 0
    assert p.parse_args(["drain", "orders", "--timeout", "1.5"]).timeout == 1.5
