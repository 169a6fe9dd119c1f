"""The bad-input corpus: messages, settings files and CLI arguments that try to break
Antidote (the CRs are `tests/api_cases.py`'s BAD_SPECS, refused by the real API server in
test_api_crds.py). Every kind must end in a clear outcome: the message gets exactly one
outcome naming its coordinates, a settings file or argument is refused in one line naming
the field, file or argument; no crash, no traceback shown to a user."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from antidote_api.wire import ExitCode

from .. import api_cases
from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce, read_all

REPO = Path(__file__).resolve().parents[2]
SCHEMA = {"type": "object", "required": ["id"], "properties": {"id": {"type": "integer"}}}

# (name, key, value, headers): each must get exactly one outcome.
MESSAGES = [
    ("tombstone", b"k", None, None),
    ("null-key", None, b'{"id": 1}', None),
    ("empty-value", b"k", b"", None),
    ("not-utf8", b"k", b"\xff\xfe\xfa\x00", None),
    ("utf16-with-bom", b"k", '{"id": 2}'.encode("utf-16"), None),
    ("schema-missing-field", b"k", b'{"name": "x"}', None),
    ("schema-wrong-type", b"k", b'{"id": "one"}', None),
    ("not-json", b"k", b"not json at all", None),
    ("nan", b"k", b'{"id": NaN}', None),
    ("duplicate-keys", b"k", b'{"id": 1, "id": "x"}', None),
    ("huge-integer", b"k", b'{"id": 1' + b"0" * 5000 + b"}", None),
    ("nested-too-deep", b"k", b"[" * 100_000, None),
    ("nul-bytes", b"k", b"\x00" * 64, None),
    ("large-value", b"k", b'{"id": 3, "pad": "' + b"x" * 600_000 + b'"}', None),
    ("large-invalid-value", b"k", b'{"pad": "' + b"y" * 600_000 + b'"}', None),
    ("many-headers", b"k", b'{"id": 4}', [(f"h{i}", b"v") for i in range(300)]),
    ("null-header-value", b"k", b'{"id": 5}', [("h", None)]),
    ("unicode-header-key", b"k", b'{"id": 6}', [("ключ-🔑", "значение".encode())]),
    ("forged-antidote-headers", b"k", b'{"id": 7}', [("antidote.attempts", b"x"), ("antidote.cycle", b"-1"),
                                                       ("antidote.original.offset", b"not-a-number")]),
    ("binary-key", b"\x00\xff\x80", b'{"id": 8}', None),
]


def test_every_bad_message_gets_exactly_one_outcome_that_names_it(
        spark, kafka_bootstrap, topic_factory, tmp_path) -> None:
    source, sink = topic_factory(), topic_factory("-out")
    produce(kafka_bootstrap, source, [(k, v, h) for _, k, v, h in MESSAGES])
    s = cu.settings(kafka_bootstrap, source, tmp_path, sink=sink, handler="strict_json", policy={
        "retries": {"immediate": 0, "cycles": 0},
        "validation": {"format": "json", "jsonSchema": SCHEMA}})

    code, m = cu.run(spark, s)

    assert code == ExitCode.OK  # no crash, no disabled queue: bad messages are not an outage
    assert cu.metric(m, "antidote_batch_failures_total") == 0
    names = [name for name, *_ in MESSAGES]
    processed = Counter(json.loads(r.value)["id"] for r in read_all(kafka_bootstrap, sink))
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)  # fails on a duplicate
    outcomes = {}
    for offset, name in enumerate(names):
        (r, hdrs) = poison.get((0, offset), (None, None))
        if r is not None:
            outcomes[name] = "poison"
            # The quarantine record names the message and why: coordinates, reason, error.
            assert hdrs["antidote.original.topic"] == source, name
            assert hdrs["antidote.reason"] in ("validation", "max-attempts", "non-retryable"), name
            assert hdrs["antidote.error.class"] and hdrs["antidote.error.message"], name
            assert r.value == MESSAGES[offset][2] and r.key == MESSAGES[offset][1], name  # kept whole
        else:
            outcomes[name] = "processed"
    assert sum(processed.values()) + len(poison) == len(MESSAGES)
    assert set(processed.values()) <= {1}
    assert {n for n, o in outcomes.items() if o == "poison"} == {
        "tombstone", "empty-value", "not-utf8", "schema-missing-field", "schema-wrong-type",
        "not-json", "nan", "duplicate-keys", "huge-integer", "nested-too-deep", "nul-bytes",
        "large-invalid-value", "utf16-with-bom"}, outcomes


def _manifests(tmp_path: Path, qc_spec: dict | None = None, pp_spec: dict | None = None) -> tuple[Path, Path]:
    qc = api_cases.valid_consumer("bad")
    qc["metadata"]["namespace"] = "tests"
    qc["spec"]["checkpoint"]["location"] = str(tmp_path / "ckpt")
    if qc_spec is not None:
        qc["spec"] = api_cases.merge(qc["spec"], qc_spec)
    pp = api_cases.valid_policy("p")
    pp["metadata"]["namespace"] = "tests"
    if pp_spec is not None:
        pp["spec"] = api_cases.merge(pp["spec"], pp_spec)
    qc_path, pp_path = tmp_path / "qc.yaml", tmp_path / "pp.yaml"
    qc_path.write_text(yaml.safe_dump(qc))
    pp_path.write_text(yaml.safe_dump(pp))
    return qc_path, pp_path


def _antidote(args: list[str], env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "antidote_cli.main", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _refused_in_one_line(proc: subprocess.CompletedProcess, *names: str) -> str:
    out = proc.stderr + proc.stdout
    assert proc.returncode != 0, out
    assert "Traceback" not in out, out
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower() or line.startswith("antidote")]
    assert errors, out
    for name in names:
        assert name in out, (name, out)
    return out


# Settings files handed to `antidote consumer`: (id, what to write, words the refusal names).
def _settings_cases(tmp_path: Path) -> list[tuple[str, list[str], tuple[str, ...]]]:
    qc, pp = _manifests(tmp_path)
    cases = []
    broken = tmp_path / "broken.yaml"
    broken.write_text("spec: [unclosed\n")
    cases.append(("yaml-syntax", ["--consumer", str(broken), "--policy", str(pp)], ("broken.yaml",)))
    a_list = tmp_path / "list.yaml"
    a_list.write_text("- 1\n- 2\n")
    cases.append(("yaml-not-a-mapping", ["--consumer", str(a_list), "--policy", str(pp)], ("list.yaml",)))
    wrong_kind = tmp_path / "kind.yaml"
    wrong_kind.write_text(pp.read_text())
    cases.append(("wrong-kind", ["--consumer", str(wrong_kind), "--policy", str(pp)], ("QueueConsumer",)))
    cases.append(("missing-file", ["--consumer", str(tmp_path / "nope.yaml"), "--policy", str(pp)], ("nope.yaml",)))
    d = tmp_path / "bad-field"
    d.mkdir()
    bad_qc, bad_pp = _manifests(d, qc_spec={"source": {"kafka": {"maxMessagesPerBatch": -5}}})
    cases.append(("bad-field", ["--consumer", str(bad_qc), "--policy", str(bad_pp)], ("maxMessagesPerBatch",)))
    d = tmp_path / "bad-policy"
    d.mkdir()
    bad_qc, bad_pp = _manifests(d, pp_spec={"retries": {"cycleDelay": "soon"}})
    cases.append(("bad-policy-field", ["--consumer", str(bad_qc), "--policy", str(bad_pp)], ("cycleDelay",)))
    settings_json = tmp_path / "settings.json"
    settings_json.write_text("{not json")
    cases.append(("settings-not-json", ["--settings", str(settings_json)], ("settings.json",)))
    cases.append(("consumer-without-policy", ["--consumer", str(qc)], ("--policy",)))
    # Refused at start, before any Spark work (docs/consumer.md, The handler).
    for case, ref, words in (("handler-missing-module", "no_such_pkg.orders:handle",
                              ("spec.handler", "No module named 'no_such_pkg'")),
                             ("handler-missing-function", "json:no_such_function",
                              ("spec.handler", "no callable 'no_such_function'"))):
        d = tmp_path / case
        d.mkdir()
        bad_qc, bad_pp = _manifests(d, qc_spec={"handler": ref})
        cases.append((case, ["--consumer", str(bad_qc), "--policy", str(bad_pp)], words))
    return cases


SETTINGS_IDS = ["yaml-syntax", "yaml-not-a-mapping", "wrong-kind", "missing-file", "bad-field",
                "bad-policy-field", "settings-not-json", "consumer-without-policy",
                "handler-missing-module", "handler-missing-function"]


@pytest.mark.parametrize("case", SETTINGS_IDS)
def test_a_bad_settings_file_is_refused_in_one_line_naming_it(case: str, tmp_path) -> None:
    (args, names), = [(a, n) for i, a, n in _settings_cases(tmp_path) if i == case]
    proc = _antidote(["consumer", *args])
    assert proc.returncode == 2, proc.stderr
    _refused_in_one_line(proc, *names)


CLI_CASES = [
    ("no-command", [], ("COMMAND",)),
    ("unknown-command", ["explode"], ("explode",)),
    ("consumer-no-source", ["consumer"], ("--settings", "--consumer")),
    ("metrics-port-not-a-number", ["consumer", "--settings", "x.json", "--metrics-port", "ninety"], ("--metrics-port",)),
    ("inspect-bad-reason", ["inspect", "c", "--reason", "because"], ("--reason",)),
    ("inspect-bad-output", ["inspect", "c", "-o", "xml"], ("--output",)),
    ("drain-bad-action", ["drain", "c", "--action", "Explode"], ("--action",)),
    ("drain-rate-not-a-number", ["drain", "c", "--rate", "fast"], ("--rate",)),
    ("inspect-limit-not-a-number", ["inspect", "c", "--limit", "all"], ("--limit",)),
]


@pytest.mark.parametrize(("args", "names"), [pytest.param(a, n, id=i) for i, a, n in CLI_CASES])
def test_bad_cli_arguments_are_refused_in_one_line_naming_them(args, names) -> None:
    proc = _antidote(args, timeout=60)
    assert proc.returncode == 2, proc.stderr  # argparse's usage error
    _refused_in_one_line(proc, *names)


CLUSTER_CASES = [
    ("inspect-no-such-consumer", ["inspect", "no-such-consumer", "-n", "default"], ("no-such-consumer",)),
    ("resume-no-such-consumer", ["resume", "no-such-consumer", "-n", "default"], ("no-such-consumer",)),
    ("drain-no-such-consumer", ["drain", "no-such-consumer", "-n", "default"], ("no-such-consumer",)),
    ("inspect-bad-since", ["inspect", "no-such-consumer", "-n", "default", "--since", "yesterday"], ("--since",)),
    ("drain-bad-until", ["drain", "no-such-consumer", "-n", "default", "--until", "later"], ("--until",)),
    ("inspect-bad-kubeconfig", ["inspect", "c", "--kubeconfig", "/nonexistent/kubeconfig"], ("kubeconfig",)),
]


@pytest.mark.parametrize(("args", "names"), [pytest.param(a, n, id=i) for i, a, n in CLUSTER_CASES])
def test_cluster_commands_on_bad_targets_fail_in_one_line(args, names, stack) -> None:
    proc = _antidote(args, env={**os.environ, **stack.env()}, timeout=120)
    _refused_in_one_line(proc, *names)


def test_the_corpus_has_at_least_50_kinds() -> None:
    kinds = len(api_cases.BAD_SPECS) + len(MESSAGES) + len(SETTINGS_IDS) + len(CLI_CASES) + len(CLUSTER_CASES)
    assert kinds >= 50, kinds
