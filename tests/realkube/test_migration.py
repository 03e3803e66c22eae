"""The migration from HAMi's webhook (docs/migration-from-hami.md), in the order it prescribes, on the real API
server, with a stand-in for HAMi's webhook: its configuration `hami-webhook` (webhook `vgpu.hami.io`, v1beta1
reviews, `failurePolicy: Ignore`, `reinvocationPolicy: Never`, as HAMi's chart renders it) calling a small
server that sets `schedulerName: hami-scheduler` and appends `HAMI_SEEN=1`.

Proves, with the API server's own count of calls per webhook: on standby ours is never called; the switch is
one write, and Pods created during it carry HAMi's edits or ours, never both and never neither; with both
configurations holding ours, ours runs twice and the second call changes nothing; after HAMi's configuration
is deleted, ours runs once.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from certgen.local import write_local
from testbed import ROOT, pods
from testbed.cluster import RealKube, kubectl_binary
from testbed.install import Installed, install
from tests.manifests.conftest import MANIFESTS, write_overlay
from tests.manifests.test_migrate_script import hamis
from tests.realkube.fixtures import NEWEST, Clusters
from tests.realkube.test_match_conditions import metric

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)

Obj = dict[str, Any]
HAMI = "vgpu.hami.io"
OURS = "pods.hami.io"
GPU = {"nvidia.com/gpu": "1"}


class StandIn:
    """HAMi's webhook as the API server meets it: v1beta1 reviews over TLS on its Service's ClusterIP:443."""

    def __init__(self, host: str, work: Path):
        pki = write_local(str(work / "pki"), ("hami-scheduler.kube-system.svc",))
        self.ca = Path(pki.ca_cert).read_bytes()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(pki.cert), str(pki.key))

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                ctr = review["request"]["object"]["spec"]["containers"][0]
                seen = {"name": "HAMI_SEEN", "value": "1"}
                env = {"op": "add", "path": "/spec/containers/0/env/-", "value": seen} if ctr.get("env") else {
                    "op": "add", "path": "/spec/containers/0/env", "value": [seen]}  # fmt: skip
                patch = [{"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"}, env]
                response = {"uid": review["request"]["uid"], "allowed": True, "patchType": "JSONPatch"}
                response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
                body = json.dumps({"apiVersion": review["apiVersion"], "kind": "AdmissionReview", "response": response})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

        self.server = ThreadingHTTPServer((host, 443), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def configuration(self) -> Obj:
        """HAMi's configuration as its chart renders it, calling this stand-in through its Service."""
        configuration = hamis()
        configuration["webhooks"][0]["clientConfig"]["caBundle"] = base64.b64encode(self.ca).decode()
        return configuration


@pytest.fixture(scope="module")
def kube(clusters: Clusters) -> Iterator[RealKube]:
    """A cluster of its own, stopped after the module (an idle control plane still takes a few % of a core)."""
    made = clusters.own(NEWEST, "migration")
    yield made
    clusters.discard(made)


@pytest.fixture(scope="module")
def cluster(kube: RealKube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Installed, StandIn]]:
    """HAMi's stand-in live, ours installed on standby (step 1)."""
    work = tmp_path_factory.mktemp("migration")
    meta = {"name": "hami-scheduler", "namespace": "kube-system"}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {"ports": [{"port": 443}]}}
    kube.kubectl("apply", "-f", "-", stdin=json.dumps(service))
    stand_in = StandIn(kube.get("service", "hami-scheduler", namespace="kube-system")["spec"]["clusterIP"], work)
    kube.kubectl("create", "-f", "-", stdin=json.dumps(stand_in.configuration()))
    ours = install(kube, work / "ours", write_overlay(work / "hami-standby", "hami-standby"))
    try:
        yield ours, stand_in
    finally:
        ours.webhook.stop()
        stand_in.stop()


def calls(kube: RealKube) -> dict[str, float]:
    return {name: metric(kube, "apiserver_admission_webhook_request_total", name=name) for name in (HAMI, OURS)}


def create(kube: RealKube, ns: str) -> Obj:
    body = pods.pod(pods.container("cuda", GPU, defaulted=False), name="gpu-", namespace=None, scheduler=None)
    return json.loads(kube.kubectl("create", "-n", ns, "-f", "-", "-o", "json", stdin=json.dumps(body)).stdout)  # type: ignore[no-any-return]


def hamis_edits(pod: Obj) -> bool:
    return {"name": "HAMI_SEEN", "value": "1"} in (pod["spec"]["containers"][0].get("env") or [])


def ours_edits(pod: Obj) -> bool:
    return "hami.io/gpu-type" in (pod["metadata"].get("annotations") or {})


def mutable(pod: Obj) -> list[Obj]:
    """The containers as the webhooks leave them (the token volume's name is random per Pod)."""
    return [{k: v for k, v in c.items() if k != "volumeMounts"} for c in pod["spec"]["containers"]]


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before[name] for name in before}


def test_the_migration_never_leaves_a_pod_unmutated_or_mutated_twice(
    kube: RealKube, cluster: tuple[Installed, StandIn], tmp_path: Path
) -> None:
    ours, _ = cluster
    ns = kube.namespace("migration")

    # Step 1 done: ours on standby is never called (its extra condition is false); HAMi's alone mutates.
    before = calls(kube)
    pod = create(kube, ns)
    assert delta(before, calls(kube)) == {HAMI: 1, OURS: 0}
    assert hamis_edits(pod) and not ours_edits(pod) and pod["spec"]["schedulerName"] == "hami-scheduler"

    # Step 3: the switch, while Pods are being created all along.
    made: list[Obj] = []
    done = threading.Event()

    def keep_creating() -> None:
        """Until the switch is done and the API server has picked it up (it watches webhook configurations, so
        a create in flight during the switch may still go to HAMi's): the last Pod then carries ours."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (done.is_set() and len(made) >= 3 and ours_edits(made[-1])):
            made.append(create(kube, ns))

    creator = threading.Thread(target=keep_creating)
    creator.start()
    env = os.environ | {"KUBECONFIG": kube.kubeconfig_path,
                        "PATH": f"{Path(kubectl_binary()).parent}{os.pathsep}{os.environ.get('PATH', '')}"}  # fmt: skip
    time.sleep(1)
    switched = subprocess.run(
        ["bash", str(ROOT / "scripts" / "migrate-from-hami.sh"), "hami-webhook"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    done.set()
    creator.join(timeout=90)
    assert switched.returncode == 0, switched.stderr
    assert [w["name"] for w in kube.get("mutatingwebhookconfiguration", "hami-webhook")["webhooks"]] == [OURS]
    assert len(made) >= 3
    assert [(hamis_edits(p), ours_edits(p)) for p in made] == sorted(
        [(hamis_edits(p), ours_edits(p)) for p in made], reverse=True
    ), "HAMi's until the switch, ours after"
    assert all(hamis_edits(p) != ours_edits(p) for p in made), "never both, never neither"
    assert ours_edits(made[-1])
    before = calls(kube)
    pod = create(kube, ns)
    assert delta(before, calls(kube)) == {HAMI: 0, OURS: 1}
    single = pod

    # Step 4: ours off standby: both configurations hold ours; it runs twice, the second call changes nothing.
    kube.kubectl("apply", "-k", str(MANIFESTS))
    before, log_before = calls(kube), len(ours.webhook.log.read_text().splitlines())
    pod = create(kube, ns)
    assert delta(before, calls(kube)) == {HAMI: 0, OURS: 2}
    reviews = [json.loads(line) for line in ours.webhook.log.read_text().splitlines()[log_before:]]
    assert [r["patch_ops"] for r in reviews if r.get("msg") == "review"][1:] == [0]
    assert mutable(pod) == mutable(single)
    assert pod["metadata"]["annotations"] == single["metadata"]["annotations"]

    # Step 5: HAMi's configuration goes (helm upgrade ... admissionWebhook.enabled=false); ours runs once.
    kube.kubectl("delete", "mutatingwebhookconfiguration", "hami-webhook")
    before = calls(kube)
    pod = create(kube, ns)
    assert delta(before, calls(kube)) == {HAMI: 0, OURS: 1}
    assert ours_edits(pod) and not hamis_edits(pod)
