"""Kafka credentials: reading a mounted Secret, Spark options, and the translation of Java
client properties for librdkafka (confluent_kafka)."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import pytest

from antidote_api.consumer import QueueConsumerSpec
from antidote_api.policy import PoisonPolicySpec
from antidote_api.semantics import resolve
from antidote_consumer.kafka import auth as ka
from antidote_consumer.kafka.auth import KafkaAuthError

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PASSWORD = "s3cr\\et \"quoted\" ;pw"  # backslash, quotes, a semicolon


def jaas(module: str = PLAIN, username: str = "alice", password: str = PASSWORD, extra: str = "") -> str:
    def q(s: str) -> str:
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"{module} required username={q(username)} password={q(password)}{extra};"


def sasl(mechanism: str = "PLAIN", module: str = PLAIN, **extra: str) -> dict[str, str]:
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
            "sasl.jaas.config": jaas(module), **extra}


def error(props: dict[str, str]) -> str:
    with pytest.raises(KafkaAuthError) as err:
        ka.librdkafka(props)
    text = str(err.value)
    for key, value in props.items():
        if ka.SENSITIVE.search(key):
            assert value not in text
    assert PASSWORD not in text and "alice" not in text
    return text


# --- reading the Secret --------------------------------------------------------------------

def kubelet_mount(root: Path, name: str, data: dict[str, str | bytes]) -> Path:
    """A Secret volume as the kubelet writes it: keys are symlinks into ..data."""
    d = root / name
    stamp = d / "..2026_01_01_00_00_00.1"
    stamp.mkdir(parents=True)
    for key, value in data.items():
        (stamp / key).write_bytes(value if isinstance(value, bytes) else value.encode())
    (d / "..data").symlink_to(stamp.name)
    for key in data:
        (d / key).symlink_to(f"..data/{key}")
    return d


def test_read_secret_as_the_kubelet_mounts_it(tmp_path: Path) -> None:
    d = kubelet_mount(tmp_path, "creds", {
        "security.protocol": "SASL_SSL\n", "sasl.mechanism": "PLAIN\r\n",
        "sasl.jaas.config": jaas() + "\n", "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "ca.pem",  # relative: a key of the same Secret
        "ca.pem": "-----BEGIN CERTIFICATE-----\n", "user.p12": b"\x00\xff binary"})
    props = ka.read_secret("creds", tmp_path)
    assert props == {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                     "sasl.jaas.config": jaas(), "ssl.truststore.type": "PEM",
                     "ssl.truststore.location": str(d / "ca.pem")}


def test_read_secret_root_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kubelet_mount(tmp_path, "creds", {"security.protocol": "SSL"})
    monkeypatch.setenv(ka.SECRETS_DIR_ENV, str(tmp_path))
    assert ka.read_secret("creds") == {"security.protocol": "SSL"}
    monkeypatch.delenv(ka.SECRETS_DIR_ENV)
    assert ka.secret_dir("creds") == Path("/etc/antidote/secrets/creds")


def test_default_root_is_where_the_operator_mounts_secrets() -> None:
    from antidote_operator.builders.driver import SECRETS_DIR

    assert ka.DEFAULT_SECRETS_DIR == SECRETS_DIR


def test_read_secret_errors_name_the_secret_and_the_path(tmp_path: Path) -> None:
    with pytest.raises(KafkaAuthError, match=rf"'missing': {tmp_path}/missing does not exist.*"
                                             rf"{ka.SECRETS_DIR_ENV}"):
        ka.read_secret("missing", tmp_path)
    kubelet_mount(tmp_path, "files-only", {"ca.pem": "x", "password": "pw"})
    with pytest.raises(KafkaAuthError, match="'files-only'.* has no Kafka client properties"):
        ka.read_secret("files-only", tmp_path)
    kubelet_mount(tmp_path, "dangling", {"ssl.truststore.location": "ca.pem"})
    with pytest.raises(KafkaAuthError, match="'dangling': ssl.truststore.location names key 'ca.pem'"):
        ka.read_secret("dangling", tmp_path)
    kubelet_mount(tmp_path, "binary", {"ssl.keystore.key": b"\xff\xfe"})
    with pytest.raises(KafkaAuthError, match="'binary': key ssl.keystore.key is not UTF-8"):
        ka.read_secret("binary", tmp_path)


def test_load_prefixes_translation_errors_with_the_secret(tmp_path: Path) -> None:
    kubelet_mount(tmp_path, "jks", {"security.protocol": "SSL", "ssl.truststore.location": "/t.jks",
                                    "ssl.truststore.password": "changeit"})
    with pytest.raises(KafkaAuthError, match=r"^Kafka secret 'jks' \(.*/jks\): .*ssl.truststore.location") as err:
        ka.load("jks", tmp_path)
    assert "changeit" not in str(err.value)


# --- Spark -----------------------------------------------------------------------------------

def test_spark_options_are_every_java_property_prefixed() -> None:
    props = {**sasl(), "librdkafka.sasl.username": "u"}
    assert ka.spark_options(props) == {f"kafka.{k}": v for k, v in sasl().items()}


# --- librdkafka --------------------------------------------------------------------------------

@pytest.mark.parametrize("mechanism,module", [("PLAIN", PLAIN), ("SCRAM-SHA-256", SCRAM),
                                              ("scram-sha-512", SCRAM)])
def test_sasl_username_and_password_come_out_of_the_jaas_config(mechanism: str, module: str) -> None:
    assert ka.librdkafka(sasl(mechanism, module)) == {
        "security.protocol": "SASL_SSL", "sasl.mechanisms": mechanism.upper(),
        "sasl.username": "alice", "sasl.password": PASSWORD}


def test_shaded_login_modules_and_unquoted_values() -> None:
    props = {"security.protocol": "sasl_plaintext", "sasl.mechanism": "PLAIN", "sasl.jaas.config":
             f"kafkashaded.{PLAIN}  optional\n  username=bob\n  password=pw ;"}
    assert ka.librdkafka(props) == {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                                    "sasl.username": "bob", "sasl.password": "pw"}


def test_plaintext_needs_nothing() -> None:
    assert ka.librdkafka({"security.protocol": "PLAINTEXT"}) == {"security.protocol": "PLAINTEXT"}


def test_pem_stores_map_to_librdkafka_locations_and_inline_pems() -> None:
    assert ka.librdkafka({
        "security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": "/s/ca.pem",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": "/s/user.pem", "ssl.key.password": "kp",
        "ssl.endpoint.identification.algorithm": ""}) == {
        "security.protocol": "SSL", "ssl.ca.location": "/s/ca.pem",
        "ssl.certificate.location": "/s/user.pem", "ssl.key.location": "/s/user.pem",
        "ssl.key.password": "kp", "ssl.endpoint.identification.algorithm": "none"}
    assert ka.librdkafka({
        "security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.certificates": "CA",
        "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": "CHAIN", "ssl.keystore.key": "KEY",
        "ssl.endpoint.identification.algorithm": "HTTPS"}) == {
        "security.protocol": "SSL", "ssl.ca.pem": "CA", "ssl.certificate.pem": "CHAIN", "ssl.key.pem": "KEY",
        "ssl.endpoint.identification.algorithm": "https"}


def test_pkcs12_keystore_is_read_by_librdkafka_too() -> None:
    assert ka.librdkafka({"security.protocol": "SSL", "ssl.keystore.type": "PKCS12",
                          "ssl.keystore.location": "/s/user.p12", "ssl.keystore.password": "pw"}) == {
        "security.protocol": "SSL", "ssl.keystore.location": "/s/user.p12", "ssl.keystore.password": "pw"}


@pytest.mark.parametrize("props,expected", [
    ({"security.protocol": "SSL", "ssl.truststore.location": "/t.jks", "ssl.truststore.password": "tpw"},
     ["ssl.truststore.location: is a JKS truststore", "librdkafka (the Python clients) reads PEM",
      "ssl.truststore.password: belongs to a JKS or PKCS12 truststore"]),
    ({"security.protocol": "SSL", "ssl.truststore.type": "PKCS12", "ssl.truststore.location": "/t.p12"},
     ["ssl.truststore.location: is a PKCS12 truststore"]),
    ({"security.protocol": "SSL", "ssl.keystore.location": "/k.jks", "ssl.keystore.password": "kpw"},
     ["ssl.keystore.location: is a JKS keystore", "ssl.keystore.password: belongs to a JKS keystore"]),
    ({"security.protocol": "SSL", "ssl.keystore.type": "PEM", "ssl.keystore.location": "/k.pem",
      "ssl.keystore.password": "kpw"}, ["ssl.keystore.password: belongs to a PEM keystore"]),
    ({"security.protocol": "SASL_SSL", "sasl.jaas.config": jaas()},
     ["sasl.mechanism: is not set, and the Java client's default, GSSAPI"]),
    (sasl("OAUTHBEARER"), ["sasl.mechanism: 'OAUTHBEARER' is not translated"]),
    (sasl("SCRAM-SHA-256", PLAIN), ["sasl.jaas.config: login module PlainLoginModule does not go with "
                                    "sasl.mechanism SCRAM-SHA-256 (expected ScramLoginModule)"]),
    ({**sasl(), "sasl.jaas.config": jaas(SCRAM, extra=' tokenauth="true"')},
     ["login module ScramLoginModule does not go with"]),
    ({**sasl("SCRAM-SHA-512", SCRAM), "sasl.jaas.config": jaas(SCRAM, extra=' tokenauth="true"')},
     ["sasl.jaas.config: option tokenauth is not translated"]),
    ({**sasl(), "sasl.jaas.config": f'{PLAIN} required password="pw";'},
     ["sasl.jaas.config: has no username"]),
    ({**sasl(), "sasl.jaas.config": jaas()[:-1]}, ["sasl.jaas.config: does not end with ';'"]),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"},
     ["sasl.jaas.config: is missing: PLAIN needs the username and password"]),
    ({"sasl.mechanism": "PLAIN", "sasl.jaas.config": jaas()},
     ["sasl.mechanism: is set, but security.protocol is PLAINTEXT",
      "sasl.jaas.config: is set, but security.protocol is PLAINTEXT"]),
    ({"security.protocol": "TLS"}, ["security.protocol: 'TLS' is not PLAINTEXT, SSL"]),
    ({**sasl(), "ssl.protocol": "TLSv1.2", "sasl.login.callback.handler.class": "x.Y"},
     ["sasl.login.callback.handler.class: has no translation", "ssl.protocol: has no translation"]),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"},
     ["ssl.endpoint.identification.algorithm: 'ldap' is not https or empty"]),
])
def test_what_cannot_be_translated_is_an_error_naming_the_property(props, expected) -> None:
    text = error(props)
    for part in expected:
        assert part in text
    assert "librdkafka.<property> keys" in text  # and the way out


def test_librdkafka_keys_replace_the_translation() -> None:
    props = {"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI", "sasl.jaas.config": "krb5 ...",
             "librdkafka.security.protocol": "SASL_SSL", "librdkafka.sasl.mechanisms": "GSSAPI",
             "librdkafka.sasl.kerberos.keytab": "/s/keytab"}
    assert ka.librdkafka(props) == {"security.protocol": "SASL_SSL", "sasl.mechanisms": "GSSAPI",
                                    "sasl.kerberos.keytab": "/s/keytab"}
    assert "kafka.librdkafka.sasl.mechanisms" not in ka.spark_options(props)


@pytest.mark.parametrize("text,expected", [
    (f'{PLAIN} required username="a" password="b";', (PLAIN, {"username": "a", "password": "b"})),
    (f'{PLAIN} required username = "a\\"b\\\\" password="p;q";',
     (PLAIN, {"username": 'a"b\\', "password": "p;q"})),
    (f"{SCRAM} sufficient username=u password=p tokenauth=true;",
     (SCRAM, {"username": "u", "password": "p", "tokenauth": "true"})),
])
def test_parse_jaas(text: str, expected) -> None:
    assert ka.parse_jaas(text) == expected


@pytest.mark.parametrize("text,message", [
    (f'{PLAIN} required a="1"; {PLAIN} required b="2";', "more than one login module"),
    (f'{PLAIN} a="1";', "must start with a login module class and a flag"),
    (f'{PLAIN} maybe a="1";', "(required, requisite, sufficient or optional)"),
    (f'{PLAIN} required a="unterminated;', "cannot parse it at character"),
    (f'{PLAIN} required a="1" stray;', "stray word"),
])
def test_parse_jaas_errors_never_quote_the_text(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        ka.parse_jaas(text)
    assert '"1"' not in str(err.value) and "unterminated" not in str(err.value)


def test_redact_hides_secret_values_only() -> None:
    conf = {"sasl.username": "alice", "sasl.password": "hunter22", "ssl.key.pem": "KEYDATA"}
    assert ka.redact("user alice, pw hunter22, KEYDATA", conf) == "user alice, pw <redacted>, <redacted>"


# --- librdkafka accepts what the translation gives it ------------------------------------------

def _pem_files(tmp_path: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "antidote-test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.BestAvailableEncryption(b"keypass"))
    ca = tmp_path / "ca.pem"
    ca.write_bytes(cert_pem)
    keystore = tmp_path / "user.pem"  # a Java PEM keystore: the private key and its chain
    keystore.write_bytes(key_pem + cert_pem)
    return ca, keystore


def test_librdkafka_loads_the_translated_pem_stores(tmp_path: Path) -> None:
    from confluent_kafka import KafkaException, Producer

    ca, keystore = _pem_files(tmp_path)
    conf = ka.librdkafka({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": jaas(SCRAM),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca),
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore), "ssl.key.password": "keypass"})
    # librdkafka reads the CA, the certificate and the key when the client is created.
    Producer({**conf, "bootstrap.servers": "127.0.0.1:1", "log_level": 0}).flush(0)
    with pytest.raises(KafkaException, match="ssl.key"):
        Producer({**conf, "ssl.key.password": "wrong", "bootstrap.servers": "127.0.0.1:1", "log_level": 0})


# --- which Secret each side uses ---------------------------------------------------------------

def settings(sink: dict | None):
    qc = QueueConsumerSpec.model_validate({
        "policyRef": {"name": "p"},
        "source": {"kafka": {"bootstrapServers": "src:9092", "topic": "t", "secretRef": {"name": "src-creds"}}},
        "handler": "m:f", **({"sink": sink} if sink else {}), "checkpoint": {"location": "/c"}})
    return resolve(qc, PoisonPolicySpec(), name="c", namespace="ns")


def test_sink_uses_the_source_secret_only_on_the_source_cluster(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    assert ka.source_secret(settings(None)) == "src-creds"
    assert ka.sink_secret(settings(None)) is None
    assert ka.sink_secret(settings({"kafka": {"topic": "o"}})) == "src-creds"
    assert ka.sink_secret(settings({"kafka": {"topic": "o", "bootstrapServers": "other:9092", "delivery": "AtLeastOnce"}})) is None
    assert ka.sink_secret(settings({"kafka": {"topic": "o", "secretRef": {"name": "own"}}})) == "own"
    assert ka.sink_secret(settings({"path": "/out"})) is None
    # The executors get the Secret's directory, never its contents.
    kubelet_mount(tmp_path, "src-creds", {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                          "sasl.jaas.config": jaas()})
    monkeypatch.setenv(ka.SECRETS_DIR_ENV, str(tmp_path))
    where = ka.sink_secret_dir(settings({"kafka": {"topic": "o"}}))
    assert where == os.path.abspath(tmp_path / "src-creds")
    assert ka.from_dir(where)["sasl.password"] == PASSWORD and ka.from_dir(None) == {}
