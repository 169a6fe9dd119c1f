"""PKI of the local control plane: a CA, the API server's serving cert, an admin client
cert (group system:masters) and the service-account signing key."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local")
# 10.88.0.1: the node's bridge gateway, where pods reach the host (see node.py).
SERVER_IPS = ("127.0.0.1", "10.0.0.1", "10.88.0.1")


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    admin_cert: Path
    admin_key: Path
    sa_key: Path
    sa_pub: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.timezone.utc)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=365)))


def ensure_pki(directory: Path) -> Pki:
    """Create the PKI once per stack directory; reuse it on later starts."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(*(directory / n for n in ("ca.crt", "ca.key", "apiserver.crt", "apiserver.key",
                                        "admin.crt", "admin.key", "sa.key", "sa.pub")))
    if all(p.exists() for p in vars(pki).values()):
        return pki

    ca_key = _key()
    ca_name = _name("antidote-dev-ca")
    ca = (_builder(ca_name, ca_name, ca_key.public_key())
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))

    server_key = _key()
    sans = [x509.DNSName(n) for n in SERVER_NAMES] + [
        x509.IPAddress(ipaddress.ip_address(ip)) for ip in SERVER_IPS]
    server = (_builder(_name("kube-apiserver"), ca_name, server_key.public_key())
              .add_extension(x509.SubjectAlternativeName(sans), critical=False)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
              .sign(ca_key, hashes.SHA256()))

    admin_key = _key()
    admin = (_builder(_name("antidote-admin", "system:masters"), ca_name, admin_key.public_key())
             .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
             .sign(ca_key, hashes.SHA256()))

    # Service-account tokens are signed with RSA (RS256), the API server's default.
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    _write_key(pki.ca_key, ca_key)
    _write_cert(pki.ca_cert, ca)
    _write_key(pki.server_key, server_key)
    _write_cert(pki.server_cert, server)
    _write_key(pki.admin_key, admin_key)
    _write_cert(pki.admin_cert, admin)
    _write_key(pki.sa_key, sa_key)
    pki.sa_pub.write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return pki


def client_cert(pki: Pki, name: str, cn: str, org: str | None = None) -> tuple[Path, Path]:
    """A client cert signed by the stack's CA for one component (the node's kubelet,
    controllers, kube-proxy, CoreDNS): its user is `cn`, its group `org`. Created once per
    stack directory, beside the CA."""
    cert, key = pki.ca_cert.parent / f"{name}.crt", pki.ca_cert.parent / f"{name}.key"
    if cert.exists() and key.exists():
        return cert, key
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):  # `create` makes it with _key()
        raise ValueError(f"{pki.ca_key}: the stack's CA key is not an EC key; remove the stack's pki to make a new one")
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    k = _key()
    signed = (_builder(_name(cn, org), ca.subject, k.public_key())
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
              .sign(ca_key, hashes.SHA256()))
    _write_key(key, k)
    _write_cert(cert, signed)
    return cert, key
