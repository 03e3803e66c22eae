"""The cert-manager TLS mode for real: cert-manager's own controller and cainjector (built from Go modules by
`scripts/kube-binaries.sh --cert-manager`) against the newest API server, with the README's overlay.

Proves: the Certificates are issued, the Secret written, the caBundle injected, the webhook trusted through it,
and a renewal picked up by the running webhook without a failed admission.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from testbed.api import GPU, pod
from testbed.cluster import BUILD_SCRIPT, RealKube
from testbed.install import CONFIGURATION, SECRET, SERVICE_HOST, WebhookServer, webhook_server
from testbed.ports import free_port
from testbed.tls import client_context
from tests.manifests.conftest import NAMESPACE, write_overlay
from tests.realkube.fixtures import CI, NEWEST, Clusters

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)

SERVING = "hami-webhook-serving"


@dataclass(frozen=True)
class CertManager:
    controller: Path
    cainjector: Path
    crds: Path


def cert_manager_binaries() -> CertManager:
    """CERT_MANAGER_CONTROLLER_BIN, CERT_MANAGER_CAINJECTOR_BIN and CERT_MANAGER_CRDS, else the build script's."""
    names = ("CERT_MANAGER_CONTROLLER_BIN", "CERT_MANAGER_CAINJECTOR_BIN", "CERT_MANAGER_CRDS")
    given = [os.environ.get(n) for n in names]
    if any(given):
        if not all(given):
            pytest.fail(f"set all of {', '.join(names)}, or none")
        return CertManager(*(Path(p) for p in given if p))
    done = subprocess.run(["bash", str(BUILD_SCRIPT), "--cert-manager"], stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode in (3, 4) and not CI:
        pytest.skip("no Go toolchain or module proxy to build cert-manager (its output above says which)")
    assert done.returncode == 0, f"{BUILD_SCRIPT} --cert-manager exited {done.returncode}"
    bin_dir = Path(done.stdout.strip().splitlines()[-1])
    return CertManager(bin_dir / "cert-manager-controller", bin_dir / "cert-manager-cainjector", bin_dir / "crds")


@pytest.fixture(scope="module")
def kube(clusters: Clusters) -> Iterator[RealKube]:
    """A cluster of its own, stopped after the module (an idle control plane still takes a few % of a core)."""
    made = clusters.own(NEWEST, "cert-manager")
    yield made
    clusters.discard(made)


@pytest.fixture(scope="module")
def cert_manager(kube: RealKube) -> Iterator[CertManager]:
    """cert-manager's CRDs applied, its controller and cainjector running out of cluster as admin."""
    binaries = cert_manager_binaries()
    kube.kubectl("apply", "--server-side", "-f", str(binaries.crds))
    kube.kubectl("wait", "--for=condition=Established", "crd", "-l", "app.kubernetes.io/name=cert-manager")
    procs = []
    argvs = [
        [str(binaries.controller), "--cluster-resource-namespace=kube-system",
         f"--metrics-listen-address=127.0.0.1:{free_port()}"],
        [str(binaries.cainjector)],
    ]  # fmt: skip
    try:
        for argv in argvs:
            log = open(kube.run_dir / f"{Path(argv[0]).name}.log", "wb")
            procs.append((subprocess.Popen(
                [*argv, f"--kubeconfig={kube.kubeconfig_path}", "--leader-elect=false", "-v=2"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            ), log))  # fmt: skip
        yield binaries
    finally:
        for proc, log in procs:
            proc.terminate()
            proc.wait(timeout=30)
            log.close()


def serving_certificate(server: WebhookServer) -> x509.Certificate:
    """The certificate the webhook presents, checked as the API server checks it (CA bundle, Service name)."""
    context = client_context(server.ca)
    with socket.create_connection((server.host, server.port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=SERVICE_HOST) as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def certificate_of(secret: dict[str, Any]) -> x509.Certificate:
    return x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))


def settled(kube: RealKube) -> dict[str, Any]:
    """The serving Secret once its certificate, and the caBundle cainjector copies from it, stay the same for
    3 s (cert-manager is done issuing)."""

    def state() -> tuple[str, str]:
        secret = kube.get("secret", SECRET, namespace=NAMESPACE)
        hook = kube.get("mutatingwebhookconfiguration", CONFIGURATION)["webhooks"][0]
        if base64.b64decode(hook["clientConfig"].get("caBundle", "")) != base64.b64decode(secret["data"]["ca.crt"]):
            return ("", "")
        return (secret["data"]["tls.crt"], secret["metadata"]["resourceVersion"])

    def steady() -> bool:
        before = state()
        time.sleep(3)
        return before != ("", "") and state() == before

    kube.wait_for(steady, 90)
    return kube.get("secret", SECRET, namespace=NAMESPACE)


def test_cert_manager_issues_injects_and_renews(kube: RealKube, cert_manager: CertManager, tmp_path: Path) -> None:
    overlay = write_overlay(tmp_path / "hami-cert-manager", "hami-cert-manager")
    applied = kube.kubectl("apply", "-k", str(overlay))
    assert "Warning" not in applied.stderr, applied.stderr
    kube.kubectl("wait", "--for=condition=Ready", "certificate", "--all", "-n", NAMESPACE, "--timeout=120s")
    # cert-manager may issue the serving certificate once more right after install (its CA Issuer turning ready
    # in between): wait until the Secret and the caBundle agree and stay put for a few seconds.
    secret = settled(kube)
    leaf = certificate_of(secret)
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert SERVICE_HOST in names
    assert not kube.exists("job", "hami-webhook-certgen", namespace=NAMESPACE)

    server = webhook_server(kube, tmp_path / "webhook").start()
    try:
        ns = kube.namespace("cm-e2e")
        body = json.dumps(pod("gpu-", GPU))
        created = kube.kubectl("create", "-n", ns, "-f", "-", "-o", "json", stdin=body)
        assert json.loads(created.stdout)["spec"]["schedulerName"] == "hami-scheduler"
        assert serving_certificate(server).serial_number == leaf.serial_number

        # Renew as `cmctl renew` does: an Issuing condition on the Certificate's status. cert-manager writes a
        # new key pair into the Secret; the kubelet (here: sync()) updates the mounted files; the webhook
        # reloads them. Device Pods are created all along, and every one is admitted.
        revision = kube.get("certificate", SERVING, namespace=NAMESPACE)["status"]["revision"]
        issuing = {"type": "Issuing", "status": "True", "reason": "ManuallyTriggered", "message": "test"}
        kube.kubectl(
            "patch", "certificate", SERVING, "-n", NAMESPACE, "--subresource=status", "--type=json",
            "-p", json.dumps([{"op": "add", "path": "/status/conditions/-", "value": issuing}]),
        )  # fmt: skip
        kube.wait_for(
            lambda: kube.get("certificate", SERVING, namespace=NAMESPACE)["status"]["revision"] > revision, 60
        )
        renewed = certificate_of(settled(kube))
        assert renewed.serial_number != leaf.serial_number
        deadline, refused, made, synced = time.monotonic() + 60, [], 0, ""

        def in_secret() -> tuple[str, int]:
            secret = kube.get("secret", SECRET, namespace=NAMESPACE)
            return secret["metadata"]["resourceVersion"], certificate_of(secret).serial_number

        while time.monotonic() < deadline:
            done = kube.kubectl("create", "-n", ns, "-f", "-", stdin=body, check=False)
            made += 1
            if done.returncode != 0:
                refused.append(done.stderr)
            version, serial = in_secret()
            if made == 1 or version != synced:  # the first Pod before the files change, as the kubelet syncs;
                server.ctr.sync(kube)  # again if cert-manager wrote the Secret once more since
                synced = version
            elif serving_certificate(server).serial_number == serial:
                break
            time.sleep(0.5)
        _, serial = in_secret()
        assert serial != leaf.serial_number
        assert serving_certificate(server).serial_number == serial, "the webhook did not reload"
        assert refused == [] and made >= 2
        created = kube.kubectl("create", "-n", ns, "-f", "-", "-o", "json", stdin=body)
        assert json.loads(created.stdout)["spec"]["schedulerName"] == "hami-scheduler"
    finally:
        server.stop()
    assert "Traceback" not in server.log.read_text()
