"""certgen.pki: the certificate profile and the keep/re-issue decisions, without Kubernetes."""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID

from certgen import certificates, local, pki
from certgen.duration import format_duration, parse_duration
from tests.certgen.helpers import certs, handshake, issue, key_public_bytes, spki, stored, write_pair

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
HOSTS = "hami-webhook.hami-system.svc,hami-webhook.hami-system.svc.cluster.local,127.0.0.1"
POLICY = pki.Policy()
RSA_2048 = pki.Policy(key_type=certificates.KeyType.RSA_2048)


# --- the certificate profile: what one issuance looks like --------------------------------------------------


@pytest.mark.parametrize("key_type", list(certificates.KeyType), ids=lambda k: k.value)
def test_issued_certificates_follow_the_profile(key_type: certificates.KeyType) -> None:
    policy = pki.Policy(key_type=key_type)
    material = issue(HOSTS, now=NOW, policy=policy)
    [ca] = certs(material.ca_cert)
    [bundle_ca] = certs(material.bundle)
    [leaf] = certs(material.cert)
    assert bundle_ca == ca

    # CA: self-issued, self-signed, CA:TRUE pathlen 0 critical, keyCertSign critical, SKI.
    assert ca.subject == ca.issuer and ca.subject.rfc4514_string()
    ca.verify_directly_issued_by(ca)
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca and constraints.value.path_length == 0
    usage = ca.extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical and usage.value.key_cert_sign and usage.value.crl_sign
    assert not usage.value.digital_signature
    ca_ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value

    # Leaf: CA:FALSE, serverAuth, digitalSignature (+keyEncipherment for RSA), no CN, AKI == CA SKI.
    leaf.verify_directly_issued_by(ca)
    assert leaf.issuer == ca.subject
    assert leaf.subject.rfc4514_string() == "O=hami-webhook"
    constraints = leaf.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and not constraints.value.ca
    usage = leaf.extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical and usage.value.digital_signature and not usage.value.key_cert_sign
    assert usage.value.key_encipherment == key_type.value.startswith("rsa")
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    aki = leaf.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    assert aki.key_identifier == ca_ski.digest
    leaf.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)

    # SANs: exactly the hosts, IPs as IP SANs only.
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [
        "hami-webhook.hami-system.svc",
        "hami-webhook.hami-system.svc.cluster.local",
    ]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]

    # Keys: PKCS8 PEM, matching the certificates, of the requested type.
    for key_pem, cert in ((material.key, leaf), (material.ca_key, ca)):
        assert key_pem.startswith(b"-----BEGIN PRIVATE KEY-----\n")
        assert key_public_bytes(key_pem) == spki(cert.public_key())
        assert certificates.KeyType.of(cert.public_key()) is key_type

    # Validity: backdated 5 minutes, configured lifetimes, leaf inside the CA.
    for cert, lifetime in ((ca, policy.ca_validity), (leaf, policy.cert_validity)):
        assert cert.not_valid_before_utc == NOW - timedelta(minutes=5)
        assert cert.not_valid_after_utc - cert.not_valid_before_utc == lifetime
        assert isinstance(cert.signature_hash_algorithm, hashes.SHA256)
        assert 0 < cert.serial_number < 2**159
    assert leaf.not_valid_after_utc <= ca.not_valid_after_utc
    assert leaf.serial_number != ca.serial_number


def test_key_types_generate_the_named_algorithm() -> None:
    assert isinstance(certificates.KeyType.ECDSA_P256.generate(), ec.EllipticCurvePrivateKey)
    assert certificates.KeyType.RSA_3072.generate().key_size == 3072


def test_serials_and_keys_differ_between_issuances() -> None:
    first, second = issue(now=NOW), issue(now=NOW)
    assert certs(first.cert)[0].serial_number != certs(second.cert)[0].serial_number
    assert first.key != second.key and first.ca_key != second.ca_key


def test_leaf_is_clamped_to_the_ca_lifetime() -> None:
    """A leaf issued late in the CA's life must not outlive it."""
    material = issue(now=NOW)
    later = certs(material.ca_cert)[0].not_valid_after_utc - 100 * DAY
    renewed = pki.reconcile(stored(material, cert=None), "svc.ns.svc,127.0.0.1", POLICY, later).material
    assert renewed.ca_cert == material.ca_cert
    assert certs(renewed.cert)[0].not_valid_after_utc == certs(material.ca_cert)[0].not_valid_after_utc


def test_a_foreign_ca_without_subject_key_identifier_can_sign() -> None:
    key = certificates.KeyType.ECDSA_P256.generate()
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "external-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - DAY)
        .not_valid_after(NOW + 3650 * DAY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    plan = pki.reconcile(pki.Stored(ca_cert=ca_pem, ca_key=key_pem), HOSTS, POLICY, NOW)
    assert plan.ca_reason is None and plan.material.ca_cert == ca_pem
    [leaf] = certs(plan.material.cert)
    leaf.verify_directly_issued_by(ca)
    aki = leaf.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    assert aki == x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key())


# --- in memory: a strict client accepts the leaf for its SANs only ----------------


@pytest.mark.parametrize(
    ("server_name", "accepted"),
    [
        ("hami-webhook.hami-system.svc", True),
        ("hami-webhook.hami-system.svc.cluster.local", True),
        ("127.0.0.1", True),
        ("HAMI-WEBHOOK.hami-system.svc", True),
        ("hami-webhook.other.svc", False),
        ("hami-webhook", False),
        ("127.0.0.2", False),
    ],
)
def test_client_trusting_only_the_bundle_checks_sans(tmp_path: Path, server_name: str, accepted: bool) -> None:
    material = issue(HOSTS, now=datetime.now(UTC))
    cert_file, key_file = write_pair(tmp_path, material)
    if accepted:
        assert handshake(cert_file, key_file, material.bundle, server_name) in ("TLSv1.2", "TLSv1.3")
    else:
        with pytest.raises(ssl.SSLCertVerificationError, match="match"):
            handshake(cert_file, key_file, material.bundle, server_name)


def test_client_with_another_ca_rejects_the_leaf(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    cert_file, key_file = write_pair(tmp_path, issue(HOSTS, now=now))
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer"):
        handshake(cert_file, key_file, issue(HOSTS, now=now).bundle, "hami-webhook.hami-system.svc")


def test_no_common_name_fallback(tmp_path: Path) -> None:
    """The leaf has no CN, so the only names a client can match are the SANs."""
    leaf = certs(issue(HOSTS, now=NOW).cert)[0]
    assert not leaf.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)


# --- reconcile: keep or re-issue ----------------------------------------------------------

BASE_TIME = NOW - 200 * DAY  # leaf lifetime 365d, renewal window 30d: fine at NOW
BASE = issue(HOSTS, now=BASE_TIME)
OTHER = issue(HOSTS, now=BASE_TIME)
Mutation = Callable[[pki.Material], pki.Stored]


@pytest.mark.parametrize(
    ("mutate", "hosts", "policy", "now", "new_ca", "leaf_reason"),
    [
        pytest.param(stored, HOSTS, POLICY, NOW, False, None, id="valid-kept"),
        pytest.param(
            stored,
            " 127.0.0.1,HAMI-WEBHOOK.hami-system.svc,hami-webhook.hami-system.svc.cluster.local,127.0.0.1",
            POLICY,
            NOW,
            False,
            None,
            id="same-hosts-other-spelling-kept",
        ),
        pytest.param(stored, HOSTS, POLICY, BASE_TIME + 340 * DAY, False, "renewal window", id="leaf-expiring"),
        pytest.param(stored, HOSTS, POLICY, BASE_TIME + 400 * DAY, False, "renewal window", id="leaf-expired"),
        pytest.param(stored, HOSTS + ",10.0.0.1", POLICY, NOW, False, "added: 10.0.0.1", id="host-added"),
        pytest.param(stored, "127.0.0.1", POLICY, NOW, False, "removed: hami-webhook", id="host-removed"),
        pytest.param(
            stored,
            HOSTS,
            pki.Policy(key_type=certificates.KeyType.RSA_2048),
            NOW,
            False,
            "key type",
            id="key-type-changed",
        ),
        pytest.param(
            stored,
            HOSTS,
            pki.Policy(cert_validity=90 * DAY, renew_before=10 * DAY),
            NOW,
            False,
            "longer than --cert-validity",
            id="validity-shortened",
        ),
        pytest.param(lambda m: stored(m, cert=None), HOSTS, POLICY, NOW, False, "no serving", id="leaf-missing"),
        pytest.param(lambda m: stored(m, key=b""), HOSTS, POLICY, NOW, False, "no serving", id="leaf-key-empty"),
        pytest.param(lambda m: stored(m, cert=b"garbage"), HOSTS, POLICY, NOW, False, "does not parse", id="leaf-junk"),
        pytest.param(
            lambda m: stored(m, key=OTHER.key), HOSTS, POLICY, NOW, False, "do not match", id="leaf-key-mismatch"
        ),
        pytest.param(
            lambda m: stored(m, cert=OTHER.cert, key=OTHER.key),
            HOSTS,
            POLICY,
            NOW,
            False,
            "not signed by the current CA",
            id="leaf-from-other-ca",
        ),
        pytest.param(
            lambda m: stored(m, cert=m.ca_cert, key=m.ca_key),
            HOSTS,
            POLICY,
            NOW,
            False,
            "is a CA certificate",
            id="leaf-is-the-ca",
        ),
        pytest.param(lambda m: stored(m, bundle=None), HOSTS, POLICY, NOW, False, None, id="bundle-missing"),
        pytest.param(lambda m: stored(m, bundle=b"junk"), HOSTS, POLICY, NOW, False, None, id="bundle-junk"),
        pytest.param(lambda m: stored(m, ca_key=None), HOSTS, POLICY, NOW, True, "CA was re-issued", id="ca-key-lost"),
        pytest.param(
            lambda m: stored(m, ca_key=OTHER.ca_key), HOSTS, POLICY, NOW, True, "CA was re-issued", id="ca-key-mismatch"
        ),
        pytest.param(
            lambda m: stored(m, ca_cert=b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
            HOSTS,
            POLICY,
            NOW,
            True,
            "CA was re-issued",
            id="ca-cert-junk",
        ),
        pytest.param(
            lambda m: stored(m, ca_cert=m.cert, ca_key=m.key),
            HOSTS,
            POLICY,
            NOW,
            True,
            "CA was re-issued",
            id="ca-is-not-a-ca",
        ),
        pytest.param(stored, HOSTS, POLICY, BASE_TIME + 3640 * DAY, True, "CA was re-issued", id="ca-expiring"),
        pytest.param(lambda m: pki.Stored(), HOSTS, POLICY, NOW, True, "no serving", id="nothing-stored"),
    ],
)
def test_reconcile_keeps_or_reissues(
    mutate: Mutation, hosts: str, policy: pki.Policy, now: datetime, new_ca: bool, leaf_reason: str | None
) -> None:
    plan = pki.reconcile(mutate(BASE), hosts, policy, now)
    material = plan.material
    [ca] = certs(material.ca_cert)
    [leaf] = certs(material.cert)

    assert (plan.ca_reason is not None) is new_ca
    assert (material.ca_cert != BASE.ca_cert) is new_ca
    if leaf_reason is None:
        assert plan.leaf_reason is None
        assert (material.cert, material.key) == (BASE.cert, BASE.key)
    else:
        assert leaf_reason in (plan.leaf_reason or "")
        assert material.cert != BASE.cert and material.key != BASE.key
    assert certs(material.bundle)[0] == ca
    leaf.verify_directly_issued_by(ca)
    assert leaf.not_valid_after_utc - policy.renew_before > now
    assert plan.hosts == certificates.normalize_hosts(hosts)

    again = pki.reconcile(pki.Stored(**vars(material)), hosts, policy, now)
    assert again.material == material, "a second run must change nothing"
    assert again.ca_reason is None and again.leaf_reason is None


def test_ca_rotation_keeps_the_previous_ca_for_one_overlap_period() -> None:
    old_ca = certs(BASE.ca_cert)[0]
    rotation = old_ca.not_valid_after_utc - 10 * DAY
    rotated = pki.reconcile(stored(BASE), HOSTS, POLICY, rotation)
    assert rotated.ca_reason and "renewal window" in rotated.ca_reason
    new_ca, previous = certs(rotated.material.bundle)
    assert previous == old_ca and new_ca == certs(rotated.material.ca_cert)[0]
    assert rotated.previous_cas == 1 and rotated.overlap_until == old_ca.not_valid_after_utc

    # Until the old CA expires the bundle is stable; afterwards only the new CA remains.
    kept = pki.reconcile(pki.Stored(**vars(rotated.material)), HOSTS, POLICY, rotation + 9 * DAY)
    assert kept.material == rotated.material
    pruned = pki.reconcile(pki.Stored(**vars(rotated.material)), HOSTS, POLICY, rotation + 11 * DAY)
    assert certs(pruned.material.bundle) == [new_ca]
    assert pruned.material.cert == rotated.material.cert and pruned.previous_cas == 0


def test_early_ca_rotation_drops_the_previous_ca_after_renew_before() -> None:
    """A CA replaced long before its expiry (its key was lost) is trusted for one overlap period only."""
    rotated = pki.reconcile(stored(BASE, ca_key=None), HOSTS, POLICY, NOW)
    assert len(certs(rotated.material.bundle)) == 2
    assert rotated.overlap_until == certs(rotated.material.ca_cert)[0].not_valid_before_utc + POLICY.renew_before
    later = pki.reconcile(pki.Stored(**vars(rotated.material)), HOSTS, POLICY, NOW + 31 * DAY)
    assert certs(later.material.bundle) == certs(rotated.material.ca_cert)


def test_previous_ca_leaf_still_verifies_against_the_overlap_bundle(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    before = issue(HOSTS, now=now)
    after = pki.reconcile(stored(before, ca_key=None), HOSTS, POLICY, now).material
    for name, material in (("old", before), ("new", after)):
        (tmp_path / name).mkdir()
        cert_file, key_file = write_pair(tmp_path / name, material)
        handshake(cert_file, key_file, after.bundle, "hami-webhook.hami-system.svc")


@pytest.mark.parametrize(
    ("hosts", "expected"),
    [
        ("a.b.svc", ("a.b.svc",)),
        (" a.b.svc , 127.0.0.1 ", ("a.b.svc", "127.0.0.1")),
        ("A.B.svc,a.b.svc", ("a.b.svc",)),
        ("::1,0:0:0:0:0:0:0:1", ("::1",)),
        (["x.y", "10.0.0.1", "x.y"], ("x.y", "10.0.0.1")),
        ("*.ns.svc", ("*.ns.svc",)),
    ],
)
def test_normalize_hosts(hosts: str | list[str], expected: tuple[str, ...]) -> None:
    assert certificates.normalize_hosts(hosts) == expected


@pytest.mark.parametrize(
    ("hosts", "message"),
    [
        ("a.svc,", "empty host"),
        ("a.svc,,b.svc", "empty host"),
        (" ", "empty host"),
        ([], "at least one host"),
        ("bad_name.svc", "invalid host 'bad_name.svc'"),
        ("-a.svc", "invalid host"),
        ("a b", "invalid host"),
        ("x" * 254, "invalid host"),
    ],
)
def test_normalize_hosts_rejects(hosts: str | list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        certificates.normalize_hosts(hosts)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"renew_before": timedelta(hours=8760)}, "--renew-before"),
        ({"cert_validity": timedelta(hours=100), "renew_before": timedelta(hours=200)}, "--renew-before"),
        ({"ca_validity": timedelta(days=30), "renew_before": timedelta(days=1)}, "--cert-validity"),
    ],
)
def test_policy_rejects_inconsistent_durations(kwargs: dict[str, timedelta], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pki.Policy(**kwargs)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8760h", timedelta(hours=8760)),
        ("720h", timedelta(days=30)),
        ("30m", timedelta(minutes=30)),
        ("1h30m", timedelta(minutes=90)),
        ("365d", timedelta(days=365)),
        ("1.5h", timedelta(minutes=90)),
        ("500ms", timedelta(milliseconds=500)),
        ("90s", timedelta(seconds=90)),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "0h", "10", "h", "-5m", "1y", "5 m", "1h-"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("value", "text"),
    [(timedelta(hours=87600), "87600h"), (timedelta(minutes=90), "1h30m"), (timedelta(0), "0s")],
)
def test_format_duration(value: timedelta, text: str) -> None:
    assert format_duration(value) == text


# --- write_local ---------------------------------------------------------------------------


def _snapshot(directory: Path) -> dict[str, tuple[bytes, int, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mode & 0o777, p.stat().st_ino) for p in directory.iterdir()}


def test_write_local_creates_then_reuses(tmp_path: Path) -> None:
    out = tmp_path / "tls"
    files = local.write_local(out, ["localhost", "127.0.0.1"], now=NOW)
    assert files == local.LocalFiles(out / "ca.crt", out / "tls.crt", out / "tls.key")
    first = _snapshot(out)
    assert sorted(first) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert {name: mode for name, (_, mode, _) in first.items()} == {
        "ca.crt": 0o644,
        "ca.key": 0o600,
        "tls.crt": 0o644,
        "tls.key": 0o600,
    }
    assert out.stat().st_mode & 0o777 == 0o700
    [leaf] = certs(files.cert.read_bytes())
    leaf.verify_directly_issued_by(certs(files.ca_cert.read_bytes())[0])

    local.write_local(out, "localhost,127.0.0.1", now=NOW + DAY)
    assert _snapshot(out) == first, "valid files must not be rewritten"


def test_write_local_reissues_leaf_for_new_hosts_keeping_the_ca(tmp_path: Path) -> None:
    local.write_local(tmp_path, ["localhost"], now=NOW)
    before = _snapshot(tmp_path)
    files = local.write_local(tmp_path, ["localhost", "127.0.0.1"], now=NOW)
    after = _snapshot(tmp_path)
    assert after["ca.crt"] == before["ca.crt"] and after["ca.key"] == before["ca.key"]
    assert after["tls.crt"][0] != before["tls.crt"][0]
    san = certs(files.cert.read_bytes())[0].extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert san.value.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]


def test_write_local_repairs_a_broken_key_and_mode(tmp_path: Path) -> None:
    files = local.write_local(tmp_path, ["localhost"], now=NOW)
    ca_before = files.ca_cert.read_bytes()
    files.key.write_bytes(b"not a key")
    local.write_local(tmp_path, ["localhost"], now=NOW)
    assert key_public_bytes(files.key.read_bytes()) == spki(certs(files.cert.read_bytes())[0].public_key())
    assert files.ca_cert.read_bytes() == ca_before

    files.key.chmod(0o644)
    local.write_local(tmp_path, ["localhost"], now=NOW)
    assert files.key.stat().st_mode & 0o777 == 0o600


def test_write_local_rotates_the_ca_with_overlap(tmp_path: Path) -> None:
    files = local.write_local(tmp_path, ["localhost"], now=NOW)
    [old_ca] = certs(files.ca_cert.read_bytes())
    local.write_local(tmp_path, ["localhost"], now=old_ca.not_valid_after_utc - DAY)
    new_ca, previous = certs(files.ca_cert.read_bytes())
    assert previous == old_ca and new_ca != old_ca
    assert isinstance(certs(files.cert.read_bytes())[0].public_key(), ec.EllipticCurvePublicKey)
    certs(files.cert.read_bytes())[0].verify_directly_issued_by(new_ca)


def test_write_local_with_rsa_policy(tmp_path: Path) -> None:
    files = local.write_local(
        tmp_path, ["localhost"], now=NOW, policy=pki.Policy(key_type=certificates.KeyType.RSA_2048)
    )
    assert isinstance(certs(files.cert.read_bytes())[0].public_key(), rsa.RSAPublicKey)
