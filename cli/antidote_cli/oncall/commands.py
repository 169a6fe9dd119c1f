"""The on-call commands and their parser: `antidote inspect|resume|drain|redrive <consumer>`.

Also the kubectl plugin (`kubectl antidote inspect orders -n shop`): kubectl runs the
`kubectl-antidote` console script with the words after `antidote`, which is this parser.
They read the cluster like kubectl does (--kubeconfig, --context, -n) and Kafka with the
consumer's effective settings (ConfigMap `<consumer>-settings`); nothing here commits an
offset or writes to Kafka except `redrive`, which runs the reader itself.
"""


from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any

from antidote_api.drain import DrainRequest, parse_drain
from antidote_api.names import drain_job_name, reader_group_id
from antidote_api.semantics import reader_topic
from antidote_api.times import parse_iso
from antidote_api.wire import DRAIN_ANNOTATION, POISON_REASONS, READER_SOURCES, RESUME_ANNOTATION

from ..errors import usage_error
from ..kafka_flags import add_kafka_args, add_verbose_arg, log_conf, parse_props
from ..output import add_output_arg, emit, machine
from .cluster import CliError, Cluster, local_settings
from .decoded import decoding
from .quarantine import PAYLOAD_CHARS, inspect_filter, read_topic
from .held import held_json, read_held, render_held
from .table import header_line, render_table, say

def _since(text: str | None, flag: str = "--since") -> datetime | None:
    if text is None:
        return None
    try:
        return parse_iso(text)
    except ValueError as err:  # a bad flag value: a usage error, as argparse's own (exit 2)
        raise usage_error(f"{flag}: {err}") from None


def cmd_inspect(args: argparse.Namespace) -> int:
    # The arguments first: a bad one is named before any cluster is asked.
    only = inspect_filter(error_classes=args.error_class or [], reasons=args.reason or [],
                          since=_since(args.since))
    props = {**log_conf(args), **parse_props(args.kafka_property or [])}
    k = Cluster(args)
    qc = k.consumer(args.consumer)
    s = k.settings(args.consumer)
    try:  # the poison or dead-letter topic, or a route's (spec.routes) by name
        topic = reader_topic(s, args.source)
    except ValueError as err:
        raise CliError(str(err)) from None
    bootstrap = args.bootstrap_servers or s.source.bootstrap_servers
    group = reader_group_id(s.namespace, s.consumer)
    reach_kafka(props, bootstrap)
    with ExitStack() as stack:
        decode = None
        if args.decode:  # the consumer's decoders; its registry's Secret read from the cluster
            decode = stack.enter_context(decoding(s, registry_url=args.schema_registry, secret=k.secret_data))
        rows, matched, total = read_topic(bootstrap, topic, group, limit=args.limit,
                                          show_payload=args.show_payload, props=props, only=only, decode=decode)
    held = read_held(s, bootstrap, props) if s.ordering == "Key" else None
    sink = s.sink.kafka if s.sink is not None else None
    if emit(args, {"consumer": args.consumer, "namespace": k.namespace, "topic": topic,
                   "sink": {"topic": sink.topic, "delivery": sink.delivery} if sink is not None else None,
                   "status": qc.get("status") or {}, "total": total, "matched": matched,
                   "shown": len(rows), "messages": [asdict(r) for r in rows],
                   "held": held_json(held) if held is not None else None}, indent=2):
        return 0
    # Wrapped, not cut: the conditions say why the consumer stopped.
    say(header_line(qc))
    if sink is not None:
        say(f"sink {sink.topic}: " + ("exactly-once: read it with isolation.level=read_committed"
                                      if sink.delivery == "ExactlyOnce" else "at-least-once"))
    say(f"{topic}: {total} record(s), {matched} match, showing {len(rows)}; ORIGIN is "
        f"partition/offset in {s.source.topic}")
    if rows:
        for line in render_table(rows, show_payload=args.show_payload, source=s.source.topic):
            print(line)
    if any(r.handled for r in rows):
        print(f"* handled already by a reader Job (before {group}'s committed offset)")
    if args.show_payload:
        print(f"payloads are cut to {PAYLOAD_CHARS} characters; they may hold secrets")
    if matched > len(rows):
        print(f"{matched - len(rows)} more not shown (--limit {args.limit})")
    if held is not None:
        for line in render_held(held, args.limit):
            print(line)
    return 0


def reach_kafka(props: Mapping[str, str], bootstrap: str) -> None:
    """One connection first, as redrive's: a broker that does not answer is one line naming
    it, not the client's retries (quiet unless -v) and then a metadata error."""
    from antidote_consumer.kafka.topics import KafkaUnreachable, reachable

    try:
        reachable(dict(props), bootstrap, timeout=15)
    except KafkaUnreachable as err:
        raise CliError(f"{err}; pass --bootstrap-servers when the cluster's brokers are not "
                       "reachable from here") from None


def _condition(qc: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    return next((c for c in (qc.get("status") or {}).get("conditions") or [] if c.get("type") == type_), None)


def cmd_resume(args: argparse.Namespace) -> int:
    k = Cluster(args)
    qc = k.consumer(args.consumer)
    paused = bool((qc.get("spec") or {}).get("paused"))
    qd = _condition(qc, "QueueDisabled")
    disabled = qd is not None and qd.get("status") == "True"
    if not (paused or disabled or args.force):
        state = f"QueueDisabled={qd['status']} ({qd.get('reason')})" if qd else "no QueueDisabled condition"
        raise CliError(f'queueconsumer "{args.consumer}" is neither paused nor disabled ({state}); '
                       "nothing to resume (--force annotates it anyway)")
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    body: dict[str, Any] = {"metadata": {"annotations": {RESUME_ANNOTATION: stamp}}}
    if paused:
        body["spec"] = {"paused": False}
    k.patch_consumer(args.consumer, body)
    did = [f"annotated {RESUME_ANNOTATION}={stamp}"] + (["set spec.paused to false"] if paused else [])
    why = f"disabled ({qd.get('reason')})" if qd is not None and disabled else ("paused" if paused else "not paused (--force)")
    if not emit(args, {"consumer": args.consumer, "namespace": k.namespace, "was": why,
                       "annotation": {RESUME_ANNOTATION: stamp}, "unpaused": paused}):
        say(f'queueconsumer "{args.consumer}" was {why}: {" and ".join(did)}; the operator re-enables '
            "the queue and removes the annotation")
    return 0


def drain_request(args: argparse.Namespace) -> Any:
    since = _since(args.since)
    until = _since(args.until, "--until")
    if args.rate is not None and args.rate < 1:  # 0 would be left out of the request: no limit
        raise usage_error(f"--rate must be at least 1 message per second, not {args.rate}")
    rid = args.request_id or datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + secrets.token_hex(2)
    req = DrainRequest(id=rid, action=args.action, error_classes=tuple(args.error_class or ()),
                       reasons=tuple(args.reason or ()), since=since.isoformat() if since else None,
                       until=until.isoformat() if until else None, rate=args.rate, dry_run=args.dry_run,
                       source=None if getattr(args, "source", "poison") in (None, "poison") else args.source)
    try:  # what the operator will parse: refused here rather than as an Event there
        parse_drain(req.annotation())
    except ValueError as err:
        raise usage_error(f"the drain request: {err}") from None
    return req


def job_report(k: Cluster, job: Any) -> str | None:
    from antidote_api.wire import DEV_RUNNER_REPORT

    ann = job.metadata.annotations or {}
    if ann.get(DEV_RUNNER_REPORT):
        return ann[DEV_RUNNER_REPORT]
    pods = k.call(k.core.list_namespaced_pod, k.namespace,
                  label_selector=f"batch.kubernetes.io/job-name={job.metadata.name}").items
    for pod in pods:
        for cs in (pod.status.container_statuses or []) if pod.status else []:
            term = cs.state.terminated if cs.state else None
            if term is not None and term.message:
                return term.message
    return None


def cmd_drain(args: argparse.Namespace) -> int:

    req = drain_request(args)  # a bad argument is named before any cluster is asked
    k = Cluster(args)
    k.consumer(args.consumer)
    k.patch_consumer(args.consumer, {"metadata": {"annotations": {DRAIN_ANNOTATION: req.annotation()}}})
    name = drain_job_name(args.consumer, req.id)
    if not args.wait:
        if not emit(args, {"consumer": args.consumer, "namespace": k.namespace, "request": req.id, "job": name}):
            say(f'drain requested on queueconsumer "{args.consumer}" ({DRAIN_ANNOTATION}={req.id}); '
                f"the operator starts Job {name}")
        return 0
    if not machine(args):
        print(f"drain requested ({req.id}); waiting for Job {name}...", file=sys.stderr)
    deadline = time.monotonic() + args.timeout
    entry: Mapping[str, Any] | None = None
    last_phase = None
    while time.monotonic() < deadline:
        qc = k.consumer(args.consumer)
        entry = next((e for e in (qc.get("status") or {}).get("readerJobs") or [] if e.get("name") == name), None)
        if entry is not None and entry.get("phase") != last_phase and not machine(args):
            last_phase = entry.get("phase")
            print(f"Job {name}: {last_phase}", file=sys.stderr)
        if entry is not None and entry.get("phase") in ("Succeeded", "Failed"):
            break
        time.sleep(1)
    else:
        raise CliError(f"Job {name} did not finish within {args.timeout:g}s "
                       + ("(the operator has not started it: is it running?)" if entry is None else
                          f"(it is {entry.get('phase')})"))
    job = k.call(k.batch.read_namespaced_job, name, k.namespace, missing=f"Job {name} is gone")
    report = job_report(k, job)
    try:
        rep: Any = json.loads(report) if report else None
    except ValueError:
        rep = report
    if not emit(args, {"consumer": args.consumer, "namespace": k.namespace, "job": name,
                       "phase": entry["phase"], "message": entry.get("message"), "report": rep}, indent=2):
        print(f"Job {name} {entry['phase']}: {entry.get('message')}")
        if report:
            print(report.strip())
    return 0 if entry["phase"] == "Succeeded" else 1


def cmd_redrive(args: argparse.Namespace) -> int:
    """`redrive <consumer>`: the reader with action Redrive, run in this process with the
    consumer's settings from the cluster (so its Kafka must be reachable from here); or
    `redrive --settings FILE | -f MANIFEST`, the same on local files. Every flag given is
    honoured in both forms, or refused."""
    local = bool(getattr(args, "settings", None) or getattr(args, "consumer", None))
    if args.name is None and not local:
        raise usage_error("name a consumer (antidote redrive CONSUMER -n NS) or give --settings FILE "
                          "or -f MANIFEST")
    if args.name is not None and local:
        raise usage_error("give either a consumer name or --settings/-f, not both")
    props = parse_props(args.kafka_property or [])  # named before any cluster or file is read
    try:
        from antidote_cli import reader as reader_cli
    except ImportError:
        raise CliError("this antidote has no poison reader (antidote_consumer.reader); use "
                       f"`antidote drain {args.name} --action Redrive` to run it in the cluster") from None
    if local:
        from antidote_consumer.settings import SettingsError

        def load(args: argparse.Namespace) -> Any:
            try:
                return reader_cli.load(args)
            except SettingsError as err:
                raise CliError(str(err), reader_cli.EXIT_BAD_SETTINGS) from None

        s = local_settings(args, None, load)
    else:
        k = Cluster(args)
        k.consumer(args.name)
        s = k.settings(args.name)
    if args.bootstrap_servers:
        s = s.model_copy(update={"source": s.source.model_copy(update={"bootstrap_servers": args.bootstrap_servers})})
    return reader_cli.run_with(args, s, props)


# --- the parser -------------------------------------------------------------------------------------

def _at_least(low: float, kind: type) -> Any:
    """An argparse type: a number of `kind` not below `low` (argparse names the flag and the
    value in its one usage line)."""
    def parse(text: str) -> Any:
        value = kind(text)  # ValueError: argparse's "invalid <name> value"
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, not {text}")
        return value
    parse.__name__ = kind.__name__
    return parse


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("consumer", help="the QueueConsumer's name")
    p.add_argument("-n", "--namespace", default=None, help="its namespace (default: the context's)")
    p.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    p.add_argument("--context", default=None, help="kubeconfig context (default: the current one)")
    add_output_arg(p)


def _filters(p: argparse.ArgumentParser, until: bool = True) -> None:
    p.add_argument("--error-class", action="append", metavar="CLASS", help="only this error class (repeatable)")
    p.add_argument("--reason", action="append", choices=POISON_REASONS, help="only this reason (repeatable)")
    p.add_argument("--since", metavar="ISO", help="only messages that failed at or after this time")
    if until:
        p.add_argument("--until", metavar="ISO", help="only messages that failed before this time")


def _source(p: argparse.ArgumentParser) -> None:
    """`--from poison|dlq|TOPIC`, as the reader's and its Jobs' flag; `--dlq` is its alias."""
    p.add_argument("--from", dest="source", default="poison", metavar="|".join(READER_SOURCES) + "|TOPIC",
                   help="read the poison topic (default), the dead-letter topic, or a route's topic by name")
    p.add_argument("--dlq", dest="source", action="store_const", const="dlq", help="alias of --from dlq")


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("inspect", help="list a consumer's quarantined messages",
                            description="The poison (or dead-letter) topic of a consumer as a table: "
                                        "where each message came from, why, how often it was tried.")
    _common(p)
    _filters(p, until=False)
    add_kafka_args(p)
    add_verbose_arg(p)
    _source(p)
    p.add_argument("--limit", type=_at_least(0, int), default=50, help="show at most this many (default 50)")
    p.add_argument("--show-payload", action="store_true", help="show each value (cut to 40 characters)")
    p.add_argument("--decode", action="store_true",
                   help="show each value (and key) decoded with the consumer's valueFormat/keyFormat and "
                        "schema registry, or why it does not decode")
    p.add_argument("--schema-registry", default=None, metavar="URL",
                   help="with --decode: reach the schema registry here instead of the consumer's URL")
    p.set_defaults(run=cmd_inspect)

    p = commands.add_parser("resume", help="resume a disabled or paused consumer")
    _common(p)
    p.add_argument("--force", action="store_true", help="annotate even if it is neither paused nor disabled")
    p.set_defaults(run=cmd_resume)

    p = commands.add_parser("drain", help="start a poison-reader Job in the cluster now")
    _common(p)
    _filters(p)
    p.add_argument("--action", choices=("Redrive", "Archive", "Drop", "Hold"),
                   help="what the Job does (default: the policy's reader.action)")
    p.add_argument("--rate", type=int, default=None, help="messages per second at most")
    p.add_argument("--dry-run", action="store_true", help="report what it would do; change nothing")
    _source(p)
    p.add_argument("--request-id", default=None, help="the request id (default: the time and 4 random hex digits)")
    p.add_argument("--wait", action="store_true", help="follow the Job to its end and print its report")
    p.add_argument("--timeout", type=_at_least(1, float), default=900.0, help="seconds --wait waits (default 900)")
    p.set_defaults(run=cmd_drain)

    _register_redrive(commands)


def _register_redrive(commands: argparse._SubParsersAction) -> None:
    """`redrive CONSUMER` joins the reader's `redrive --settings FILE` (antidote_cli.reader,
    registered first): one command, two ways to name the consumer."""
    p = commands.choices["redrive"]
    for group in p._mutually_exclusive_groups:  # --settings|-f: now one of three ways
        group.required = False
    p.description = ("Redrive poison messages to the source topic (the reader with action Redrive). "
                     "With CONSUMER, its settings come from the cluster (ConfigMap CONSUMER-settings) "
                     "and the reader runs here, so its Kafka must be reachable from here; "
                     "`antidote drain CONSUMER --action Redrive` runs it in the cluster instead. "
                     "With --settings FILE or -f MANIFEST, the same on local files.")
    p.add_argument("name", nargs="?", metavar="CONSUMER", help="the QueueConsumer (in the cluster)")
    p.add_argument("-n", "--namespace", default=None, help="its namespace (default: the context's)")
    p.add_argument("--kubeconfig", default=None, help="kubeconfig file")
    p.add_argument("--context", default=None, help="kubeconfig context")
    add_kafka_args(p)
    p.set_defaults(run=cmd_redrive)
