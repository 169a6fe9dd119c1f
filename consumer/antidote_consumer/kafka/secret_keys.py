"""Keys of a Kafka `secretRef` Secret that Antidote refuses, naming each: settings that would
let whoever writes the Secret load code, run a command or send a file of the pod somewhere.

The Secret's properties reach Kafka clients verbatim: `librdkafka.<name>` keys in every
Python client of the driver, its local worker, the executors and reader Jobs (confluent_kafka,
i.e. librdkafka), the other keys in Spark's Kafka clients (kafka-clients, Java). The pods
hold more than the Secret gives: the driver mounts its ServiceAccount's token, which may
create pods. A Secret is often written by someone else than the image (a platform team's
credentials, a sync from a vault), so its keys must not be a way into the process.

Audited against librdkafka 2.16's property table (the strings of confluent_kafka's bundled
librdkafka) and kafka-clients 3.9's client configs:
- `librdkafka.*` keys must be credential settings (the namespaces in `NATIVE_ALLOWED`): the
  escape hatch is for what the Java properties cannot say (GSSAPI, OAUTHBEARER/OIDC, JKS
  stores), and every other librdkafka setting is the consumer's to choose (an
  `offset.store.path` writes a file anywhere, `test.mock.num.brokers` sends every write to
  an in-process mock cluster, `plugin.library.paths` loads a shared object);
- within them, and among the Java keys, the ones of `REFUSED` load code or run a command;
- values: token endpoint URLs must be http(s) (a `file:` URL reads any file of the pod and
  kafka-clients 3.9 accepts one unless a JVM property says otherwise); a file whose content
  is sent to the token endpoint (an OIDC assertion or its template) must be a key of the
  same Secret, never a path of the pod (the ServiceAccount token is one); the Kerberos
  principal and keytab librdkafka substitutes into its default `kinit` shell command must
  hold no shell syntax.

Class names in Java keys (`sasl.login.callback.handler.class`, `security.providers`...) are
left alone: they load a class already on the image's classpath, nothing the Secret brings,
and OIDC and cloud IAM logins need them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

NATIVE = "librdkafka."

# librdkafka settings a Secret may give (after the `librdkafka.` prefix): the credentials.
NATIVE_ALLOWED = ("security.", "sasl.", "ssl.", "https.", "enable.ssl.certificate.verification",
                  "enable.sasl.oauthbearer.unsecure.jwt")

# Key (as written in the Secret) -> why it is refused.
REFUSED: dict[str, str] = {
    NATIVE + "plugin.library.paths": "loads shared objects (librdkafka plugins) into the process",
    NATIVE + "ssl.engine.location": "loads a shared object (an OpenSSL engine) into the process",
    NATIVE + "ssl.engine.id": "chooses an OpenSSL engine to load into the process",
    NATIVE + "ssl.providers": "loads OpenSSL 3 provider modules (shared objects) into the process",
    NATIVE + "sasl.kerberos.kinit.cmd": "is a shell command librdkafka runs",
    "sasl.kerberos.kinit.cmd": "is a command the Java client runs",
}

# Keys whose value is a URL the client fetches: http(s) only.
URL_KEYS = (NATIVE + "sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.token.endpoint.url",
            "sasl.oauthbearer.jwks.endpoint.url")
# Keys naming a file whose content the client sends away (to the token endpoint): a key of
# the same Secret only (a relative name, resolved by auth.read_secret).
SENT_FILE_KEYS = (NATIVE + "sasl.oauthbearer.assertion.file",
                  NATIVE + "sasl.oauthbearer.assertion.jwt.template.file",
                  "sasl.oauthbearer.assertion.file", "sasl.oauthbearer.assertion.jwt.template.file")
# Substituted unquoted (the principal) or in double quotes (the keytab) into librdkafka's
# default `sasl.kerberos.kinit.cmd`, which /bin/sh runs.
SHELL_WORD_KEYS = (NATIVE + "sasl.kerberos.principal", NATIVE + "sasl.kerberos.keytab",
                   NATIVE + "sasl.kerberos.service.name")
_SHELL_WORD = re.compile(r"[A-Za-z0-9._/@+=:,-]*")
_HTTP = re.compile(r"https?://", re.I)


def refusals(props: Mapping[str, str], own_files: Mapping[str, bool] | None = None) -> list[str]:
    """`key: why` for every refused key of `props` (the Secret's properties, values as read;
    `own_files[key]` tells whether a file key's value was a key of the Secret itself), in key
    order. Never quotes a value."""
    out = []
    for key in sorted(props):
        why = _why(key, props[key], (own_files or {}).get(key, False))
        if why:
            out.append(f"{key}: {why}")
    return out


def refused_by_name(key: str) -> str | None:
    """Why `key` is refused whatever its value, or None."""
    # Property names are matched as librdkafka and kafka-clients match them: exactly. A key
    # in another case is unknown to both, and refused by the namespace rule or the client.
    if key in REFUSED:
        return REFUSED[key]
    if key.startswith(NATIVE) and not key[len(NATIVE):].startswith(NATIVE_ALLOWED):
        return ("is not a credential setting; librdkafka.* keys may be "
                + ", ".join(f"{p}*" if p.endswith(".") else p for p in NATIVE_ALLOWED)
                + " (the consumer sets its clients' other settings itself)")
    return None


def _why(key: str, value: str, own_file: bool) -> str | None:
    if (why := refused_by_name(key)) is not None:
        return why
    if key in URL_KEYS and not _HTTP.match(value.strip()):
        return "is not an http(s) URL (a file: URL would read a file of the pod)"
    if key in SENT_FILE_KEYS and not own_file:
        return ("names a file outside the Secret, and its content is sent to the token endpoint: "
                "put the file in the Secret and name its key")
    if key in SHELL_WORD_KEYS and _SHELL_WORD.fullmatch(value) is None:
        return ("holds characters other than letters, digits and ._/@+=:,- and librdkafka puts it "
                "into a shell command (its default sasl.kerberos.kinit.cmd)")
    return None
