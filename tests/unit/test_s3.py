"""S3A in the image and the local S3 server: versions that must match, the server's command,
and what `dev env` and a consumer's `spec.spark.conf` get."""

from __future__ import annotations

import re
from pathlib import Path

import pyspark

from antidote_api import spark_conf as owned
from antidote_api.consumer import QueueConsumerSpec
from antidote_api.wire import SPARK_JARS_ENV
from antidote_devstack import build, s3
from antidote_devstack.stack import Stack

ROOT = Path(__file__).resolve().parents[2]


def test_hadoop_aws_is_the_hadoop_version_pyspark_ships() -> None:
    """hadoop-aws calls into Hadoop's internals: another version than pyspark's
    hadoop-client-api fails at the first `s3a://` call (NoSuchMethodError)."""
    jars = Path(pyspark.__file__).parent / "jars"
    (api,) = [p.name for p in jars.glob("hadoop-client-api-*.jar")]
    hadoop = re.fullmatch(r"hadoop-client-api-(.+)\.jar", api).group(1)
    pom = (ROOT / "hack/s3/pom.xml").read_text()
    assert f"<hadoop.version>{hadoop}</hadoop.version>" in pom


def test_the_image_fetches_the_s3a_jars_with_the_same_pom_as_the_stack() -> None:
    text = (ROOT / "docker/consumer.Dockerfile").read_text()
    assert "COPY hack/s3/pom.xml" in text
    assert "!hack/s3/pom.xml" in (ROOT / ".dockerignore").read_text().splitlines()
    assert build.JAR_SETS["s3"] == "s3" and "s3" not in build.DEFAULT_JAR_SETS


def test_only_a_stack_with_s3_builds_the_server_and_fetches_its_jars(monkeypatch) -> None:
    monkeypatch.setattr(build, "build_go", lambda name: Path("/bin") / name)
    monkeypatch.setattr(build, "build_jars", lambda name: Path("/jars") / name)
    monkeypatch.setattr(build, "say", lambda _m: None)
    assert "weed" not in build.build_all() and "s3-jars" not in build.build_all()
    both = build.build_all(s3=True)
    assert both["weed"] == Path("/bin/weed") and both["s3-jars"] == Path("/jars/s3")


def test_the_server_listens_on_the_stacks_host_on_the_given_ports_and_calls_nowhere() -> None:
    ports = {name: 40000 + i for i, name in enumerate(s3.PORTS)}
    argv = s3.argv("/bin/weed", Path("/d"), Path("/c.json"), "10.0.0.1", ports)
    flags = dict(a.lstrip("-").split("=", 1) for a in argv[2:] if "=" in a)
    assert flags["ip"] == flags["ip.bind"] == "10.0.0.1"
    assert flags["master.telemetry"] == "false"
    # Every listener has an explicit port: weed's own default for gRPC is HTTP + 10000.
    for name in s3.PORTS:
        assert flags[name.replace("_grpc", ".port.grpc") if name.endswith("_grpc") else f"{name}.port"] == str(ports[name])
    assert flags["s3.port.iceberg"] == flags["s3.port.lance"] == "0"


def test_the_identity_has_the_dev_keys() -> None:
    (ident,) = s3.identities("a", "b")["identities"]
    assert ident["credentials"] == [{"accessKey": "a", "secretKey": "b"}]


def test_spark_conf_for_an_s3_compatible_server_is_not_refused_and_holds_no_secret() -> None:
    conf = s3.spark_conf("http://127.0.0.1:9000")
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert not any("key" in k or "secret" in k for k in conf)
    assert owned.owned_keys(conf) == []
    QueueConsumerSpec.model_validate({  # the models accept them too (the CRD's CEL reads OWNED)
        "policyRef": {"name": "p"}, "handler": "m:f", "spark": {"conf": conf},
        "source": {"kafka": {"bootstrapServers": "k:9092", "topic": "t"}},
        "checkpoint": {"location": "s3a://b/c"}})
    assert "spark.hadoop.fs.s3a.connection.ssl.enabled" not in s3.spark_conf("https://s3.example")


def test_dev_env_names_the_server_its_keys_and_bucket_and_adds_the_jars() -> None:
    base = dict(dir="/s", kubeconfig="/k", apiserver_port=1, etcd_port=2, kafka_bootstrap="h:3",
                spark_jars=["/j/kafka.jar"])
    assert "AWS_ACCESS_KEY_ID" not in Stack(**base).env()
    env = Stack(**base, s3_endpoint="http://h:4", s3_jars=["/j/hadoop-aws.jar"]).env()
    assert env[SPARK_JARS_ENV] == "/j/kafka.jar,/j/hadoop-aws.jar"
    assert (env["ANTIDOTE_S3_ENDPOINT"], env["ANTIDOTE_S3_BUCKET"]) == ("http://h:4", s3.BUCKET)
    assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == (s3.ACCESS_KEY, s3.SECRET_KEY)
    assert Stack(**base, s3_endpoint="http://h:4").processes[-1] == s3.NAME


def test_s3a_credentials_add_web_identity_to_hadoops_default_unless_the_conf_chooses() -> None:
    from antidote_consumer.s3a import PROVIDERS_CONF, credential_providers

    chain = credential_providers({})[PROVIDERS_CONF].split(",")
    # The AWS SDK's order: the environment's keys, then the web identity token (IRSA), then
    # the instance's role; Hadoop's own settings-based providers first, as in its default.
    names = [c.rsplit(".", 1)[1] for c in chain]
    assert names == ["TemporaryAWSCredentialsProvider", "SimpleAWSCredentialsProvider",
                     "EnvironmentVariableCredentialsProvider",
                     "WebIdentityTokenFileCredentialsProvider", "IAMInstanceCredentialsProvider"]
    assert credential_providers({PROVIDERS_CONF: "x.Mine"}) == {}
