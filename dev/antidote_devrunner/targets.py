"""Prometheus file_sd target files for the local stack (`antidote dev up --prometheus`).

The dev runner's consumers are local processes, not pods, so nothing in the API server
says where their /metrics are; the operator with `--dev-runner` knows (it picks each
port), so it writes one file per endpoint into the stack's targets folder
(`$ANTIDOTE_PROMETHEUS_TARGETS`, or `--dev-runner-targets`), which Prometheus watches:
`operator_<pid>.json` for itself, `consumer_<namespace>_<name>.json` per running consumer
(names never contain `_`). Each file records the operator's pid in a `__`-prefixed label,
which Prometheus drops, so a later operator can remove the files of one that was killed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

PID_LABEL = "__antidote_dev_runner_pid"


class TargetFiles:
    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.pid = os.getpid()

    def _write(self, name: str, address: str, labels: dict[str, str]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        body = [{"targets": [address], "labels": {**labels, PID_LABEL: str(self.pid)}}]
        # Written aside and renamed: Prometheus never reads half a file (the temp name does
        # not match its globs).
        tmp = self.folder / f".{name}.tmp"
        tmp.write_text(json.dumps(body))
        tmp.replace(self.folder / name)

    def operator(self, port: int) -> None:
        self._write(f"operator_{self.pid}.json", f"127.0.0.1:{port}", {})

    def consumer(self, namespace: str, name: str, port: int) -> None:
        # Whose the endpoint is, from the operator that started it: the stack's Prometheus
        # keeps these over what the page says (honor_labels false), as the chart's PodMonitor
        # takes them from the pod's metadata.
        self._write(f"consumer_{namespace}_{name}.json", f"127.0.0.1:{port}",
                    {"namespace": namespace, "consumer": name})

    def remove_consumer(self, namespace: str, name: str) -> None:
        self._remove(self.folder / f"consumer_{namespace}_{name}.json")

    def _remove(self, path: Path) -> None:
        """Only a file this process wrote: another operator may run the same name."""
        try:
            owner = json.loads(path.read_text())[0]["labels"].get(PID_LABEL)
        except (OSError, ValueError, LookupError, AttributeError):
            return
        if owner == str(self.pid):
            path.unlink(missing_ok=True)

    def close(self) -> None:
        for path in self.folder.glob("*.json"):
            self._remove(path)

    def prune(self) -> list[str]:
        """Remove the files of operators that are gone (killed before they could)."""
        removed = []
        for path in self.folder.glob("*.json"):
            try:
                owner = int(json.loads(path.read_text())[0]["labels"][PID_LABEL])
            except (OSError, ValueError, LookupError, TypeError):
                continue
            if not _alive(owner):
                path.unlink(missing_ok=True)
                removed.append(path.name)
        return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
