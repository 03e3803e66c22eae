"""`certgen create` against the real API server, through the FaultyProxy `api` where a test counts requests or
needs a fault.

Rules: docs/rules.md#certgen-writes-standard-tls-secrets, #certgen-create-changes-only-what-must-change.
"""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509

from certgen import certificates
from testbed.cluster import RealKube
from tests.certgen.helpers import (
    CA_SECRET,
    HOSTS,
    SECRET,
    SERVICE_HOST,
    Certgen,
    Cluster,
    certs,
    handshake,
    issue,
    json_lines,
    key_public_bytes,
    namespace,
    read_secret,
    requests_to,
    secret,
    secret_data,
    seed_secrets,
    spki,
)
from tests.realkube.faults import FaultyProxy

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)

DAY = timedelta(days=1)


@pytest.fixture
def create(cluster: Cluster) -> tuple[str, ...]:
    """`certgen create` for the test's namespace."""
    return ("create", "--namespace", cluster.namespace, "--secret-name", SECRET, "--host", HOSTS)


def _snapshot(cluster: Cluster) -> dict[str, dict]:
    return {name: read_secret(cluster, name) for name in (SECRET, CA_SECRET)}


def test_fresh_create_writes_both_secrets(
    certgen: Certgen, api: FaultyProxy, cluster: Cluster, create: tuple[str, ...], tmp_path: Path
) -> None:
    run = certgen(*create)
    assert run.code == 0, run.stderr

    serving, ca_secret = read_secret(cluster, SECRET), read_secret(cluster, CA_SECRET)
    assert serving["type"] == "kubernetes.io/tls"
    assert sorted(serving["data"]) == ["ca.crt", "tls.crt", "tls.key"]
    assert ca_secret["type"] == "Opaque"
    assert sorted(ca_secret["data"]) == ["ca.crt", "ca.key"]

    data, ca_data = secret_data(cluster, SECRET), secret_data(cluster, CA_SECRET)
    [ca] = certs(data["ca.crt"])
    assert certs(ca_data["ca.crt"]) == [ca]
    assert key_public_bytes(ca_data["ca.key"]) == spki(ca.public_key())
    [leaf] = certs(data["tls.crt"])
    leaf.verify_directly_issued_by(ca)
    assert key_public_bytes(data["tls.key"]) == spki(leaf.public_key())
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [SERVICE_HOST]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]

    (tmp_path / "tls.crt").write_bytes(data["tls.crt"])
    (tmp_path / "tls.key").write_bytes(data["tls.key"])
    handshake(tmp_path / "tls.crt", tmp_path / "tls.key", data["ca.crt"], SERVICE_HOST)

    assert [(r.method, r.path) for r in api.writes()] == [
        ("POST", f"/api/v1/namespaces/{cluster.namespace}/secrets"),
        ("POST", f"/api/v1/namespaces/{cluster.namespace}/secrets"),
    ]
    assert run.has("issued new CA", 'reason="no CA certificate and key stored"')
    assert run.has("created Secret", f"name={SECRET}", "type=kubernetes.io/tls")
    assert run.has("created Secret", f"name={CA_SECRET}", "type=Opaque")


def test_second_run_changes_nothing(
    certgen: Certgen, api: FaultyProxy, cluster: Cluster, create: tuple[str, ...]
) -> None:
    assert certgen(*create).code == 0
    before, writes = _snapshot(cluster), len(api.writes())

    run = certgen(*create)
    assert run.code == 0
    assert _snapshot(cluster) == before, "byte-identical Secrets, same resourceVersion"
    assert len(api.writes()) == writes, "no write request"
    assert run.has("Secret unchanged", f"name={SECRET}") and run.has("Secret unchanged", f"name={CA_SECRET}")
    assert run.has("CA still valid, kept") and run.has("serving certificate still valid, kept")


def test_expiring_leaf_is_reissued_with_the_same_ca(
    certgen: Certgen, api: FaultyProxy, cluster: Cluster, create: tuple[str, ...]
) -> None:
    old = issue(HOSTS, now=datetime.now(UTC) - 340 * DAY)  # expires in ~25 days, inside 720h
    ca_before, serving_before = seed_secrets(cluster, old)

    run = certgen(*create)
    assert run.code == 0, run.stderr
    data = secret_data(cluster)
    assert data["ca.crt"] == old.bundle, "caBundle stays valid without a re-patch"
    assert data["tls.crt"] != old.cert and data["tls.key"] != old.key
    [leaf] = certs(data["tls.crt"])
    leaf.verify_directly_issued_by(certs(old.ca_cert)[0])
    assert leaf.not_valid_after_utc > datetime.now(UTC) + 360 * DAY
    assert read_secret(cluster, CA_SECRET) == ca_before
    [put] = api.writes()
    assert put.method == "PUT" and put.path.endswith(f"/secrets/{SECRET}")
    assert put.json()["metadata"]["resourceVersion"] == serving_before["metadata"]["resourceVersion"]
    assert run.has("issued serving certificate", "renewal window")
    assert run.has("updated Secret", "changed=tls.crt,tls.key")


@pytest.mark.parametrize(
    ("hosts", "dns", "ips"),
    [
        (f"{SERVICE_HOST},{SERVICE_HOST}.cluster.local,127.0.0.1", [SERVICE_HOST, f"{SERVICE_HOST}.cluster.local"], 1),
        (SERVICE_HOST, [SERVICE_HOST], 0),
        (f"{SERVICE_HOST},127.0.0.1,::1", [SERVICE_HOST], 2),
    ],
    ids=["name-added", "ip-removed", "ipv6-added"],
)
def test_changed_hosts_reissue_the_leaf(
    certgen: Certgen, cluster: Cluster, create: tuple[str, ...], hosts: str, dns: list[str], ips: int
) -> None:
    assert certgen(*create).code == 0
    ca_before = secret_data(cluster)["ca.crt"]

    run = certgen("create", "--namespace", cluster.namespace, "--secret-name", SECRET, "--host", hosts)
    assert run.code == 0, run.stderr
    data = secret_data(cluster)
    assert data["ca.crt"] == ca_before
    san = certs(data["tls.crt"])[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == dns
    assert len(san.get_values_for_type(x509.IPAddress)) == ips
    assert run.has("issued serving certificate", "hosts changed")


def test_expiring_ca_is_rotated_with_an_overlap_bundle(
    certgen: Certgen, cluster: Cluster, create: tuple[str, ...], tmp_path: Path
) -> None:
    now = datetime.now(UTC)
    old = issue(HOSTS, now=now - timedelta(hours=87600) + 10 * DAY)  # CA expires in ~10 days
    [old_ca] = certs(old.ca_cert)
    seed_secrets(cluster, old)

    run = certgen(*create)
    assert run.code == 0, run.stderr
    data, ca_data = secret_data(cluster), secret_data(cluster, CA_SECRET)
    [new_ca] = certs(ca_data["ca.crt"])
    assert new_ca != old_ca and new_ca.not_valid_after_utc > now + 3600 * DAY
    assert certs(data["ca.crt"]) == [new_ca, old_ca], "new CA first, previous CA kept for the overlap"
    certs(data["tls.crt"])[0].verify_directly_issued_by(new_ca)
    assert run.has("issued new CA", "renewal window")
    assert run.has("previous CA", "previous_cas=1")

    (tmp_path / "tls.crt").write_bytes(data["tls.crt"])
    (tmp_path / "tls.key").write_bytes(data["tls.key"])
    handshake(tmp_path / "tls.crt", tmp_path / "tls.key", data["ca.crt"], SERVICE_HOST)

    before = _snapshot(cluster)
    assert certgen(*create).code == 0
    assert _snapshot(cluster) == before, "the rotated state is stable"


GOOD = issue(HOSTS, now=datetime.now(UTC) - DAY)


@pytest.mark.parametrize(
    ("serving", "secret_type", "keeps_ca", "reason"),
    [
        ({"tls.crt": GOOD.cert, "ca.crt": GOOD.bundle}, "Opaque", True, "no serving certificate"),
        ({"tls.crt": b"junk", "tls.key": GOOD.key, "ca.crt": GOOD.bundle}, "", True, "does not parse"),
        ({"tls.crt": GOOD.cert, "tls.key": GOOD.key}, "", True, None),
        ({"tls.crt": GOOD.cert, "tls.key": GOOD.key, "ca.crt": GOOD.bundle, "extra": b"x"}, "", True, None),
        ({"tls.crt": GOOD.cert, "tls.key": GOOD.key, "ca": GOOD.bundle}, "Opaque", True, None),
        ({"cert": b"old", "key": b"old", "ca": GOOD.bundle}, "Opaque", True, "no serving certificate"),
    ],
    ids=["key-missing", "cert-junk", "bundle-missing", "extra-key", "opaque-type", "kube-webhook-certgen-layout"],
)
def test_malformed_serving_secret_is_repaired(
    certgen: Certgen,
    api: FaultyProxy,
    cluster: Cluster,
    create: tuple[str, ...],
    serving: dict[str, bytes],
    secret_type: str,
    keeps_ca: bool,
    reason: str | None,
) -> None:
    seed_secrets(cluster, GOOD, serving=serving, secret_type=secret_type)

    run = certgen(*create)
    assert run.code == 0, run.stderr
    stored = read_secret(cluster)
    assert stored["type"] == "kubernetes.io/tls"
    data = secret_data(cluster)
    assert sorted(data) == ["ca.crt", "tls.crt", "tls.key"]
    assert data["ca.crt"] == GOOD.bundle
    certs(data["tls.crt"])[0].verify_directly_issued_by(certs(GOOD.ca_cert)[0])
    assert key_public_bytes(data["tls.key"]) == spki(certs(data["tls.crt"])[0].public_key())
    if reason:
        assert run.has("issued serving certificate", reason)
    else:
        assert data["tls.crt"] == GOOD.cert
    if secret_type == "Opaque":
        delete = requests_to(api, f"/secrets/{SECRET}", "DELETE")
        assert delete and delete[0].json()["preconditions"]["uid"]
        assert run.has("deleted Secret to recreate it", "type Opaque is immutable")
    else:
        assert not requests_to(api, "/secrets", "DELETE")
    assert certgen(*create).code == 0
    assert read_secret(cluster) == stored


def test_migrates_a_kube_webhook_certgen_secret(
    certgen: Certgen, api: FaultyProxy, cluster: Cluster, create: tuple[str, ...]
) -> None:
    """Opaque with ca/cert/key and no CA key anywhere: new CA, old CA trusted for the overlap."""
    jet = issue(HOSTS, now=datetime.now(UTC) - 400 * DAY)
    old = secret(SECRET, {"ca": jet.ca_cert, "cert": jet.cert, "key": jet.key}, "Opaque")
    old["metadata"]["labels"] = {"app": "hami"}
    old = cluster.create(old)

    run = certgen(*create)
    assert run.code == 0, run.stderr
    [delete] = requests_to(api, f"/secrets/{SECRET}", "DELETE")
    assert delete.json()["preconditions"] == {
        "uid": old["metadata"]["uid"],
        "resourceVersion": old["metadata"]["resourceVersion"],
    }
    migrated = read_secret(cluster)
    assert migrated["type"] == "kubernetes.io/tls" and migrated["metadata"]["uid"] != old["metadata"]["uid"]
    assert migrated["metadata"]["labels"] == {"app": "hami"}, "labels survive the re-creation"
    [new_ca] = certs(secret_data(cluster, CA_SECRET)["ca.crt"])
    assert certs(secret_data(cluster)["ca.crt"]) == [new_ca, certs(jet.ca_cert)[0]]
    assert run.has("deleted Secret to recreate it", "type Opaque is immutable and must be kubernetes.io/tls")


def test_lost_ca_secret_is_replaced_and_the_old_ca_kept_in_the_bundle(
    certgen: Certgen, cluster: Cluster, create: tuple[str, ...]
) -> None:
    seed_secrets(cluster, GOOD)
    cluster.delete("Secret", CA_SECRET)

    run = certgen(*create)
    assert run.code == 0, run.stderr
    [new_ca] = certs(secret_data(cluster, CA_SECRET)["ca.crt"])
    assert certs(secret_data(cluster)["ca.crt"]) == [new_ca, certs(GOOD.ca_cert)[0]]
    assert run.has("issued serving certificate", "the CA was re-issued")


def test_custom_names_and_key_type(certgen: Certgen, cluster: Cluster, create: tuple[str, ...]) -> None:
    run = certgen(
        *create,
        "--ca-secret-name",
        "my-ca",
        "--cert-name",
        "cert",
        "--key-name",
        "key",
        "--ca-name",
        "ca",
        "--key-type",
        "rsa-3072",
        "--cert-validity",
        "90d",
        "--renew-before",
        "10d",
    )
    assert run.code == 0, run.stderr
    serving = read_secret(cluster)
    assert serving["type"] == "Opaque", "kubernetes.io/tls requires tls.crt and tls.key"
    data = secret_data(cluster)
    assert sorted(data) == ["ca", "cert", "key"]
    [leaf] = certs(data["cert"])
    assert certificates.KeyType.of(leaf.public_key()) is certificates.KeyType.RSA_3072
    assert leaf.not_valid_after_utc - leaf.not_valid_before_utc == 90 * DAY
    assert sorted(secret_data(cluster, "my-ca")) == ["ca.crt", "ca.key"]


def test_concurrent_update_is_reread_not_overwritten(
    certgen: Certgen, api: FaultyProxy, cluster: Cluster, create: tuple[str, ...]
) -> None:
    """A 409 on the PUT makes certgen read again; the other writer's change survives."""
    seed_secrets(cluster, issue(HOSTS, now=datetime.now(UTC) - 340 * DAY))

    def someone_else_labels_it(_: RealKube) -> None:
        current = read_secret(cluster)
        current["metadata"].setdefault("labels", {})["team"] = "gpu"
        cluster.replace(current)

    api.before("PUT", f"/secrets/{SECRET}$", someone_else_labels_it)
    run = certgen(*create)
    assert run.code == 0, run.stderr
    puts = requests_to(api, f"/secrets/{SECRET}", "PUT")
    assert len(puts) == 2
    assert read_secret(cluster)["metadata"]["labels"] == {"team": "gpu"}
    assert run.has("concurrent change, reading again", "409")
    certs(secret_data(cluster)["tls.crt"])[0].verify_directly_issued_by(
        certs(secret_data(cluster, CA_SECRET)["ca.crt"])[0]
    )


def test_losing_a_create_race_rereads_and_keeps_the_winner(
    certgen: Certgen, api: FaultyProxy, cluster: Cluster, create: tuple[str, ...]
) -> None:
    winner = issue(HOSTS, now=datetime.now(UTC))

    def the_winner_writes_first(_: RealKube) -> None:
        seed_secrets(cluster, winner)

    api.before("POST", "/secrets$", the_winner_writes_first)

    run = certgen(*create)
    assert run.code == 0, run.stderr
    assert secret_data(cluster, CA_SECRET) == {"ca.crt": winner.ca_cert, "ca.key": winner.ca_key}
    assert secret_data(cluster)["tls.crt"] == winner.cert
    assert len(api.writes()) == 1, "only the POST that lost with 409 AlreadyExists"


def test_endless_conflicts_give_up_with_exit_1(
    certgen: Certgen, api: FaultyProxy, cluster: Cluster, create: tuple[str, ...]
) -> None:
    seed_secrets(cluster, issue(HOSTS, now=datetime.now(UTC) - 340 * DAY))
    api.fail_next("PUT", f"/secrets/{SECRET}$", 409, times=5, message="the object has been modified")
    run = certgen(*create)
    assert run.code == 1
    assert run.has("[ERROR]", "gave up after 5 attempts")


def test_forbidden_read_exits_1_with_the_servers_status(
    certgen: Certgen, cluster: Cluster, create: tuple[str, ...], tmp_path: Path
) -> None:
    """A ServiceAccount without any grant: the first request, the CA Secret's GET, is refused by RBAC."""
    kubeconfig = cluster.kube.account(cluster.namespace, "certgen", tmp_path / "no-grant.kubeconfig")
    run = certgen("--log-format", "json", *create, "--kubeconfig", kubeconfig)
    assert run.code == 1
    [error] = [record["msg"] for record in json_lines(run.stderr) if record["level"] == "error"]
    ns = cluster.namespace
    assert error == (
        f'read Secret {ns}/{CA_SECRET}: HTTP 403 Forbidden: secrets "{CA_SECRET}" is forbidden: User'
        f' "system:serviceaccount:{ns}:certgen" cannot get resource "secrets" in API group "" in the namespace "{ns}"'
    )
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize(
    ("method", "path", "status", "expected"),
    [
        ("POST", "/secrets$", 500, "HTTP 500 InternalError: injected failure"),
        ("PUT", f"/secrets/{SECRET}$", 422, "HTTP 422 Invalid: injected failure"),
    ],
)
def test_api_errors_exit_1_with_status(
    certgen: Certgen,
    api: FaultyProxy,
    cluster: Cluster,
    create: tuple[str, ...],
    method: str,
    path: str,
    status: int,
    expected: str,
) -> None:
    if method == "PUT":
        seed_secrets(cluster, issue(HOSTS, now=datetime.now(UTC) - 340 * DAY))
    api.fail_next(method, path, status, message="injected failure")
    run = certgen(*create)
    assert run.code == 1
    [error] = [line for line in run.lines if "[ERROR]" in line]
    assert expected in error
    assert "Traceback" not in run.stderr


def test_json_log_format(certgen: Certgen, create: tuple[str, ...]) -> None:
    run = certgen("--log-format", "json", *create)
    assert run.code == 0
    records = json_lines(run.stderr)
    assert {r["level"] for r in records} == {"info"}
    created = [r for r in records if r["msg"] == "created Secret"]
    assert {r["name"] for r in created} == {SECRET, CA_SECRET}
    assert all(set(r) >= {"time", "level", "msg"} for r in records)


def test_existing_secret_of_another_namespace_is_not_touched(
    certgen: Certgen, cluster: Cluster, create: tuple[str, ...]
) -> None:
    with namespace(cluster.client, f"{cluster.namespace}-other") as elsewhere:
        other = cluster.create(secret(SECRET, {"x": b"y"}, "Opaque", namespace=elsewhere))
        assert certgen(*create).code == 0
        assert cluster.get("Secret", SECRET, elsewhere) == other
