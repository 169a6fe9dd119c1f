"""A Kafka Secret that names a shared object for librdkafka to load (`plugin.library.paths`)
does not get it loaded: `antidote consumer` exits 2 at start naming the key, before any
Kafka client exists (issue 43, item 14; the refused keys: consumer/antidote_consumer/kafka/
secret_keys.py, each named by tests/unit/test_consumer_secret_keys.py).

The shared object is real: its constructor writes a marker file the moment anything loads
it, so the test sees whether the process loaded it, not only what it printed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .. import api_cases

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PLUGIN_C = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void loaded(void) {
    const char *path = getenv("ANTIDOTE_TEST_PLUGIN_MARKER");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (f) { fputs("loaded\n", f); fclose(f); }
}
int conf_init(void *conf, void **opaque, char *errstr, size_t errstr_size) { return 0; }
"""


def _plugin(tmp_path: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the probe shared object")
    src, so = tmp_path / "probe.c", tmp_path / "probe.so"
    src.write_text(PLUGIN_C)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    return so


def test_a_secret_naming_a_plugin_is_refused_at_start_and_nothing_is_loaded(tmp_path: Path) -> None:
    so, marker = _plugin(tmp_path), tmp_path / "marker"
    secrets = tmp_path / "secrets"
    (secrets / "kafka-creds").mkdir(parents=True)
    for key, value in {"librdkafka.security.protocol": "PLAINTEXT",
                       "librdkafka.plugin.library.paths": str(so)}.items():
        (secrets / "kafka-creds" / key).write_text(value)
    qc = api_cases.merge(api_cases.valid_consumer("orders"), {"spec": {
        "handler": "json:dumps", "checkpoint": {"location": str(tmp_path / "ckpt")},
        "source": {"kafka": {"bootstrapServers": os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1"),
                             "secretRef": {"name": "kafka-creds"}}}}})
    qc["metadata"]["namespace"] = "tests"
    pp = {**api_cases.valid_policy("p"), "metadata": {"name": "p", "namespace": "tests"}}
    (tmp_path / "qc.yaml").write_text(yaml.safe_dump(qc))
    (tmp_path / "pp.yaml").write_text(yaml.safe_dump(pp))

    proc = subprocess.run(
        [sys.executable, "-m", "antidote_cli.main", "consumer", "--consumer", str(tmp_path / "qc.yaml"),
         "--policy", str(tmp_path / "pp.yaml")], cwd=REPO, capture_output=True, text=True, timeout=180,
        env={**os.environ, "ANTIDOTE_SECRETS_DIR": str(secrets), "ANTIDOTE_TEST_PLUGIN_MARKER": str(marker)})

    assert not marker.exists(), "the Secret's shared object was loaded into the consumer"
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "'kafka-creds'" in proc.stderr and "librdkafka.plugin.library.paths" in proc.stderr, proc.stderr
    assert "loads shared objects" in proc.stderr, proc.stderr
