"""Pod manifests the tests create, `kubectl create` as a user runs it, and many creates at once (a Job's or a
Deployment's burst) as the tests and bench/quota.py make them."""

from __future__ import annotations

import http.client
import itertools
import json
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any

from testbed import pods as support
from testbed.cluster import ADMIN_TOKEN, RealKube
from testbed.install import Installed

IMAGE = "nvidia/cuda:12.4.1-base-ubuntu22.04"


def pod(name: str, limits: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A one-container Pod as a user writes it for `kubectl create -n`: the API server fills in the rest."""
    ctr = support.container("cuda", limits or None, image=IMAGE, defaulted=False) | spec.pop("container", {})
    return support.pod(ctr, name=name, namespace=None, scheduler=None, metadata=spec.pop("metadata", None), **spec)


GPU = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "30"}


def create(installed: Installed, ns: str, obj: dict[str, Any], *extra: str) -> tuple[int, dict[str, Any], str]:
    """`kubectl create -f - -o json`: exit code, the object the server returned, stderr."""
    done = installed.kube.kubectl(
        "create", "-n", ns, "-f", "-", "-o", "json", *extra, stdin=json.dumps(obj), check=False
    )
    return done.returncode, json.loads(done.stdout) if done.returncode == 0 else {}, done.stderr


@dataclass
class Created:
    """One create call of a burst: when it started and ended (perf_counter), the HTTP status, and the
    Status the server answered with when it refused (empty when it created the Pod)."""

    started: float
    ended: float
    status: int
    refusal: dict[str, Any]

    @property
    def quota_denial(self) -> bool:
        return self.status == 403 and self.refusal.get("reason") == "GPUQuotaExceeded"


class Api:
    """Keep-alive HTTPS to the API server as admin, or as the holder of ``token``: a client light enough to
    create hundreds of Pods at once from one process (kubectl per Pod, or the generated client's models, would be
    what is measured)."""

    def __init__(self, kube: RealKube, token: str = ADMIN_TOKEN) -> None:
        context = ssl.create_default_context(cafile=str(kube.ca_path))
        self._conn = http.client.HTTPSConnection("127.0.0.1", kube.port, context=context, timeout=120)
        self._headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def call(self, method: str, path: str, body: bytes | None = None, merge: bool = False) -> tuple[int, bytes]:
        """One request (``merge``: the body is a JSON merge patch); the status and the body."""
        status, answer, _ = self.call_warned(method, path, body, merge)
        return status, answer

    def call_warned(
        self, method: str, path: str, body: bytes | None = None, merge: bool = False
    ) -> tuple[int, bytes, list[str]]:
        """``call``, and the warnings the answer carried (``Warning: 299 - "text"`` headers, as kubectl prints them)."""
        headers = self._headers | ({"Content-Type": "application/merge-patch+json"} if merge else {})
        self._conn.request(method, path, body, headers)
        response = self._conn.getresponse()
        warnings = [_warning_text(value) for value in response.headers.get_all("Warning") or []]
        return response.status, response.read(), warnings

    def close(self) -> None:
        self._conn.close()


def _warning_text(header: str) -> str:
    """The text of one ``Warning`` header (RFC 7234: code, agent, quoted text with backslash escapes)."""
    _code, _agent, quoted = header.split(" ", 2)
    return json.loads(quoted) if quoted.startswith('"') else quoted


def create_at_once(
    kube: RealKube,
    ns: str,
    obj: dict[str, Any] | list[dict[str, Any]],
    count: int,
    threads: int,
    results: list[Created] | None = None,
) -> tuple[float, list[Created]]:
    """`count` creates of `obj` (a list: its objects in turn) in `ns` by `threads` connected clients released
    together; the start time (perf_counter) and each call's outcome (appended to `results` as they come, when
    given: another thread can watch the burst's progress). Bounded: every call has the client's 120 s timeout."""
    bodies = [json.dumps(one).encode() for one in (obj if isinstance(obj, list) else [obj])]
    path = f"/api/v1/namespaces/{ns}/pods"
    numbers = itertools.count()
    results = [] if results is None else results
    barrier = threading.Barrier(threads + 1, timeout=60)

    def client() -> None:
        api = Api(kube)
        try:
            api.call("GET", f"/api/v1/namespaces/{ns}")  # connected and authenticated before the start
            barrier.wait()
            while (number := next(numbers)) < count:
                started = time.perf_counter()
                try:
                    status, data = api.call("POST", path, bodies[number % len(bodies)])
                except (OSError, http.client.HTTPException) as exc:  # the API server is gone (a crash test)
                    results.append(Created(started, time.perf_counter(), 0, {"message": f"no answer: {exc!r}"}))
                    api.close()
                    api = Api(kube)
                    continue
                results.append(Created(started, time.perf_counter(), status, {} if status == 201 else json.loads(data)))
        finally:
            api.close()

    workers = [threading.Thread(target=client) for _ in range(threads)]
    for worker in workers:
        worker.start()
    barrier.wait()
    started = time.perf_counter()
    for worker in workers:
        worker.join(300)
    return started, results
