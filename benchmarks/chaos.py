"""Chaos for the consumer: SIGKILLs at random moments, and lost checkpoints, over a stream with
poison and flaky messages (which succeed on their 4th attempt) flowing through retry cycles;
then an audit of every source offset.

    .venv/bin/python benchmarks/chaos.py [--messages 20000] [--kills 100] [--seed N]

The stream arrives in slices, one before each round, so every round has work. Each round
starts `antidote consumer --until-idle` as a process (driver and Spark JVM in a session of
their own), waits until it has written a random number of records (the sink, retry or poison
topics grew by 1 to half the slice), then kills the whole session with SIGKILL after a
further random delay, and on some rounds (--checkpoint-loss) deletes the checkpoint too, as
a pod's ephemeral disk would be lost. A last run goes to the end without a kill. The audit
then reads the source, the sink and the poison topic and prints, for every source offset:

- lost: no outcome at all (neither in the sink nor quarantined)     goal 0
- flaky wrong: a flaky message (fails its first 3 attempts, then succeeds) quarantined, or
  in the sink from an attempt other than the 4th                     goal 0
- duplicated quarantine: quarantined more than once                 goal 0
- wrong attempts: quarantined with antidote.attempts other than (immediate+1)(cycles+1)
                                                                    goal 0
- both: in the sink and quarantined                                 goal 0
- sink duplicates: outputs read more than once by a read_committed reader (the sink is
  exactly-once, the default delivery)                               goal 0

A driver killed inside a batch five times in a row disables its queue (exit 3), as a
crash-looping driver must: the kill cannot be told from a crash the batch caused. The run
then does what on-call would, `antidote resume` (here the consumer's `--resume`), and
counts it.

Then the other parts (chaos_operator.py; --parts picks some): SIGKILLs of the operator
(--operator-kills), and the broker and the API server crashed and restarted in place under
a running consumer and operator.

Exit status 0 only if every part passed (for this one: the first four are 0). Uses the
stack named by $ANTIDOTE_STACK_DIR if it runs (its broker and API server are restarted by
the last two parts), else starts its own and stops it at the end.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
sys.path.insert(0, str(REPO))

from confluent_kafka import Consumer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from antidote_devstack import stack as devstack  # noqa: E402
from antidote_devstack.paths import cache_dir  # noqa: E402
from benchmarks.chaos_kit import (CRASH_LOOP, CYCLES, PARTITIONS, Audit, audit, log, manifests,  # noqa: E402
                                  start, write_source, written)

# `make chaos` runs them all; the last three are in chaos_operator.py and chaos_restarts.py.
PARTS = ("consumer", "operator", "broker", "apiserver")


@dataclass
class Chaos:
    kills: int = 0
    checkpoints_lost: int = 0
    exited_before_kill: int = 0
    resumes: int = 0  # after the crash-loop guard disabled the queue (exit 3)
    seconds: float = 0.0


def run_chaos(s: devstack.Stack, *, messages: int, kills: int, poison_rate: float, seed: int,
              checkpoint_loss: float, max_batch: int, jitter: float, folder: Path) -> tuple[Chaos, Audit]:
    """The whole experiment against stack `s`; (what was done, the audit)."""
    rng = random.Random(seed)
    admin = AdminClient({"bootstrap.servers": s.kafka_bootstrap})
    tag = uuid.uuid4().hex[:6]
    source, sink = f"chaos-{tag}", f"chaos-{tag}-out"
    for fut in admin.create_topics([NewTopic(source, PARTITIONS, 1), NewTopic(sink, PARTITIONS, 1)]).values():
        fut.result(60)
    # The stream arrives in slices, one before each round: every round has work to be killed
    # in (written all at once, the last rounds of a long run found it drained).
    cuts = [messages * k // (kills + 1) for k in range(kills + 2)]
    poisoned = write_source(s.kafka_bootstrap, source, cuts[1] - cuts[0], poison_rate, cuts[0])
    log(f"{messages} messages in {kills + 1} slices to {source}, {PARTITIONS} partitions")
    args = manifests(folder, s.kafka_bootstrap, source, sink, max_batch)
    env = {**os.environ, **s.env(), "SPARK_LOCAL_IP": "127.0.0.1"}
    outputs = [sink, f"{source}.poison"] + [f"{source}.retry-{k}" for k in range(1, CYCLES + 1)]
    watch = Consumer({"bootstrap.servers": s.kafka_bootstrap, "group.id": "chaos-watch"})
    c = Chaos()
    started = time.monotonic()
    resume = False
    with open(folder / "consumer.log", "ab") as out:
        for i in range(kills):
            if i:
                poisoned += write_source(s.kafka_bootstrap, source, cuts[i + 1] - cuts[i],
                                         poison_rate, cuts[i])
            before = written(watch, outputs)
            proc = start(env, args, out, resume)
            resume = False
            # Killed only once it has written something in this round (else a kill during
            # the JVM's start-up proves little): a random number of records, up to half the
            # slice, so kills land anywhere in the round's batches, not only after its first
            # write; then after a random further delay.
            target = before + rng.randint(1, max(1, (cuts[i + 1] - cuts[i]) // 2))
            while proc.poll() is None and written(watch, outputs) < target:
                time.sleep(0.2)
            delay = rng.uniform(0, jitter)
            try:
                proc.wait(delay)
                log(f"round {i + 1}: exited {proc.returncode} before its kill")
                if proc.returncode == CRASH_LOOP:
                    c.resumes += 1
                    resume = True
                elif proc.returncode == 0:
                    c.exited_before_kill += 1  # done before its kill: nothing left to do
                else:
                    raise SystemExit(f"the consumer exited {proc.returncode}; see {folder / 'consumer.log'}")
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
                c.kills += 1
            if rng.random() < checkpoint_loss:
                shutil.rmtree(folder / "ckpt", ignore_errors=True)
                c.checkpoints_lost += 1
            if (i + 1) % 10 == 0:
                log(f"{i + 1}/{kills} rounds: {c.kills} kills, {c.checkpoints_lost} checkpoints lost")
        watch.close()
        poisoned += write_source(s.kafka_bootstrap, source, cuts[-1] - cuts[-2], poison_rate, cuts[-2])
        log(f"{messages} messages written ({poisoned} poison)")
        proc = start(env, args, out, resume)
        code = proc.wait(900)
        if code == CRASH_LOOP:  # the last kills disabled it: resume, as on-call would
            c.resumes += 1
            proc = start(env, args, out, True)
            code = proc.wait(900)
        if code != 0:
            raise SystemExit(f"the last run exited {code}; see {folder / 'consumer.log'}")
    c.seconds = time.monotonic() - started
    return c, audit(s.kafka_bootstrap, source, sink, f"{source}.poison")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--kills", type=int, default=100)
    ap.add_argument("--poison-rate", type=float, default=0.01)
    ap.add_argument("--checkpoint-loss", type=float, default=0.1,
                    help="share of the kills after which the checkpoint is deleted too")
    ap.add_argument("--max-batch", type=int, default=500)
    ap.add_argument("--jitter", type=float, default=4.0,
                    help="a consumer is killed up to this many seconds (uniform) after it first wrote")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--operator-kills", type=int, default=20,
                    help="SIGKILLs of the operator (chaos_operator.py)")
    ap.add_argument("--restart-messages", type=int, default=5000,
                    help="messages the consumer reads while the broker is killed and restarted")
    ap.add_argument("--parts", default=",".join(PARTS),
                    help=f"which parts to run, comma-separated (default all: {','.join(PARTS)})")
    args = ap.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        ap.error(f"--parts: unknown part(s) {', '.join(unknown)}; known: {', '.join(PARTS)}")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    log(f"seed {seed}")
    reuse = os.environ.get("ANTIDOTE_STACK_DIR")
    s = devstack.running(Path(reuse)) if reuse else None
    own = None
    if s is None:
        own = cache_dir() / "chaos-stack"
        s = devstack.up(own)
    folder = Path(tempfile.mkdtemp(prefix="antidote-chaos-"))
    ok = True
    try:
        if "consumer" in parts:
            (folder / "consumer").mkdir()
            c, a = run_chaos(s, messages=args.messages, kills=args.kills, poison_rate=args.poison_rate,
                             seed=seed, checkpoint_loss=args.checkpoint_loss, max_batch=args.max_batch,
                             jitter=args.jitter, folder=folder / "consumer")
            print(f"consumer chaos (seed {seed}): {c.kills} SIGKILLs, {c.checkpoints_lost} checkpoints "
                  f"lost, {c.resumes} resumes after the crash-loop guard, {c.exited_before_kill} runs "
                  f"ended before their kill, {c.seconds:.0f}s")
            for line in a.lines():
                print(f"  {line}")
            print("  result: " + ("PASS (0 lost / 0 duplicated quarantine / 0 wrong attempts)"
                                  if a.ok else "FAIL"), flush=True)
            ok &= a.ok
        ok &= run_other_parts(s, parts, args, seed, folder)
    finally:
        if own is not None:
            devstack.down(own)
    print("chaos: " + ("PASS" if ok else f"FAIL (logs in {folder})"))
    if ok:
        shutil.rmtree(folder, ignore_errors=True)
    return 0 if ok else 1


def run_other_parts(s: devstack.Stack, parts: list[str], args: argparse.Namespace, seed: int,
                    folder: Path) -> bool:
    """The operator's kills and the restarts of the broker and the API server
    (chaos_operator.py); prints their figures, True if all passed."""
    from benchmarks import chaos_operator as co
    from benchmarks import chaos_restarts as cr

    ok = True
    if "operator" in parts:
        o = co.run_operator_chaos(s, kills=args.operator_kills, seed=seed, jitter=1.0,
                                  folder=folder / "operator")
        print(f"operator chaos (seed {seed}):")
        for line in o.lines():
            print(f"  {line}")
        print("  result: " + ("PASS" if o.ok else "FAIL"), flush=True)
        ok &= o.ok
    restarts = []
    if "broker" in parts:
        restarts.append(cr.run_broker_restart(s, messages=args.restart_messages, poison_rate=args.poison_rate,
                                              seed=seed, folder=folder / "broker"))
    if "apiserver" in parts:
        restarts.append(cr.run_apiserver_restart(s, folder=folder / "apiserver"))
    for r in restarts:
        for line in r.lines():
            print(line)
        print("  result: " + ("PASS" if r.ok else "FAIL"), flush=True)
        ok &= r.ok
    return ok


if __name__ == "__main__":
    sys.exit(main())
