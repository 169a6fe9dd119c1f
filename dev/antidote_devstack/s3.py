"""An S3-compatible object store beside the local stack (`antidote dev up --s3`, and the tests
that use `s3a://`): SeaweedFS's `weed server` (master, volume server, filer and S3 gateway in
one process), built from its Go module like the stack's other binaries (hack/seaweedfs).

It binds the stack's host address (loopback, or the node bridge's gateway with `--node`, which
the node's pods reach as they reach Kafka), answers S3 with one identity whose keys are the
dev values below, and has one bucket made at start. Its data lives under the stack's
directory and every start is a clean store, like the stack's Kafka.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .procs import Supervisor, free_port

NAME = "s3"  # the process name in the stack's pids/ and logs/
# The local server's only identity. Dev-only values, like the stack's Kafka SASL password:
# the server listens on loopback or the node's private bridge.
ACCESS_KEY = "antidote-dev"
SECRET_KEY = "antidote-dev-secret"
BUCKET = "antidote"
REGION = "us-east-1"  # SeaweedFS ignores it; S3A and the SDK want one to sign with


@dataclass(frozen=True)
class S3Server:
    """What a client of the local S3 server needs."""

    endpoint: str  # http://host:port
    bucket: str = BUCKET
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    region: str = REGION

    def env(self) -> dict[str, str]:
        """The AWS SDKs' standard variables (S3A's default credential chain reads the first
        two), and where the server is."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_REGION": self.region, "ANTIDOTE_S3_ENDPOINT": self.endpoint,
                "ANTIDOTE_S3_BUCKET": self.bucket}

    def spark_conf(self) -> dict[str, str]:
        return spark_conf(self.endpoint, self.region)


def spark_conf(endpoint: str, region: str = REGION) -> dict[str, str]:
    """`spec.spark.conf` for S3A on an S3-compatible server at `endpoint`: its address,
    path-style URLs (http://host:port/bucket/key: the server has no per-bucket DNS names) and
    plain HTTP when the endpoint says so. Credentials are not here: they come from the
    environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), never from a ConfigMap."""
    conf = {"spark.hadoop.fs.s3a.endpoint": endpoint,
            "spark.hadoop.fs.s3a.endpoint.region": region,
            "spark.hadoop.fs.s3a.path.style.access": "true"}
    if endpoint.startswith("http://"):
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = "false"
    return conf


def identities(access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY) -> dict:
    """SeaweedFS's `-s3.config`: one identity allowed everything."""
    return {"identities": [{"name": "antidote-dev",
                            "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                            "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}


def argv(binary: str, data: Path, config: Path, host: str, ports: dict[str, int]) -> list[str]:
    """`weed server` with every listener on `host` and an explicit port (its defaults are
    fixed ports, and each gRPC port would be its HTTP port + 10000, past 65535 for the
    ephemeral ports free_port hands out), and nothing that calls out (telemetry) or listens
    beyond S3 (Iceberg, Lance, IAM, WebDAV)."""
    return [binary, "server", f"-dir={data}", f"-ip={host}", f"-ip.bind={host}",
            "-master.telemetry=false", "-master.volumeSizeLimitMB=64",
            f"-master.port={ports['master']}", f"-master.port.grpc={ports['master_grpc']}",
            f"-volume.port={ports['volume']}", f"-volume.port.grpc={ports['volume_grpc']}",
            "-volume.max=0",
            "-filer", f"-filer.port={ports['filer']}", f"-filer.port.grpc={ports['filer_grpc']}",
            "-s3", f"-s3.port={ports['s3']}", f"-s3.port.grpc={ports['s3_grpc']}",
            "-s3.port.iceberg=0", "-s3.port.lance=0", "-s3.iam=false",
            f"-s3.config={config}"]


PORTS = ("master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc", "s3", "s3_grpc")


def start(sup: Supervisor, state_dir: Path, binary: Path, host: str,
          timeout: float = 120) -> S3Server:
    """Start the server under `state_dir`/s3 (a clean store) and make the bucket."""
    import shutil

    root = state_dir / NAME
    shutil.rmtree(root, ignore_errors=True)
    data = root / "data"
    data.mkdir(parents=True)
    config = root / "s3.json"
    config.write_text(json.dumps(identities(), indent=2))
    config.chmod(0o600)
    ports = {name: free_port() for name in PORTS}
    sup.start(NAME, argv(str(binary), data, config, host, ports))
    server = S3Server(endpoint=f"http://{host}:{ports['s3']}")
    sup.wait_for(NAME, "start the S3 server", lambda: answers(server.endpoint), timeout)
    # The gateway answers before the filer and volume server can take writes: the bucket's
    # creation is retried until it succeeds.
    sup.wait_for(NAME, f"create bucket {server.bucket}", lambda: make_bucket(server), timeout)
    # The first object of a bucket waits for its volumes to be grown (~8 s, measured): done
    # here, so that "started" means a write is answered at once.
    sup.wait_for(NAME, "write to the S3 server", lambda: warm(server), timeout)
    return server


def stop(sup: Supervisor) -> bool:
    """Stop the server. Its master keeps retrying its filer after SIGTERM and never exits by
    itself (measured: still running after 15 s), and its store is thrown away at the next
    start anyway, so SIGKILL follows after 2 s."""
    return sup.stop(NAME, timeout=2)


def answers(endpoint: str) -> bool:
    """Whether the S3 gateway answers HTTP (an anonymous request is refused: any status will do)."""
    try:
        with urllib.request.urlopen(endpoint + "/", timeout=2):
            return True
    except urllib.error.HTTPError:
        return True


def client(server: S3Server):
    """A real S3 client of the server (pyarrow's, bundled with the consumer's pyarrow)."""
    from pyarrow import fs

    return fs.S3FileSystem(access_key=server.access_key, secret_key=server.secret_key,
                           endpoint_override=server.endpoint, scheme="http",
                           region=server.region, allow_bucket_creation=True)


def make_bucket(server: S3Server, bucket: str | None = None) -> bool:
    client(server).create_dir(bucket or server.bucket)
    return True


def warm(server: S3Server) -> bool:
    s3 = client(server)
    key = f"{server.bucket}/.antidote-warm"
    with s3.open_output_stream(key) as out:
        out.write(b"\0" * (1 << 20))  # larger than what the filer keeps inline
    s3.delete_file(key)
    return True
