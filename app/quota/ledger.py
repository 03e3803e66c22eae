"""Quota reservations in one Lease per quota'd namespace, written with resourceVersion compare-and-swap.

The Lease ``hami-quota-<namespace>`` lives in the webhook's own namespace, so the webhook's write access
stays inside it. Its annotation ``hami.io/quota-ledger`` holds
``{id: {"expires": unix seconds, "amounts": {resource: amount}, "open": true?}}``: room set aside for Pods
admitted (or, while open, about to be admitted) that some worker may not have seen yet; the Pods carry the
id in their ``hami.io/quota-reservation`` annotation. ``hami.io/quota-ledger-mark`` is the resourceVersion
up to which a worker must have seen the namespace's Pods before it decides on this ledger: an entry is
dropped once the writer has seen its Pods take all its room, and the mark moves to their resourceVersion,
so every reader counts the Pods instead. ``hami.io/quota-ledger-wanted`` counts the times a worker could
not decide because open grants held the room: each raise asks their holders to close them. Every worker of
every replica decides against the same object: a write that lost a race gets 409 Conflict and decides
again from the fresh state (docs/rules.md#no-over-admission-under-concurrency).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

from kubernetes import client

from app.kube import transport
from app.kube.errors import NOT_FOUND, ApiError
from app.quota.demand import Amounts

LEDGER_ANNOTATION = "hami.io/quota-ledger"
MARK_ANNOTATION = "hami.io/quota-ledger-mark"
WANTED_ANNOTATION = "hami.io/quota-ledger-wanted"
LEDGER_PREFIX = "hami-quota-"
MANAGED_BY_LABEL = {"app.kubernetes.io/managed-by": "hami-webhook"}  # on every ledger Lease
MANAGED_BY = ",".join(f"{k}={v}" for k, v in MANAGED_BY_LABEL.items())  # its selector, for the feed's watch
# The API server refuses more than 256 KiB of annotations on an object; this leaves room for the mark and keys.
MAX_LEDGER_BYTES = 250_000


@dataclass(frozen=True)
class Entry:
    """Amounts set aside until ``expires`` (unix seconds) for the Pods that will carry this entry's id.

    Closed (``open`` false): the amounts of Pods already admitted. Open: a grant, room a worker took ahead and
    may still admit into, on its own, for a short window after writing it; it closes it by writing what it
    admitted. Others count an open entry as wholly taken, but not as certainly taken (see app/quota/decision.py).
    """

    expires: float
    amounts: Amounts
    open: bool = False


@dataclass(frozen=True)
class Snapshot:
    """The ledger as read: its entries, its mark, and the Lease it came from (None: not created yet)."""

    namespace: str
    entries: dict[str, Entry]
    lease: dict[str, Any] | None
    rv: int = -1  # the Lease's resourceVersion (-1: not created yet)
    mark: int = 0
    wanted: int = 0  # raised by a worker that cannot decide while grants hold room: their holders close them


def resource_version(text: Any) -> int:
    """A resourceVersion as a number (etcd's revision, which the API server compares the same way); -1 when
    it is not one, so nothing is ever dropped on its account."""
    try:
        return int(text)
    except (TypeError, ValueError):
        return -1


def snapshot(namespace: str, lease: Mapping[str, Any]) -> Snapshot:
    """A ledger Lease as stored."""
    meta = lease.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    try:
        raw = json.loads(annotations.get(LEDGER_ANNOTATION) or "{}")
    except ValueError:
        raw = {}
    mark = max(resource_version(annotations.get(MARK_ANNOTATION) or 0), 0)
    wanted = max(resource_version(annotations.get(WANTED_ANNOTATION) or 0), 0)
    rv = resource_version(meta.get("resourceVersion"))
    return Snapshot(namespace, _entries(raw), dict(lease), rv, mark, wanted)


def encode(entries: Mapping[str, Entry]) -> str:
    """The annotation's text (compact: it is read and written on every admission)."""
    return json.dumps({uid: _encoded(e) for uid, e in entries.items()}, separators=(",", ":"))


def _encoded(entry: Entry) -> dict[str, Any]:
    out: dict[str, Any] = {"expires": entry.expires, "amounts": entry.amounts}
    if entry.open:
        out["open"] = True
    return out


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


class Ledger:
    """Reads and compare-and-swap writes of the ledger Leases in ``home`` (the webhook's namespace), as plain JSON
    through app.kube.transport: on the admission path, the generated client's argument validation cost more
    CPU than the request. ``send`` is that transport (``of``), or the protocol simulation's model of the API server."""

    def __init__(self, send: Send, home: str, close: Callable[[], None] = lambda: None) -> None:
        self._send = send
        self.home = home
        self.close = close
        self._leases = f"/apis/coordination.k8s.io/v1/namespaces/{quote(home)}/leases"

    @classmethod
    def of(cls, api: client.ApiClient, home: str) -> Ledger:
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
        """One ledger Lease listed: the smallest request the webhook may make of its own namespace's Leases,
        answered only when the API server is reachable and working."""
        self._send("GET", self._leases, timeout=timeout, query={"limit": "1", "labelSelector": MANAGED_BY})

    def read(self, namespace: str, timeout: float) -> Snapshot:
        try:
            lease = self._send("GET", self._path(namespace), timeout=timeout)
        except ApiError as exc:
            if exc.code == NOT_FOUND:
                return Snapshot(namespace, {}, None)
            raise
        return snapshot(namespace, lease)

    def write(self, found: Snapshot, text: str, mark: int, wanted: int, timeout: float) -> Snapshot:
        """Replace the entries (``encode``d), mark and wanted count if the Lease is still the one read (create
        it if it was absent); the ledger as now stored. ApiError CONFLICT if someone wrote first (a stale
        resourceVersion, or created by someone else meanwhile)."""
        annotations = {LEDGER_ANNOTATION: text, MARK_ANNOTATION: str(mark), WANTED_ANNOTATION: str(wanted)}
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
        return snapshot(found.namespace, stored)


def _entries(raw: Any) -> dict[str, Entry]:
    """Parse the annotation; malformed entries are dropped (they can only have been written by hand)."""
    out: dict[str, Entry] = {}
    if not isinstance(raw, dict):
        return out
    for uid, entry in raw.items():
        try:
            amounts = {str(k): int(v) for k, v in entry["amounts"].items()}
            out[str(uid)] = Entry(float(entry["expires"]), amounts, entry.get("open") is True)
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
    return out
