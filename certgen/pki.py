"""The webhook's PKI: a private CA and a serving certificate. No Kubernetes here.

`reconcile` is the single decision point shared by `certgen create` (Secrets)
and `certgen local` / `write_local` (files): given what is stored, the
requested hosts, a policy and the time, it keeps what is still good and
issues only what must change, so running it twice changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes

from certgen import log
from certgen.certificates import (
    KeyType,
    Pair,
    cert_pem,
    is_ca,
    issue_ca,
    issue_leaf,
    key_pem,
    load_key,
    load_pair,
    normalize_hosts,
    parse_certificates,
    same_key,
    san_names,
    signed_by,
)
from certgen.duration import format_duration, format_instant

_NOT_SIGNED_BY_CA = "serving certificate is not signed by the current CA"


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
        ca = issue_ca(policy.key_type, policy.ca_validity, now)
    leaf_reason = _check_leaf(stored, ca, names, policy, now)
    if ca_reason and leaf_reason == _NOT_SIGNED_BY_CA:
        leaf_reason = "the CA was re-issued"
    leaf = load_pair(stored.cert, stored.key) if leaf_reason is None else None
    if leaf is None:
        leaf = issue_leaf(ca, names, policy.key_type, policy.cert_validity, now)

    overlap_until = ca.cert.not_valid_before_utc + policy.renew_before
    previous = _previous_cas(stored, ca.cert, now) if now < overlap_until else []
    bundle = [ca.cert, *previous]
    return Plan(
        material=Material(
            ca_cert=cert_pem(ca.cert),
            ca_key=key_pem(ca.key),
            bundle=b"".join(cert_pem(cert) for cert in bundle),
            cert=cert_pem(leaf.cert),
            key=key_pem(leaf.key),
        ),
        ca_reason=ca_reason,
        leaf_reason=leaf_reason,
        ca_not_after=ca.cert.not_valid_after_utc,
        leaf_not_after=leaf.cert.not_valid_after_utc,
        hosts=names,
        previous_cas=len(previous),
        overlap_until=min([overlap_until, *(c.not_valid_after_utc for c in previous)]) if previous else None,
    )


def _check_ca(stored: Stored, policy: Policy, now: datetime) -> tuple[Pair | None, str | None]:
    """The stored CA if it can keep signing, else None and the reason it cannot."""
    if not stored.ca_cert or not stored.ca_key:
        return None, "no CA certificate and key stored"
    key = load_key(stored.ca_key)
    if key is None:
        return None, "stored CA key does not parse"
    certs = parse_certificates(stored.ca_cert)
    if not certs:
        return None, "stored CA certificate does not parse"
    ca = next((c for c in certs if same_key(c.public_key(), key)), None)
    if ca is None:
        return None, "stored CA key does not match the CA certificate"
    if not is_ca(ca):
        return None, "stored CA certificate is not a CA (basicConstraints CA:FALSE)"
    problem = _validity_problem(ca, policy.renew_before, now)
    return (None, f"CA {problem}") if problem else (Pair(ca, key), None)


def _check_leaf(stored: Stored, ca: Pair, hosts: tuple[str, ...], policy: Policy, now: datetime) -> str | None:
    """Why the stored serving certificate must be re-issued, or None if it can stay."""
    if not stored.cert or not stored.key:
        return "no serving certificate and key stored"
    leaf = load_pair(stored.cert, stored.key)
    if leaf is None:
        return "stored serving certificate or key does not parse, or they do not match"
    if is_ca(leaf.cert):
        return "stored serving certificate is a CA certificate"
    if leaf.cert.issuer != ca.cert.subject or not signed_by(leaf.cert, ca.cert):
        return _NOT_SIGNED_BY_CA
    have = san_names(leaf.cert)
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
        if digest not in seen and is_ca(cert) and cert.not_valid_after_utc > now:
            seen.add(digest)
            previous.append(cert)
    return previous
