"""A real Prometheus on the local stack (`antidote dev up --prometheus`): Debian's
`prometheus` binary (the package that also ships promtool), bound to loopback, with the
chart's alert rules loaded.

Targets come from file-based service discovery (`file_sd_configs`): on the local stack the
consumers are local processes of the operator's dev runner, not pods, so the API server has
no Endpoints to discover. Whoever starts a metrics endpoint knows its port and writes one
JSON file per target into `targets/` (the operator with `--dev-runner` writes its own and
one per consumer it runs: antidote_devrunner/targets.py); Prometheus watches the folder.
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

from .errors import StackError
from .paths import REPO
from .procs import Supervisor

NAME = "prometheus"
RULES = REPO / "charts/antidote/files/alerts.yaml"
# Short intervals: a dev stack has a handful of targets, and tests wait on what it sees.
SCRAPE_INTERVAL = "1s"
EVALUATION_INTERVAL = "1s"
# Target files, by whose endpoint they name (the glob of each scrape job).
OPERATOR_TARGETS = "operator_*.json"
CONSUMER_TARGETS = "consumer_*.json"


def binary() -> str:
    path = shutil.which("prometheus")
    if not path:
        raise StackError("start prometheus", "`prometheus` not found on PATH: install Debian's "
                         "`prometheus` package (apt-get install prometheus; hack/install.sh does "
                         "it as root)")
    return path


def config(targets: Path, rules_dir: Path) -> dict:
    """prometheus.yml: the chart's rules plus any file in `rules_dir` (tests put overrides
    there), and two file_sd jobs. job="antidote-operator" is what AntidoteOperatorDown
    reads; a consumer's namespace/consumer labels are its target's (written by the operator
    that started it), never its page's (honor_labels false: those become exported_*), as the
    chart's PodMonitor takes them from the pod's metadata."""
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL,
                   "evaluation_interval": EVALUATION_INTERVAL},
        "rule_files": [str(RULES), str(rules_dir / "*.yaml")],
        "scrape_configs": [
            {"job_name": "antidote-operator",
             "file_sd_configs": [{"files": [str(targets / OPERATOR_TARGETS)]}]},
            {"job_name": "antidote-consumers", "honor_labels": False,
             "file_sd_configs": [{"files": [str(targets / CONSUMER_TARGETS)]}]},
        ],
    }


def start(sup: Supervisor, state_dir: Path, port: int) -> tuple[str, Path]:
    """Start Prometheus on 127.0.0.1:`port` with its data under the stack's directory;
    return (its URL, the targets folder)."""
    pdir = state_dir / NAME
    shutil.rmtree(pdir / "data", ignore_errors=True)  # a clean TSDB, as every stack start
    targets, rules = pdir / "targets", pdir / "rules"
    for d in (targets, rules):
        d.mkdir(parents=True, exist_ok=True)
    for stale in targets.glob("*.json"):
        stale.unlink()
    conf = pdir / "prometheus.yml"
    conf.write_text(json.dumps(config(targets, rules), indent=2))  # JSON is YAML
    sup.start(NAME, [binary(), f"--config.file={conf}", f"--storage.tsdb.path={pdir / 'data'}",
                     f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1d",
                     # POST /-/reload re-reads the rule files (tests add overrides); loopback only.
                     "--web.enable-lifecycle", "--log.level=warn"])
    url = f"http://127.0.0.1:{port}"
    sup.wait_for(NAME, "start prometheus", lambda: ready(url), 60)
    return url, targets


def ready(url: str) -> bool:
    with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
        return resp.status == 200


def rules_dir(state_dir: Path) -> Path:
    return state_dir / NAME / "rules"


def reload(url: str) -> None:
    """Re-read the configuration and rule files; raises with Prometheus' answer on an error."""
    req = urllib.request.Request(f"{url}/-/reload", method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            resp.read()
    except urllib.error.HTTPError as err:
        raise StackError("reload prometheus", err.read().decode(errors="replace")) from err
