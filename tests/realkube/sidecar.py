"""A stand-in sidecar injector: a mutating webhook whose configuration sorts after ours and adds a container (a GPU
one, or a mesh's CPU proxy).

It answers on 127.0.0.1 over TLS (a CA of its own, given to the API server as caBundle) and injects into Pods
labelled `inject: gpu` only, so nothing else on a shared cluster meets it. kube-apiserver calls mutating
webhook configurations in name order, so `zz-sidecar-injector` runs after `hami-webhook-pods`.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from certgen.local import write_local
from testbed.cluster import RealKube

NAME = "zz-sidecar-injector"
LABEL = {"inject": "gpu"}
SIDECAR = {
    "name": "gpu-sidecar",
    "image": "sidecar:1",
    "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}},
}


class _Injector(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        patch = [{"op": "add", "path": "/spec/containers/-", "value": self.server.sidecar}]  # type: ignore[attr-defined]
        answer = {
            "uid": review["request"]["uid"],
            "allowed": True,
            "patchType": "JSONPatch",
            "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
        }
        body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": answer})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, format: str, *args: Any) -> None:
        return


@contextmanager
def sidecar_injector(kube: RealKube, work: Path, sidecar: dict[str, Any] = SIDECAR) -> Iterator[None]:
    """The injector, adding ``sidecar`` (a GPU one unless told: a mesh's proxy asks for CPU), served and registered
    for the duration; its configuration deleted after."""
    files = write_local(str(work / "sidecar-pki"), ("127.0.0.1",))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Injector)
    server.sidecar = sidecar  # type: ignore[attr-defined]
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(files.cert, files.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    hook = {
        "name": "inject.sidecar.test",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "reinvocationPolicy": "Never",
        "objectSelector": {"matchLabels": LABEL},
        "clientConfig": {
            "url": f"https://127.0.0.1:{server.server_address[1]}/inject",
            "caBundle": base64.b64encode(Path(files.ca_cert).read_bytes()).decode(),
        },
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
    }
    configuration = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": NAME},
        "webhooks": [hook],
    }
    kube.kubectl("apply", "-f", "-", stdin=json.dumps(configuration))
    try:
        yield
    finally:
        kube.kubectl("delete", "mutatingwebhookconfiguration", NAME, "--ignore-not-found")
        server.shutdown()
        server.server_close()
