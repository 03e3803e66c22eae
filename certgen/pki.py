"""The webhook's PKI: a private CA and a serving certificate. No Kubernetes here.

`reconcile` is the single decision point shared by `certgen create` (Secrets)
and `certgen local` / `write_local` (files): given what is stored, the
requested hosts, a policy and the time, it keeps what is still good and
issues only what must change, so running it twice changes nothing.
"""

from __future__ import annotations

import ipaddress
import os
import re
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import cast

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from certgen import log
from certgen.duration import format_duration, format_instant

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

ORGANIZATION = "hami-webhook"
BACKDATE = timedelta(minutes=5)
"""notBefore lies this far in the past so a client whose clock lags still accepts a fresh cert."""

_DNS_NAME = re.compile(r"(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NOT_SIGNED_BY_CA = "serving certificate is not signed by the current CA"
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
class Policy:
    """How certificates are made and when they are renewed; invalid combinations raise ValueError."""

    key_type: KeyType = KeyType.ECDSA_P256
    ca_validity: timedelta = timedelta(hours=87600)
    cert_validity: timedelta = timedelta(hours=8760)
    renew_before: timedelta = timedelta(hours=720)

    def __post_init__(self) -> None:
        if self.renew_before >= self.cert_validity:
            raise ValueError(
                f"--renew-before ({format_duration(self.renew_before)}) must be shorter than "
                f"--cert-validity ({format_duration(self.cert_validity)})"
            )
        if self.cert_validity > self.ca_validity:
            raise ValueError(
                f"--cert-validity ({format_duration(self.cert_validity)}) must not exceed "
                f"--ca-validity ({format_duration(self.ca_validity)})"
            )


@dataclass(frozen=True)
class Stored:
    """PEM material as last stored; any part may be missing or garbage.

    `ca_cert` may hold a bundle: the CA is the certificate matching `ca_key`.
    """

    ca_cert: bytes | None = None
    ca_key: bytes | None = field(default=None, repr=False)
    bundle: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Material:
    """Canonical PEM to store: the CA pair, the trust bundle and the serving pair."""

    ca_cert: bytes
    ca_key: bytes = field(repr=False)
    bundle: bytes
    cert: bytes
    key: bytes = field(repr=False)


@dataclass(frozen=True)
class Plan:
    """What `reconcile` will store, and why (a reason of None means 'kept as it was')."""

    material: Material
    ca_reason: str | None
    leaf_reason: str | None
    ca_not_after: datetime
    leaf_not_after: datetime
    hosts: tuple[str, ...]
    previous_cas: int = 0
    overlap_until: datetime | None = None

    def report(self) -> None:
        """Log one line for the CA, one for the serving certificate, one for the bundle overlap."""
        if self.ca_reason:
            log.info("issued new CA", reason=self.ca_reason, not_after=self.ca_not_after)
        else:
            log.info("CA still valid, kept", not_after=self.ca_not_after)
        if self.leaf_reason:
            log.info(
                "issued serving certificate",
                reason=self.leaf_reason,
                hosts=self.hosts,
                not_after=self.leaf_not_after,
            )
        else:
            log.info(
                "serving certificate still valid, kept",
                hosts=self.hosts,
                not_after=self.leaf_not_after,
            )
        if self.previous_cas:
            log.info(
                "CA bundle also trusts the previous CA during the overlap period",
                previous_cas=self.previous_cas,
                until=self.overlap_until,
            )


@dataclass(frozen=True)
class _Pair:
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


def reconcile(stored: Stored, hosts: str | Sequence[str], policy: Policy, now: datetime) -> Plan:
    """Decide the material to store: keep what is valid, re-issue only what must change.

    The CA is re-issued only when missing, broken or expiring within
    `policy.renew_before`; the leaf also when hosts, key type or lifetime no
    longer match, or when its CA changed. The bundle is the current CA plus
    previous CAs for one overlap period (`renew_before`) after the current
    CA's notBefore, each only while unexpired.
    """
    names = normalize_hosts(hosts)
    ca, ca_reason = _check_ca(stored, policy, now)
    if ca is None:
        ca = _issue_ca(policy.key_type, policy.ca_validity, now)
    leaf_reason = _check_leaf(stored, ca, names, policy, now)
    if ca_reason and leaf_reason == _NOT_SIGNED_BY_CA:
        leaf_reason = "the CA was re-issued"
    leaf = _load_pair(stored.cert, stored.key) if leaf_reason is None else None
    if leaf is None:
        leaf = _issue_leaf(ca, names, policy, now)

    overlap_until = ca.cert.not_valid_before_utc + policy.renew_before
    previous = _previous_cas(stored, ca.cert, now) if now < overlap_until else []
    bundle = [ca.cert, *previous]
    return Plan(
        material=Material(
            ca_cert=_cert_pem(ca.cert),
            ca_key=_key_pem(ca.key),
            bundle=b"".join(_cert_pem(cert) for cert in bundle),
            cert=_cert_pem(leaf.cert),
            key=_key_pem(leaf.key),
        ),
        ca_reason=ca_reason,
        leaf_reason=leaf_reason,
        ca_not_after=ca.cert.not_valid_after_utc,
        leaf_not_after=leaf.cert.not_valid_after_utc,
        hosts=names,
        previous_cas=len(previous),
        overlap_until=min([overlap_until, *(c.not_valid_after_utc for c in previous)]) if previous else None,
    )


def _check_ca(stored: Stored, policy: Policy, now: datetime) -> tuple[_Pair | None, str | None]:
    """The stored CA if it can keep signing, else None and the reason it cannot."""
    if not stored.ca_cert or not stored.ca_key:
        return None, "no CA certificate and key stored"
    key = _load_key(stored.ca_key)
    if key is None:
        return None, "stored CA key does not parse"
    certs = parse_certificates(stored.ca_cert)
    if not certs:
        return None, "stored CA certificate does not parse"
    ca = next((c for c in certs if _same_key(c.public_key(), key)), None)
    if ca is None:
        return None, "stored CA key does not match the CA certificate"
    if not _is_ca(ca):
        return None, "stored CA certificate is not a CA (basicConstraints CA:FALSE)"
    problem = _validity_problem(ca, policy.renew_before, now)
    return (None, f"CA {problem}") if problem else (_Pair(ca, key), None)


def _check_leaf(stored: Stored, ca: _Pair, hosts: tuple[str, ...], policy: Policy, now: datetime) -> str | None:
    """Why the stored serving certificate must be re-issued, or None if it can stay."""
    if not stored.cert or not stored.key:
        return "no serving certificate and key stored"
    leaf = _load_pair(stored.cert, stored.key)
    if leaf is None:
        return "stored serving certificate or key does not parse, or they do not match"
    if _is_ca(leaf.cert):
        return "stored serving certificate is a CA certificate"
    if leaf.cert.issuer != ca.cert.subject or not _signed_by(leaf.cert, ca.cert):
        return _NOT_SIGNED_BY_CA
    have = _san_names(leaf.cert)
    if set(have) != set(hosts):
        added = [h for h in hosts if h not in have]
        removed = [h for h in have if h not in hosts]
        return f"hosts changed (added: {', '.join(added) or '-'}; removed: {', '.join(removed) or '-'})"
    key_type = KeyType.of(leaf.cert.public_key())
    if key_type is not policy.key_type:
        have_type = key_type.value if key_type else "other"
        return f"key type {have_type} differs from the requested {policy.key_type.value}"
    lifetime = leaf.cert.not_valid_after_utc - leaf.cert.not_valid_before_utc
    if lifetime > policy.cert_validity:
        return (
            f"lifetime {format_duration(lifetime)} is longer than "
            f"--cert-validity {format_duration(policy.cert_validity)}"
        )
    problem = _validity_problem(leaf.cert, policy.renew_before, now)
    return f"serving certificate {problem}" if problem else None


def _validity_problem(cert: x509.Certificate, renew_before: timedelta, now: datetime) -> str | None:
    if cert.not_valid_before_utc > now:
        return f"is not valid before {format_instant(cert.not_valid_before_utc)}"
    if cert.not_valid_after_utc - renew_before <= now:
        return (
            f"expires {format_instant(cert.not_valid_after_utc)}, "
            f"within the {format_duration(renew_before)} renewal window"
        )
    return None


def _previous_cas(stored: Stored, current: x509.Certificate, now: datetime) -> list[x509.Certificate]:
    """Unexpired CA certificates stored before `current`, in stored order, without duplicates."""
    seen = {current.fingerprint(hashes.SHA256())}
    previous = []
    for cert in parse_certificates((stored.bundle or b"") + (stored.ca_cert or b"")):
        digest = cert.fingerprint(hashes.SHA256())
        if digest not in seen and _is_ca(cert) and cert.not_valid_after_utc > now:
            seen.add(digest)
            previous.append(cert)
    return previous


def _issue_ca(key_type: KeyType, validity: timedelta, now: datetime) -> _Pair:
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
    return _Pair(cert, key)


def _issue_leaf(ca: _Pair, hosts: tuple[str, ...], policy: Policy, now: datetime) -> _Pair:
    """Serving certificate for `hosts`; it never outlives its CA."""
    key = policy.key_type.generate()
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
        .not_valid_after(min(start + policy.cert_validity, ca.cert.not_valid_after_utc))
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
    return _Pair(cert, key)


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


def _san_names(cert: x509.Certificate) -> list[str]:
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


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        return False


def _signed_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _load_key(pem: bytes) -> PrivateKey | None:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        return None
    return key if isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)) else None


def _load_pair(cert_pem: bytes | None, key_pem: bytes | None) -> _Pair | None:
    """The leaf (first certificate) and its key, or None if either is bad or they differ."""
    certs = parse_certificates(cert_pem)
    key = _load_key(key_pem) if key_pem else None
    if not certs or key is None or not _same_key(certs[0].public_key(), key):
        return None
    return _Pair(certs[0], key)


def _same_key(public_key: object, key: PrivateKey) -> bool:
    return _spki(public_key) == _spki(key.public_key())


def _spki(public_key: object) -> bytes | None:
    if not isinstance(public_key, (ec.EllipticCurvePublicKey, rsa.RSAPublicKey)):
        return None
    return public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@dataclass(frozen=True)
class LocalFiles:
    """Paths `write_local` maintains; the webhook serves `cert`/`key`, clients trust `ca_cert`."""

    ca_cert: Path  # out_dir/ca.crt
    cert: Path  # out_dir/tls.crt
    key: Path  # out_dir/tls.key (mode 0600)


def write_local(
    out_dir: str | os.PathLike[str],
    hosts: Sequence[str],
    *,
    now: datetime | None = None,
    policy: Policy = Policy(),
) -> LocalFiles:
    """Keep ``ca.crt``, ``ca.key``, ``tls.crt`` and ``tls.key`` in `out_dir` valid for `hosts`.

    Same decisions as ``certgen create``. A file is replaced atomically and
    only when its bytes change; keys get mode 0600. ``tls.crt`` is written
    last so a reloader watching it always finds the matching ``tls.key``.
    """
    directory = Path(out_dir)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    files = LocalFiles(directory / "ca.crt", directory / "tls.crt", directory / "tls.key")
    ca_key = directory / "ca.key"
    bundle = _read(files.ca_cert)
    stored = Stored(bundle, _read(ca_key), bundle, _read(files.cert), _read(files.key))
    plan = reconcile(stored, hosts, policy, now or datetime.now(UTC))
    plan.report()
    material = plan.material
    written = [
        path.name
        for path, data, mode in (
            (ca_key, material.ca_key, 0o600),
            (files.ca_cert, material.bundle, 0o644),
            (files.key, material.key, 0o600),
            (files.cert, material.cert, 0o644),
        )
        if _write_if_changed(path, data, mode)
    ]
    if written:
        log.info("wrote files", dir=directory, files=written)
    else:
        log.info("files unchanged", dir=directory)
    return files


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _write_if_changed(path: Path, data: bytes, mode: int) -> bool:
    """Atomically replace `path` with `data` unless it already holds exactly that with `mode`."""
    if _read(path) == data and (path.stat().st_mode & 0o777) == mode:
        return False
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True
