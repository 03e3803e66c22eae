"""The certificates certgen issues and reads: the X.509 profile of the CA and the serving certificate, keys, SANs
and PEM. Pure: no Kubernetes, no files, no clock (the time is passed in)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import cast

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

ORGANIZATION = "hami-webhook"

BACKDATE = timedelta(minutes=5)
"""notBefore lies this far in the past so a client whose clock lags still accepts a fresh cert."""

_DNS_NAME = re.compile(r"(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

_PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n.*?-----END CERTIFICATE-----\r?\n?", re.DOTALL)


class KeyType(Enum):
    """Key algorithms offered by ``--key-type``; the value is the flag spelling."""

    ECDSA_P256 = "ecdsa-p256"
    RSA_2048 = "rsa-2048"
    RSA_3072 = "rsa-3072"

    def generate(self) -> PrivateKey:
        if self is KeyType.ECDSA_P256:
            return ec.generate_private_key(ec.SECP256R1())
        return rsa.generate_private_key(public_exponent=65537, key_size=int(self.value.removeprefix("rsa-")))

    @classmethod
    def of(cls, public_key: object) -> KeyType | None:
        """The KeyType a certificate's public key was made with, or None if it is none of ours."""
        if isinstance(public_key, ec.EllipticCurvePublicKey):
            return cls.ECDSA_P256 if isinstance(public_key.curve, ec.SECP256R1) else None
        if isinstance(public_key, rsa.RSAPublicKey):
            return {2048: cls.RSA_2048, 3072: cls.RSA_3072}.get(public_key.key_size)
        return None


@dataclass(frozen=True)
class Pair:
    cert: x509.Certificate
    key: PrivateKey = field(repr=False)


def normalize_hosts(hosts: str | Iterable[str]) -> tuple[str, ...]:
    """Trim, lower-case and de-duplicate SAN names, keeping order; IPs in canonical form.

    A string is split on commas, like ``--host``. Raises ValueError naming the
    first empty or malformed item.
    """
    result: list[str] = []
    for raw in hosts.split(",") if isinstance(hosts, str) else hosts:
        item = raw.strip().lower()
        if not item:
            raise ValueError("empty host name (check for stray commas)")
        try:
            item = str(ipaddress.ip_address(item))
        except ValueError:
            if len(item) > 253 or not _DNS_NAME.fullmatch(item):
                raise ValueError(f"invalid host {raw.strip()!r}: not an IP address or DNS name") from None
        if item not in result:
            result.append(item)
    if not result:
        raise ValueError("at least one host is required")
    return tuple(result)


def parse_certificates(pem: bytes | None) -> list[x509.Certificate]:
    """Every well-formed PEM certificate in `pem`, skipping blocks that do not parse."""
    certs = []
    for block in _PEM_CERT.findall(pem or b""):
        try:
            certs.append(x509.load_pem_x509_certificate(block))
        except ValueError:
            continue
    return certs


def issue_ca(key_type: KeyType, validity: timedelta, now: datetime) -> Pair:
    key = key_type.generate()
    start = now - BACKDATE
    # A per-issue CN tells CAs apart in a bundle and in `openssl x509 -subject` output.
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, f"hami-webhook-ca@{int(now.timestamp())}"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
        ]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(key_cert_sign=True, crl_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Pair(cert, key)


def issue_leaf(ca: Pair, hosts: tuple[str, ...], key_type: KeyType, validity: timedelta, now: datetime) -> Pair:
    """Serving certificate for `hosts`; it never outlives its CA."""
    key = key_type.generate()
    start = now - BACKDATE
    try:
        ski = ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        aki = x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski)
    except x509.ExtensionNotFound:  # a CA certgen did not make
        aki = x509.AuthorityKeyIdentifier.from_issuer_public_key(
            cast(CertificateIssuerPublicKeyTypes, ca.cert.public_key())
        )
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION)]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(min(start + validity, ca.cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            _key_usage(
                digital_signature=True,
                key_encipherment=isinstance(key, rsa.RSAPrivateKey),
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.SubjectAlternativeName([_general_name(h) for h in hosts]),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(aki, critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    return Pair(cert, key)


def _key_usage(**enabled: bool) -> x509.KeyUsage:
    flags = dict.fromkeys(
        (
            "digital_signature",
            "content_commitment",
            "key_encipherment",
            "data_encipherment",
            "key_agreement",
            "key_cert_sign",
            "crl_sign",
            "encipher_only",
            "decipher_only",
        ),
        False,
    )
    return x509.KeyUsage(**(flags | enabled))


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def san_names(cert: x509.Certificate) -> list[str]:
    """SANs in `normalize_hosts` form; other SAN types are kept as text so they count as drift."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    names = []
    for name in san:
        if isinstance(name, x509.DNSName):
            names.append(name.value.lower())
        elif isinstance(name, x509.IPAddress):
            names.append(str(name.value))
        else:
            names.append(f"{type(name).__name__}:{name.value}")
    return names


def is_ca(cert: x509.Certificate) -> bool:
    try:
        return cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        return False


def signed_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def load_key(pem: bytes) -> PrivateKey | None:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        return None
    return key if isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)) else None


def load_pair(cert_pem: bytes | None, key_pem: bytes | None) -> Pair | None:
    """The leaf (first certificate) and its key, or None if either is bad or they differ."""
    certs = parse_certificates(cert_pem)
    key = load_key(key_pem) if key_pem else None
    if not certs or key is None or not same_key(certs[0].public_key(), key):
        return None
    return Pair(certs[0], key)


def same_key(public_key: object, key: PrivateKey) -> bool:
    return _spki(public_key) == _spki(key.public_key())


def _spki(public_key: object) -> bytes | None:
    if not isinstance(public_key, (ec.EllipticCurvePublicKey, rsa.RSAPublicKey)):
        return None
    return public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
