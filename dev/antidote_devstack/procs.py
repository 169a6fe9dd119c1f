"""Background processes tracked by pid files, so that `dev down` and a later test session
can stop what an earlier (even crashed) run started, and never a stranger that reused the pid."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .errors import StackError


def _start_time(pid: int) -> str | None:
    """The kernel's start time of `pid` (field 22 of /proc/PID/stat), None when gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):
        return None
    return fields[19]


def _ephemeral_low(default: int = 32768) -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return default


def free_port() -> int:
    """A loopback port free now, below the kernel's ephemeral range. A port from bind(0)
    comes from that range: until the server we start binds it, any outgoing connection
    (two test stacks start side by side) may get it, and Kafka then fails with "Address
    already in use"."""
    low = _ephemeral_low()
    rng = random.SystemRandom()
    if low > 12000:
        for _ in range(200):
            port = rng.randrange(10000, low)
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


class Supervisor:
    """Starts and stops the processes of one stack directory."""

    def __init__(self, state_dir: Path):
        self.state_dir = state_dir
        self.pid_dir = state_dir / "pids"
        self.log_dir = state_dir / "logs"

    def log(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def start(self, name: str, cmd: Sequence[str], env: dict[str, str] | None = None,
              cwd: Path | None = None) -> int:
        self.pid_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log(name), "ab") as out:
            # A session of its own: the process outlives `dev up`, and stop() kills its group.
            proc = subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                                    start_new_session=True)
        record = {"pid": proc.pid, "start": _start_time(proc.pid), "cmd": list(cmd)}
        (self.pid_dir / f"{name}.pid").write_text(json.dumps(record))
        return proc.pid

    def _record(self, name: str) -> dict | None:
        try:
            return json.loads((self.pid_dir / f"{name}.pid").read_text())
        except (OSError, ValueError):
            return None

    def alive(self, name: str) -> bool:
        rec = self._record(name)
        return rec is not None and rec.get("start") is not None and _start_time(rec["pid"]) == rec["start"]

    def names(self) -> list[str]:
        return sorted(p.stem for p in self.pid_dir.glob("*.pid")) if self.pid_dir.exists() else []

    def tail(self, name: str, lines: int = 20) -> str:
        try:
            return "\n".join(self.log(name).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, name: str, timeout: float = 15.0) -> bool:
        """SIGTERM the process group, SIGKILL after `timeout`; True if something was running."""
        rec = self._record(name)
        pid_file = self.pid_dir / f"{name}.pid"
        if not rec:
            pid_file.unlink(missing_ok=True)
            return False
        was_alive = self.alive(name)
        if was_alive:
            pid = rec["pid"]
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(pid, sig)
                except ProcessLookupError:
                    break
                deadline = time.monotonic() + (timeout if sig == signal.SIGTERM else 5)
                while time.monotonic() < deadline and _start_time(pid) == rec["start"]:
                    self._reap(pid)
                    time.sleep(0.1)
                if _start_time(pid) != rec["start"]:
                    break
            self._reap(pid)
        pid_file.unlink(missing_ok=True)
        return was_alive

    def command(self, name: str) -> list[str] | None:
        """The command `name` was started with (recorded in its pid file)."""
        rec = self._record(name)
        return list(rec["cmd"]) if rec and rec.get("cmd") else None

    def kill(self, name: str, timeout: float = 10.0) -> bool:
        """SIGKILL the process group at once (a crash, not a shutdown) and wait until it is
        gone; the pid file stays, so `command(name)` can start it again. True if it ran."""
        rec = self._record(name)
        if not rec or not self.alive(name):
            return False
        try:
            os.killpg(rec["pid"], signal.SIGKILL)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + timeout
        while _start_time(rec["pid"]) == rec["start"]:
            self._reap(rec["pid"])
            if time.monotonic() > deadline:
                raise StackError(f"kill {name}", f"pid {rec['pid']} survived SIGKILL for {timeout:g}s")
            time.sleep(0.05)
        return True

    @staticmethod
    def _reap(pid: int) -> None:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass  # not our child (started by an earlier command): init reaps it

    def stop_all(self) -> list[str]:
        # Reverse start order is not recorded; stop clients (Kafka, apiserver) before etcd.
        order = sorted(self.names(), key=lambda n: n == "etcd")
        return [n for n in order if self.stop(n)]

    def wait_for(self, name: str, step: str, check: Callable[[], bool], timeout: float) -> None:
        """Poll `check` until true; fail early, with the log's tail, if the process dies."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if check():
                    return
            except Exception:  # noqa: BLE001 - not ready yet
                pass
            if not self.alive(name):
                raise StackError(step, f"{name} exited; last lines of {self.log(name)}:\n"
                                 + self.tail(name))
            if time.monotonic() > deadline:
                raise StackError(step, f"{name} not ready after {timeout:.0f}s; last lines of "
                                 f"{self.log(name)}:\n" + self.tail(name))
            time.sleep(0.2)


def terminate(proc: subprocess.Popen, grace: float = 60.0) -> None:
    """SIGTERM a child this process started, wait `grace` seconds, then SIGKILL it."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
