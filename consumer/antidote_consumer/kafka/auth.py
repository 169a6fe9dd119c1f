"""Kafka credentials from a QueueConsumer's `secretRef`, for every Kafka client of the
consumer and the reader.

The Secret's keys are Kafka *Java* client properties (`security.protocol`, `sasl.*`,
`ssl.*`): Spark's Kafka source takes them as `kafka.<key>` options. The operator mounts the
Secret at `<root>/<name>/<key>` (root: $ANTIDOTE_SECRETS_DIR, default /etc/antidote/secrets)
in the driver, the executors and reader Jobs. The Python clients (confluent_kafka, i.e.
librdkafka) name and shape some of these differently, so they are translated here; what
cannot be translated is an error naming the property, never dropped: a client that quietly
connects without its TLS or SASL settings fails later, far from the cause.

- Keys in the `security.`, `sasl.` and `ssl.` namespaces are properties. Any other key is a
  file (a PEM, a keystore) for a `*.location` property to point at; a relative location
  names a key of the same Secret.
- Keys `librdkafka.<name>` are the escape hatch for what is not translated (GSSAPI,
  OAUTHBEARER, JKS stores): when a Secret has any, the Python clients get exactly those
  (prefix removed) and nothing is translated; Spark never gets them.
- Keys that would load code, run a command or send a file of the pod away are refused by
  name before any client sees them (secret_keys.py).

Errors name the Secret and the property; they never show a password, a JAAS config or a key
(only enumerations such as security.protocol are quoted).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from . import secret_keys

if TYPE_CHECKING:  # executors import this module: keep it light
    from antidote_api.semantics import EffectiveSettings

SECRETS_DIR_ENV = "ANTIDOTE_SECRETS_DIR"
DEFAULT_SECRETS_DIR = "/etc/antidote/secrets"  # builders.SECRETS_DIR: where the operator mounts
NATIVE = secret_keys.NATIVE
PROPERTY_NAMESPACES = ("security.", "sasl.", "ssl.", NATIVE)
# Properties whose values are never shown (errors of the client itself may quote them).
SENSITIVE = re.compile(r"password|jaas|secret|token|pem$|\.key$", re.I)


class KafkaAuthError(ValueError):
    """Credentials that cannot be read, translated or used; the message names the Secret
    (or property) and never a secret value."""


# --- reading the Secret ------------------------------------------------------------------

def secrets_root() -> Path:
    return Path(os.environ.get(SECRETS_DIR_ENV) or DEFAULT_SECRETS_DIR)


def secret_dir(name: str, root: Path | str | None = None) -> Path:
    return Path(root if root is not None else secrets_root()) / name


def is_property(key: str) -> bool:
    return key.startswith(PROPERTY_NAMESPACES)


def read_secret(name: str, root: Path | str | None = None) -> dict[str, str]:
    """The Java client properties of Secret `name` as mounted under `root`: one file per
    key; files that are not properties are left for `*.location` properties to name."""
    path = secret_dir(name, root)
    if not path.is_dir():
        raise KafkaAuthError(
            f"Kafka secret {name!r}: {path} does not exist. The operator mounts the Secret "
            f"there; elsewhere set {SECRETS_DIR_ENV} to a directory holding {name}/<key> files")
    keys = {e.name for e in path.iterdir() if not e.name.startswith("..")}  # kubelet's ..data
    props: dict[str, str] = {}
    own_files: dict[str, bool] = {}  # file-naming keys whose file is a key of this Secret
    for key in sorted(k for k in keys if is_property(k)):
        try:
            value = (path / key).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise KafkaAuthError(f"Kafka secret {name!r}: key {key} is not UTF-8 text") from None
        except OSError as err:
            raise KafkaAuthError(f"Kafka secret {name!r}: key {key}: {err.strerror}") from None
        value = value.rstrip("\r\n")  # a Secret made --from-file keeps the file's last newline
        if secret_keys.refused_by_name(key) is not None:
            props[key] = value  # named below as refused, whatever it points at
            continue
        if key.endswith((".location", ".file")) and value and not value.startswith("/"):
            if value not in keys:
                raise KafkaAuthError(f"Kafka secret {name!r}: {key} names key {value!r}, which "
                                     f"the Secret does not have (a relative location is a key "
                                     f"of the same Secret)")
            value = str(path / value)
        if key.endswith((".location", ".file")):
            own = os.path.abspath(value)  # normalized: a `..` cannot leave and come back
            own_files[key] = os.path.dirname(own) == os.path.abspath(path) and os.path.basename(own) in keys
        props[key] = value
    if not props:
        raise KafkaAuthError(f"Kafka secret {name!r} ({path}) has no Kafka client properties "
                             "(keys security.*, sasl.*, ssl.* or librdkafka.*)")
    if refused := secret_keys.refusals(props, own_files):
        raise KafkaAuthError(f"Kafka secret {name!r} ({path}): refused "
                             f"{'a key' if len(refused) == 1 else 'keys'}: " + "; ".join(refused)
                             + " (see docs/consumer.md, \"Keys a Secret may not set\")")
    return props


# --- Spark ---------------------------------------------------------------------------------

def spark_options(props: Mapping[str, str]) -> dict[str, str]:
    """Options of Spark's Kafka source and sink: every Java property as `kafka.<key>`."""
    return {f"kafka.{k}": v for k, v in props.items() if not k.startswith(NATIVE)}


# --- librdkafka (confluent_kafka) ----------------------------------------------------------

_JAAS_TOKEN = re.compile(r'\s*(?:(;)|([^\s=;"]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))|([^\s=;"]+))',
                         re.S)
_LOGIN_MODULES = {"PLAIN": "security.plain.PlainLoginModule",
                  "SCRAM-SHA-256": "security.scram.ScramLoginModule",
                  "SCRAM-SHA-512": "security.scram.ScramLoginModule"}
_FLAGS = {"required", "requisite", "sufficient", "optional"}


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """(login module class, options) of a one-module `sasl.jaas.config`, such as
    `org.apache...PlainLoginModule required username="u" password="p";`. Quoted values may
    hold escaped quotes and backslashes. ValueError (never quoting the text) when malformed."""
    words: list[str] = []
    options: dict[str, str] = {}
    pos, ended = 0, False
    text = text.strip()
    while pos < len(text):
        m = _JAAS_TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"cannot parse it at character {pos}")
        pos = m.end()
        semi, key, quoted, bare, word = m.groups()
        if ended and (key or word):
            raise ValueError("has more than one login module; Kafka takes exactly one")
        if semi:
            ended = True
        elif key:
            if len(words) != 2:
                raise ValueError("must start with a login module class and a flag")
            value = bare if quoted is None else re.sub(r"\\(.)", r"\1", quoted, flags=re.S)
            options[key] = value
        elif options:
            raise ValueError(f"has a stray word after the options at character {m.start(5)}")
        else:
            words.append(word)
    if not ended:
        raise ValueError("does not end with ';'")
    if len(words) != 2 or words[1] not in _FLAGS:
        raise ValueError("must start with a login module class and a flag "
                         "(required, requisite, sufficient or optional)")
    return words[0], options


def librdkafka(props: Mapping[str, str]) -> dict[str, str]:
    """The confluent_kafka configuration of Java client properties `props`; KafkaAuthError
    naming every property that cannot be translated."""
    native = {k[len(NATIVE):]: v for k, v in props.items() if k.startswith(NATIVE)}
    if native:
        return native  # written by hand for librdkafka: nothing is translated
    out: dict[str, str] = {}
    errors: list[str] = []
    todo = dict(props)

    def fail(key: str, why: str) -> None:
        errors.append(f"{key}: {why}")

    protocol = (todo.pop("security.protocol", None) or "PLAINTEXT").upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        fail("security.protocol", f"{protocol!r} is not PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
    elif "security.protocol" in props:
        out["security.protocol"] = protocol
    _sasl(todo, out, fail, protocol)
    _ssl(todo, out, fail)
    for key in sorted(todo):
        fail(key, "has no translation for the Python clients (librdkafka)")
    if errors:
        raise KafkaAuthError(
            "cannot configure the Python Kafka clients: " + "; ".join(errors)
            + ". Give their settings as librdkafka.<property> keys instead (then nothing is "
              "translated), or leave the property out")
    return out


def _sasl(todo: dict, out: dict, fail, protocol: str) -> None:
    mechanism = todo.pop("sasl.mechanism", None)
    jaas = todo.pop("sasl.jaas.config", None)
    if not protocol.startswith("SASL_"):
        for key, value in (("sasl.mechanism", mechanism), ("sasl.jaas.config", jaas)):
            if value is not None:
                fail(key, f"is set, but security.protocol is {protocol}, so no SASL is used; "
                          "set security.protocol to SASL_SSL or SASL_PLAINTEXT")
        return
    if mechanism is None:
        fail("sasl.mechanism", "is not set, and the Java client's default, GSSAPI (Kerberos), "
                               "is not translated; set PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
        return
    mechanism = mechanism.upper()
    if mechanism not in _LOGIN_MODULES:
        fail("sasl.mechanism", f"{mechanism!r} is not translated (only PLAIN, SCRAM-SHA-256 "
                               "and SCRAM-SHA-512 are)")
        return
    out["sasl.mechanisms"] = mechanism
    if jaas is None:
        fail("sasl.jaas.config", f"is missing: {mechanism} needs the username and password")
        return
    try:
        module, options = parse_jaas(jaas)
    except ValueError as err:
        fail("sasl.jaas.config", str(err))
        return
    if not module.endswith(_LOGIN_MODULES[mechanism]):
        fail("sasl.jaas.config", f"login module {module.rsplit('.', 1)[-1]} does not go with "
                                 f"sasl.mechanism {mechanism} (expected "
                                 f"{_LOGIN_MODULES[mechanism].rsplit('.', 1)[-1]})")
        return
    for option in ("username", "password"):
        if option not in options:
            fail("sasl.jaas.config", f"has no {option}")
    for option in sorted(set(options) - {"username", "password"}):
        fail("sasl.jaas.config", f"option {option} is not translated")
    if "username" in options and "password" in options:
        out["sasl.username"], out["sasl.password"] = options["username"], options["password"]


_PEM_ONLY = "librdkafka (the Python clients) reads PEM"


def _ssl(todo: dict, out: dict, fail) -> None:
    ttype = (todo.pop("ssl.truststore.type", None) or "JKS").upper()
    ktype = (todo.pop("ssl.keystore.type", None) or "JKS").upper()
    for key, kind in (("ssl.truststore.type", ttype), ("ssl.keystore.type", ktype)):
        if kind not in ("JKS", "PKCS12", "PEM"):
            fail(key, f"{kind!r} is not JKS, PKCS12 or PEM")
    if (loc := todo.pop("ssl.truststore.location", None)) is not None:
        if ttype == "PEM":
            out["ssl.ca.location"] = loc
        else:
            fail("ssl.truststore.location", f"is a {ttype} truststore (ssl.truststore.type), and "
                 f"{_PEM_ONLY} only: convert it to PEM and set ssl.truststore.type=PEM")
    if (pem := todo.pop("ssl.truststore.certificates", None)) is not None:
        out["ssl.ca.pem"] = pem
    if "ssl.truststore.password" in todo:
        todo.pop("ssl.truststore.password")
        fail("ssl.truststore.password", f"belongs to a JKS or PKCS12 truststore, and {_PEM_ONLY} "
             "truststores only, without a password")
    if (loc := todo.pop("ssl.keystore.location", None)) is not None:
        if ktype == "PEM":  # one file with the private key and the certificate chain
            out["ssl.certificate.location"] = out["ssl.key.location"] = loc
        elif ktype == "PKCS12":
            out["ssl.keystore.location"] = loc
        else:
            fail("ssl.keystore.location", f"is a JKS keystore (ssl.keystore.type), and {_PEM_ONLY} "
                 "or PKCS12: convert it and set ssl.keystore.type")
    if "ssl.keystore.password" in todo:
        password = todo.pop("ssl.keystore.password")
        if ktype == "PKCS12":
            out["ssl.keystore.password"] = password
        else:
            fail("ssl.keystore.password", f"belongs to a {ktype} keystore; librdkafka takes a "
                 "keystore password for PKCS12 only (a PEM key's is ssl.key.password)")
    if (pem := todo.pop("ssl.keystore.certificate.chain", None)) is not None:
        out["ssl.certificate.pem"] = pem
    if (pem := todo.pop("ssl.keystore.key", None)) is not None:
        out["ssl.key.pem"] = pem
    if (password := todo.pop("ssl.key.password", None)) is not None:
        out["ssl.key.password"] = password
    if (algo := todo.pop("ssl.endpoint.identification.algorithm", None)) is not None:
        if algo.lower() in ("https", ""):
            out["ssl.endpoint.identification.algorithm"] = algo.lower() or "none"
        else:
            fail("ssl.endpoint.identification.algorithm", f"{algo!r} is not https or empty")


# --- what the consumer and the reader use -----------------------------------------------------

def load(name: str, root: Path | str | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """(Java properties, librdkafka configuration) of Secret `name`; errors name it."""
    props = read_secret(name, root)
    try:
        return props, librdkafka(props)
    except KafkaAuthError as err:
        raise KafkaAuthError(f"Kafka secret {name!r} ({secret_dir(name, root)}): {err}") from None


def from_dir(path: str | None) -> dict[str, str]:
    """The librdkafka configuration of a Secret's directory (an executor reads it there, so
    no credential travels in a task); {} for None."""
    if path is None:
        return {}
    p = Path(path)
    return load(p.name, p.parent)[1]


def source_secret(s: EffectiveSettings) -> str | None:
    return s.source.secret_ref.name if s.source.secret_ref is not None else None


def sink_secret(s: EffectiveSettings) -> str | None:
    """The sink's Secret; the settings already default it to the source's when the sink has
    neither bootstrapServers nor secretRef."""
    kafka = s.sink.kafka if s.sink is not None else None
    return kafka.secret_ref.name if kafka is not None and kafka.secret_ref is not None else None


def source_config(s: EffectiveSettings, *, verify: bool = False) -> dict[str, str]:
    """librdkafka configuration for the source's cluster (source, retry, poison, dead-letter
    and ledger topics); {} without a secretRef. `verify`: connect once, so that refused
    credentials fail here, naming the Secret, instead of as a timeout somewhere later."""
    name = source_secret(s)
    if name is None:
        return {}
    conf = load(name)[1]
    if verify:
        check(conf, s.source.bootstrap_servers, name)
    return conf


def source_spark_options(s: EffectiveSettings) -> dict[str, str]:
    name = source_secret(s)
    return spark_options(load(name)[0]) if name is not None else {}


def sink_secret_dir(s: EffectiveSettings, *, verify: bool = False) -> str | None:
    """Where the executors read the sink's Secret (the same path as on the driver); the
    credentials are checked here first, so a bad Secret stops the driver at start instead
    of failing every batch on the executors."""
    name = sink_secret(s)
    if name is None:
        return None
    conf = load(name)[1]
    assert s.sink is not None and s.sink.kafka is not None  # a sink secret is a Kafka sink's
    bootstrap = s.sink.kafka.bootstrap_servers or s.source.bootstrap_servers
    if verify and (name, bootstrap) != (source_secret(s), s.source.bootstrap_servers):
        check(conf, bootstrap, name)  # else the source's check covered it
    return os.path.abspath(secret_dir(name))


def verified_source_config(s: EffectiveSettings) -> dict[str, str]:
    """The source's librdkafka configuration, after checking the source's and the sink's
    credentials against their brokers: what the driver does first."""
    conf = source_config(s, verify=True)
    sink_secret_dir(s, verify=True)
    return conf


REFUSED = ("_AUTHENTICATION", "_SSL", "SASL_AUTHENTICATION_FAILED", "TOPIC_AUTHORIZATION_FAILED",
           "CLUSTER_AUTHORIZATION_FAILED")


def check(conf: Mapping[str, str], bootstrap: str, secret: str, timeout: float = 30.0) -> None:
    """Connect with `conf`; KafkaAuthError naming `secret` when the brokers refuse it or do
    not answer in `timeout` seconds."""
    from confluent_kafka import KafkaException

    from .retry import Unanswered, connect_once

    def refused(errors: list) -> KafkaAuthError | None:
        named = [e for e in errors if e.name() in REFUSED]
        return KafkaAuthError(f"Kafka at {bootstrap} refused the credentials of secret {secret!r}: "
                              f"{redact(named[-1].str(), conf)}") if named else None

    try:
        connect_once(dict(conf), bootstrap, timeout, refused)
    except KafkaException as err:  # from the client's constructor: settings it cannot take
        raise KafkaAuthError(f"Kafka secret {secret!r}: the Python client refuses its settings: "
                             f"{redact(str(err), conf)}") from None
    except Unanswered as err:
        raise KafkaAuthError(f"Kafka at {bootstrap} did not answer within {timeout:.0f}s "
                             f"with the credentials of secret {secret!r}: "
                             f"{redact(err.last, conf)}") from None


def redact(text: str, conf: Mapping[str, str]) -> str:
    """`text` with every value of `conf` that may be secret replaced."""
    for key, value in conf.items():
        if SENSITIVE.search(key) and isinstance(value, str) and value and value in text:
            text = text.replace(value, "<redacted>")
    return text
