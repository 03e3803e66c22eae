"""The ledger Leases' I/O: reads and compare-and-swap writes through the API server (the encoding is
app/quota/core/encoding.py's)."""

from __future__ import annotations

import functools
import secrets
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import quote

from kubernetes import client

from app.kube import transport
from app.kube.errors import NOT_FOUND, ApiError
from app.quota.core.encoding import (
    KEY_ANNOTATION,
    LEDGER_ANNOTATION,
    LEDGER_PREFIX,
    MANAGED_BY_LABEL,
    MARK_ANNOTATION,
    WANTED_ANNOTATION,
    Ledger,
    decode,
)

NO_LEASE = f"metadata.name={LEDGER_PREFIX}contact-probe"
"""A field selector for one name, which no ledger has unless a namespace is called "contact-probe": the probe's
list comes back empty, or at worst with that one ledger, and is answered all the same."""


class Send(Protocol):
    """One request to the API server and its answer's JSON (raises ApiError for an answer other than 2xx)."""

    def __call__(
        self,
        method: str,
        path: str,
        *,
        timeout: float,
        body: dict[str, Any] | None = None,
        query: dict[str, str] | None = None,
    ) -> Any: ...


class KubeLeases:
    """Reads and compare-and-swap writes of the ledger Leases in ``home`` (the webhook's namespace), as plain JSON
    through app.kube.transport: on the admission path, the generated client's argument validation cost more
    CPU than the request. ``send`` is that transport (``of``), or the protocol simulation's model of the API server."""

    def __init__(self, send: Send, home: str, close: Callable[[], None] = lambda: None) -> None:
        self._send = send
        self.home = home
        self.close = close
        self._leases = f"/apis/coordination.k8s.io/v1/namespaces/{quote(home)}/leases"

    @classmethod
    def of(cls, api: client.ApiClient, home: str) -> KubeLeases:
        """The ledger Leases through the API server ``api`` talks to."""
        return cls(functools.partial(transport.request, api), home, api.close)

    @staticmethod
    def name(namespace: str) -> str:
        return LEDGER_PREFIX + namespace

    def where(self, namespace: str) -> str:
        """The namespace's ledger Lease as messages name it: ``<home>/<name>``."""
        return f"{self.home}/{self.name(namespace)}"

    def _path(self, namespace: str) -> str:
        """Where the namespace's ledger Lease is read and replaced."""
        return f"{self._leases}/{quote(self.name(namespace))}"

    def probe(self, timeout: float) -> None:
        """A list of its own namespace's Leases that matches none: answered only when the API server is reachable
        and working, and a few hundred bytes whatever the ledgers hold (one full ledger is 250 kB, too much to
        fetch every second, and slow enough under load to miss PROBE_TIMEOUT and turn a reachable replica
        unready)."""
        self._send("GET", self._leases, timeout=timeout, query={"limit": "1", "fieldSelector": NO_LEASE})

    def read(self, namespace: str, timeout: float) -> Ledger:
        try:
            lease = self._send("GET", self._path(namespace), timeout=timeout)
        except ApiError as exc:
            if exc.code == NOT_FOUND:
                return Ledger(namespace, {}, None)
            raise
        return decode(namespace, lease)

    def write(self, found: Ledger, text: str, mark: int, wanted: int, timeout: float) -> Ledger:
        """Replace the entries (``encode``d), mark and wanted count if the Lease is still the one read (create
        it if it was absent); the ledger as now stored. ApiError CONFLICT if someone wrote first (a stale
        resourceVersion, or created by someone else meanwhile). A Lease without a sealing key gets one (kept
        ever after: the compare-and-swap makes every writer agree on the first)."""
        annotations = {LEDGER_ANNOTATION: text, MARK_ANNOTATION: str(mark), WANTED_ANNOTATION: str(wanted)}
        if not found.key:
            annotations[KEY_ANNOTATION] = secrets.token_urlsafe(32)
        if found.lease is None:
            body: dict[str, Any] = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": self.name(found.namespace),
                    "namespace": self.home,
                    "labels": dict(MANAGED_BY_LABEL),
                    "annotations": annotations,
                },
                "spec": {},
            }
            stored = self._send("POST", self._leases, timeout=timeout, body=body)
        else:
            meta = found.lease["metadata"]  # keeps resourceVersion: the compare in compare-and-swap
            merged = {**(meta.get("annotations") or {}), **annotations}
            body = {**found.lease, "metadata": {**meta, "annotations": merged}}
            stored = self._send("PUT", self._path(found.namespace), timeout=timeout, body=body)
        return decode(found.namespace, stored)
