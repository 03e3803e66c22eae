"""Quota reservations in one Lease per quota'd namespace, written with resourceVersion compare-and-swap.

The Lease ``hami-quota-<namespace>`` lives in the webhook's own namespace, so the
webhook's write access stays inside it. Its annotation ``hami.io/quota-ledger``
holds ``{request uid: {"expires": unix seconds, "amounts": {resource: amount}}}``.
Every worker of every replica decides against the same object: a write that lost
a race gets 409 Conflict (an ApiError) and decides again from the fresh state
(docs/rules.md#no-over-admission-under-concurrency).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from app.kube.errors import CONFLICT, ApiError
from app.quota.demand import Amounts

LEDGER_ANNOTATION = "hami.io/quota-ledger"
LEDGER_PREFIX = "hami-quota-"


@dataclass(frozen=True)
class Entry:
    expires: float
    amounts: Amounts


@dataclass
class Snapshot:
    """The ledger as read: its entries and the Lease it came from (None: not created yet)."""

    namespace: str
    entries: dict[str, Entry]
    lease: dict[str, Any] | None


class Ledger:
    """Reads and compare-and-swap writes of the ledger Leases in ``home`` (the webhook's namespace)."""

    def __init__(self, api: client.CoordinationV1Api, home: str) -> None:
        self._api = api
        self.home = home

    def close(self) -> None:
        self._api.api_client.close()

    @staticmethod
    def name(namespace: str) -> str:
        return LEDGER_PREFIX + namespace

    def read(self, namespace: str, timeout: float) -> Snapshot:
        try:
            response: Any = self._api.read_namespaced_lease(  # raw JSON: _preload_content=False
                self.name(namespace), self.home, _preload_content=False, _request_timeout=timeout
            )
        except ApiException as exc:
            if exc.status == 404:
                return Snapshot(namespace, {}, None)
            raise
        lease = json.loads(response.data)
        raw = ((lease.get("metadata") or {}).get("annotations") or {}).get(LEDGER_ANNOTATION) or "{}"
        return Snapshot(namespace, _entries(json.loads(raw)), lease)

    def write(self, snapshot: Snapshot, entries: Mapping[str, Entry], timeout: float) -> None:
        """Replace the entries if the Lease is still the one read (create it if absent); ApiError CONFLICT if not."""
        text = json.dumps(
            {uid: {"expires": e.expires, "amounts": e.amounts} for uid, e in entries.items()}, separators=(",", ":")
        )
        body: Any  # a plain dict: the client sends it as is
        try:
            if snapshot.lease is None:
                body = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {
                        "name": self.name(snapshot.namespace),
                        "namespace": self.home,
                        "labels": {"app.kubernetes.io/managed-by": "hami-webhook"},
                        "annotations": {LEDGER_ANNOTATION: text},
                    },
                    "spec": {},
                }
                self._api.create_namespaced_lease(self.home, body, _preload_content=False, _request_timeout=timeout)
            else:
                meta = snapshot.lease["metadata"]  # keeps resourceVersion: the compare in compare-and-swap
                annotations = {**(meta.get("annotations") or {}), LEDGER_ANNOTATION: text}
                body = {**snapshot.lease, "metadata": {**meta, "annotations": annotations}}
                self._api.replace_namespaced_lease(
                    self.name(snapshot.namespace), self.home, body, _preload_content=False, _request_timeout=timeout
                )
        except ApiException as exc:
            if exc.status == CONFLICT:  # stale resourceVersion, or created by someone else meanwhile
                raise ApiError.from_client(exc) from None
            raise


def _entries(raw: Any) -> dict[str, Entry]:
    """Parse the annotation; malformed entries are dropped (they can only have been written by hand)."""
    out: dict[str, Entry] = {}
    if not isinstance(raw, dict):
        return out
    for uid, entry in raw.items():
        try:
            amounts = {str(k): int(v) for k, v in entry["amounts"].items()}
            out[str(uid)] = Entry(float(entry["expires"]), amounts)
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
    return out
