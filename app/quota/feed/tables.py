"""What the feed's streams keep: a small summary per device Pod with the per-namespace usage and what each
reservation's Pods took, the device limits per ResourceQuota, and the newest ledger Lease per namespace.

Rules: docs/rules.md#usage-is-counted-by-the-webhook, #limits-come-from-every-resourcequota.

No I/O, and no logging: the Feed (app/quota/feed/feed.py) writes these tables under its lock as its streams find,
and reads them for the decision, so what a table has to say (a Pod it cannot count, ledger entries found at start)
is returned, and said by the caller after the lock (``say_uncounted``, ``say_found_at_start``); logging takes a
lock of its own. The simulation (tests/app/quota/simulation.py) drives the same tables against a model.
"""

from __future__ import annotations

import abc
import logging
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from app.admission.annotations import QUOTA_RESERVATION_ANNOTATION
from app.admission.devices.base import Device
from app.quota.core.amounts import Amounts, accumulate
from app.quota.core.demand import pod_amounts
from app.quota.core.encoding import LEDGER_PREFIX, Ledger, decode, resource_version
from app.quota.core.entries import Held, LedgerEntry
from app.quota.core.gang import group
from app.quota.core.limits import hard_limits, quota_factors, tightest
from app.quota.core.scene import Taken, View
from app.quota.core.seal import Seal, parse, vouched

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
log = logging.getLogger("hami_webhook.quota")


@dataclass(frozen=True, slots=True)
class Uncounted:
    """A stored Pod the arithmetic refuses: it counts nothing, and whoever applied it says which."""

    namespace: str
    name: str
    reason: str


def say_uncounted(uncounted: Iterable[Uncounted]) -> None:
    """What ``PodTable.replace`` and ``apply`` returned, one warning a Pod: an admin learns which Pod counts nothing."""
    for pod in uncounted:
        log.warning("quota: cannot count pod %s/%s: %s", pod.namespace, pod.name, pod.reason)


def say_found_at_start(found: int) -> None:
    """What ``LedgerTable.replace`` returned: entries a process's first list found count as new (said once)."""
    if found:
        log.info(
            "quota: %d ledger entries found at start count as new: this process never saw them written, "
            "so their room is held for up to one TTL from now",
            found,
        )


@dataclass(slots=True)
class _Pod:
    namespace: str
    seal: Seal | None  # the reservation it carries, as written (not yet vouched for)
    amounts: Amounts
    rv: int
    group: str  # the key of the gang it names ("" none)
    reservation: str = ""  # the entry it is counted against: its seal vouched for (``PodTable._vouch``)


class PodTable:
    """Per-Pod demand summaries, the per-namespace sums, and for each reservation (a ledger entry, which several
    Pods may carry) what its Pods have taken so far: those amounts are usage, not reservation, any more.

    A Pod counts against an entry only with a seal the namespace's ledger key verifies, each seal's nonce once
    (app/quota/core/seal.py): a Pod whose reservation the webhook did not write counts as used, and the entry it
    names keeps holding its room. A Pod seen before its namespace's key waits for it (``key``), counted as used."""

    def __init__(
        self,
        devices: Sequence[Device],
        forget_after: float,
        clock: Callable[[], float] = time.monotonic,
        named: Callable[[str, str], bool] = lambda namespace, reservation: False,
    ) -> None:
        self._devices = devices
        self._forget_after = forget_after
        self._clock = clock  # the feed's monotonic clock, the one its ledgers' first sights are on
        self._named = named  # whether the feed's newest ledger of a namespace still has an entry of this id
        self._pods: dict[str, _Pod] = {}
        self._by_namespace: dict[str, set[str]] = {}
        self._used: dict[str, Amounts] = {}
        # (namespace, reservation) -> what its Pods took: a Pod consumes only its own namespace's reservations.
        # Kept while a ledger entry names it, and ``forget_after`` past its last Pod: forgotten while its entry
        # lives (a gang's hold lives minutes after its members went), the entry would hold their room again.
        self._taken: dict[tuple[str, str], Taken] = {}
        self._forget: deque[tuple[float, tuple[str, str]]] = deque()
        self._members: dict[str, dict[str, int]] = {}  # namespace -> gang key -> its Pods, device or not
        self._bare: dict[str, int] = {}  # namespace -> its gangs' Pods that ask for no device (no quota held)
        self._keys: dict[str, str] = {}  # namespace -> its ledger's sealing key
        self._unvouched: dict[str, dict[str, _Pod]] = {}  # namespace -> Pods whose seals wait for its key

    def replace(self, namespace: str, items: Iterable[Mapping[str, Any]]) -> list[Uncounted]:
        """The namespace's Pods are now exactly ``items`` (a fresh list); returns those it could not count."""
        fresh: dict[str, _Pod] = {}
        uncounted = []
        for uid, pod in (self._summary(o) for o in items):
            if isinstance(pod, _Pod):
                fresh[uid] = pod
            elif pod is not None:
                uncounted.append(pod)
        for uid in self._by_namespace.get(namespace, set()) - set(fresh):
            self._remove(uid)
        for uid, pod in fresh.items():
            if uid not in self._pods:
                self._add(uid, pod)
        return uncounted

    def apply(self, kind: str, obj: Mapping[str, Any]) -> Uncounted | None:
        """One watch event; returns the Pod if it could not be counted."""
        uid = (obj.get("metadata") or {}).get("uid") or ""
        if kind == "DELETED" or (obj.get("status") or {}).get("phase") in TERMINAL_PHASES:
            self._remove(uid)
        elif uid not in self._pods:  # device requests are immutable: a known Pod's summary stands
            _, pod = self._summary(obj)
            if not isinstance(pod, _Pod):
                return pod
            self._add(uid, pod)
        return None

    def forget_namespace(self, namespace: str) -> None:
        """The namespace is no longer watched (its device quota is gone)."""
        for uid in list(self._by_namespace.get(namespace, ())):
            self._remove(uid)
        self._unvouched.pop(namespace, None)

    def used(self, namespace: str) -> Amounts:
        return dict(self._used.get(namespace) or {})

    def taken(self, namespace: str, reservation: str) -> Taken | None:
        """What the Pods carrying this reservation took, and the resourceVersion by which a watch has seen them."""
        return self._taken.get((namespace, reservation))

    def seen(self, namespace: str, entries: Iterable[str]) -> dict[str, Taken]:
        """``taken`` for each of ``entries`` its Pods took from, copied: a View's, read apart from this table."""
        found = ((r, self._taken.get((namespace, r))) for r in entries)
        return {r: Taken(dict(t.amounts), t.rv, since=t.since) for r, t in found if t is not None}

    def consumed(self, namespace: str, entry: str, nonce: str) -> bool:
        """A Pod carrying this seal of ``entry`` has been counted against it (a review presenting the seal again is
        of another Pod, not the same one reviewed again)."""
        taken = self._taken.get((namespace, entry))
        return taken is not None and nonce in taken.nonces

    def key(self, namespace: str, key: str) -> None:
        """The namespace's ledger key (app/quota/feed/tables.py's LedgerTable hands it over as it first sees it): the
        seals that waited for it are checked now."""
        if not key or self._keys.get(namespace) == key:
            return
        self._keys[namespace] = key
        for uid, pod in (self._unvouched.pop(namespace, None) or {}).items():
            self._vouch(uid, pod)
            if self._pods.get(uid) is not pod:  # it went meanwhile: what it took stays taken as any gone Pod's
                self._went(uid, pod)

    def members(self, namespace: str) -> dict[str, int]:
        """Per gang key, the namespace's Pods that name it: its device Pods, and those that ask for none (a
        launcher, a driver), which the group's size counts too and which never reach the webhook."""
        return dict(self._members.get(namespace) or {})

    def count(self, namespace: str) -> int:
        """The namespace's Pods that hold some of its quota."""
        return len(self._by_namespace.get(namespace) or ()) - self._bare.get(namespace, 0)

    def __len__(self) -> int:
        return len(self._pods)

    def _summary(self, obj: Mapping[str, Any]) -> tuple[str, _Pod | Uncounted | None]:
        meta = obj.get("metadata") or {}
        uid = meta.get("uid") or ""
        if (obj.get("status") or {}).get("phase") in TERMINAL_PHASES:
            return uid, None
        try:
            amounts = pod_amounts(obj, self._devices)
        except Exception as exc:  # a stored Pod the arithmetic refuses counts nothing; the caller says which
            return uid, Uncounted(meta.get("namespace") or "", meta.get("name") or "", str(exc))
        namespace = sys.intern(meta.get("namespace") or "")
        rv = resource_version(meta.get("resourceVersion"))
        if not amounts:  # a gang's member that asks for no device (an MPI launcher) fills a place all the same
            key = group(obj)
            return uid, _Pod(namespace, None, {}, rv, key) if key else None
        written = (meta.get("annotations") or {}).get(QUOTA_RESERVATION_ANNOTATION)
        return uid, _Pod(namespace, parse(written) if isinstance(written, str) else None, amounts, rv, group(obj))

    def _add(self, uid: str, pod: _Pod) -> None:
        self._pods[uid] = pod
        self._by_namespace.setdefault(pod.namespace, set()).add(uid)
        accumulate(self._used.setdefault(pod.namespace, {}), pod.amounts)
        if pod.group:
            accumulate(self._members.setdefault(pod.namespace, {}), {pod.group: 1})
        if not pod.amounts:
            accumulate(self._bare, {pod.namespace: 1})
        if pod.seal is not None:
            self._vouch(uid, pod)

    def _vouch(self, uid: str, pod: _Pod) -> None:
        """Count ``pod`` against the entry its seal names, if the seal is the webhook's and its nonce not counted yet;
        else it stays counted as used only (a copied or forged seal frees no room)."""
        assert pod.seal is not None
        key = self._keys.get(pod.namespace)
        if key is None:
            self._unvouched.setdefault(pod.namespace, {})[uid] = pod
            return
        if not vouched(key, pod.namespace, pod.seal, pod.amounts):
            return
        taken = self._taken.setdefault((pod.namespace, pod.seal.entry), Taken({}, -1))
        if pod.seal.nonce in taken.nonces:
            return
        taken.nonces.add(pod.seal.nonce)
        pod.reservation = pod.seal.entry
        accumulate(taken.amounts, pod.amounts)
        taken.rv = max(taken.rv, pod.rv)
        taken.alive += 1
        taken.forget_at = float("inf")
        taken.since = self._clock()

    def _left(self, pod: _Pod) -> None:
        """A gang's member went: one Pod fewer named by its group."""
        members = self._members[pod.namespace]
        members[pod.group] -= 1
        if not members[pod.group]:
            del members[pod.group]
        if not pod.amounts:
            self._bare[pod.namespace] -= 1
            if not self._bare[pod.namespace]:
                del self._bare[pod.namespace]

    def _remove(self, uid: str) -> None:
        pod = self._pods.pop(uid, None)
        if pod is None:
            return
        uids = self._by_namespace[pod.namespace]
        uids.discard(uid)
        if not uids:
            del self._by_namespace[pod.namespace]
        used = self._used.get(pod.namespace, {})
        for name, amount in pod.amounts.items():
            used[name] = max(used.get(name, 0) - amount, 0)
        if not any(used.values()):
            self._used.pop(pod.namespace, None)
        if pod.group:
            self._left(pod)
        self._went(uid, pod)

    def _went(self, uid: str, pod: _Pod) -> None:
        """What a Pod that went took of its reservation stays taken while the ledger entry may outlive it. One that
        went before its namespace's key came stays waiting for it: counted then, as gone, so its entry does not
        hold its room again."""
        now = self._clock()
        taken = self._taken.get((pod.namespace, pod.reservation)) if pod.reservation else None
        if taken is not None:
            taken.alive -= 1
            if not taken.alive:
                taken.forget_at = now + self._forget_after
                self._forget.append((taken.forget_at, (pod.namespace, pod.reservation)))
        self._sweep(now)

    def _sweep(self, now: float) -> None:
        """Forget what the Pods of reservations due took, unless the ledger still has their entry."""
        named = []
        while self._forget and self._forget[0][0] <= now:
            _, key = self._forget.popleft()
            gone = self._taken.get(key)
            if gone is None or gone.forget_at > now:
                continue
            if self._named(*key):  # its entry is in the ledger still: looked at again ``forget_after`` on
                gone.forget_at = now + self._forget_after
                named.append((gone.forget_at, key))
            else:
                del self._taken[key]
        self._forget.extend(named)


class _Relisted(abc.ABC):
    """A table that a fresh list rebuilds: every listed object applied as if it had just been added."""

    _by_namespace: dict[str, Any]

    def _rebuild(self, items: Iterable[Mapping[str, Any]]) -> None:
        self._by_namespace = {}
        for obj in items:
            self.apply("ADDED", obj)

    @abc.abstractmethod
    def apply(self, kind: str, obj: Mapping[str, Any]) -> None: ...


class QuotaTable(_Relisted):
    """Device limits per ResourceQuota object, indexed by namespace."""

    def __init__(self, devices: Sequence[Device]) -> None:
        self._factors = quota_factors(devices)
        self._by_namespace: dict[str, dict[str, Amounts]] = {}

    def replace(self, items: Iterable[Mapping[str, Any]]) -> None:
        self._rebuild(items)

    def apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace") or "", meta.get("name") or ""
        objects = self._by_namespace.setdefault(namespace, {})
        limits = {} if kind == "DELETED" else hard_limits((obj.get("spec") or {}).get("hard") or {}, self._factors)
        if limits:
            objects[name] = limits
        else:
            objects.pop(name, None)
        if not objects:
            del self._by_namespace[namespace]

    def limits(self, namespace: str) -> Amounts:
        return tightest((self._by_namespace.get(namespace) or {}).values())

    def objects(self, namespace: str) -> dict[str, Amounts]:
        """The namespace's ResourceQuotas with device limits, by name."""
        return dict(self._by_namespace.get(namespace) or {})

    def namespaces(self) -> set[str]:
        """The namespaces with a device quota: the ones whose Pods are watched."""
        return set(self._by_namespace)


class LedgerTable:
    """The newest ledger Lease seen per quota'd namespace: from the watch, and from this process's own
    reads and writes (whichever is newer wins); and when this process first saw each of its entries, on its own
    monotonic clock: an entry's life counts from there, never from a time another process wrote
    (docs/rules.md#no-clock-but-its-own). For a gang's hold also when it last saw a member join it (``renewed``)."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, on_key: Callable[[str, str], None] | None = None
    ) -> None:
        self._clock = clock
        self._on_key = on_key  # told each namespace's sealing key as a ledger brings it (PodTable.key)
        self._by_namespace: dict[str, Ledger] = {}
        self._first_seen: dict[str, dict[str, float]] = {}  # namespace -> entry id -> first sight here
        self._renewed: dict[str, dict[str, float]] = {}  # namespace -> hold id -> last sight of a member joining
        self._listed = False

    def replace(self, items: Iterable[Mapping[str, Any]]) -> int:
        """A fresh list: first sights of entries still there stand, and each is compared with the ledger seen
        before it, as a watch event is (a member that joined while the watch was down is a join seen now). What
        the first list of a process finds counts as new (its room held up to one TTL longer than its writer
        meant): returns how many entries that is, on the first list only (``say_found_at_start``), else 0."""
        before, self._by_namespace = self._by_namespace, {}
        for obj in items:
            found = _ledger(obj)
            if found is not None:
                self._take(found, before.get(found.namespace))
        self._first_seen = {ns: seen for ns, seen in self._first_seen.items() if ns in self._by_namespace}
        self._renewed = {ns: seen for ns, seen in self._renewed.items() if ns in self._by_namespace}
        if self._listed:
            return 0
        self._listed = True
        return sum(len(s.entries) for s in self._by_namespace.values())

    def apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name") or ""
        if not name.startswith(LEDGER_PREFIX):
            return
        namespace = name[len(LEDGER_PREFIX) :]
        if kind == "DELETED":
            self._by_namespace.pop(namespace, None)
            self._first_seen.pop(namespace, None)
            self._renewed.pop(namespace, None)
        elif self._newer(namespace, resource_version((obj.get("metadata") or {}).get("resourceVersion"))):
            # parsed only when newer: the writer's own write comes back by the watch after it offered it
            self.offer(decode(namespace, obj))

    def offer(self, found: Ledger) -> None:
        if self._newer(found.namespace, found.rv):
            self._take(found, self._by_namespace.get(found.namespace))

    def _take(self, found: Ledger, old: Ledger | None) -> None:
        """``found`` is the namespace's newest ledger, ``old`` the one this process saw before it (None: none)."""
        namespace, now = found.namespace, self._clock()
        first, renewed = self._first_seen.get(namespace, {}), self._renewed.get(namespace, {})
        old_entries = old.entries if old is not None else {}
        self._by_namespace[namespace] = found
        if found.key and self._on_key is not None and (old is None or old.key != found.key):
            self._on_key(namespace, found.key)
        # a hold released (its group gone, its places' life over) is a new sight: its members' room lives a TTL from
        # here on every reader, whichever versions it skipped; a member joining is a renewal (scene.py's until)
        self._first_seen[namespace] = {
            i: now if _released(old_entries.get(i), e) else first.get(i, now) for i, e in found.entries.items()
        }
        self._renewed[namespace] = {
            i: now if _joined(old_entries.get(i), e) else renewed.get(i, self._first_seen[namespace][i])
            for i, e in found.entries.items()
            if isinstance(e, Held)
        }

    def _newer(self, namespace: str, rv: int) -> bool:
        current = self._by_namespace.get(namespace)
        return current is None or rv > current.rv

    def get(self, namespace: str) -> Ledger | None:
        return self._by_namespace.get(namespace)

    def names(self, namespace: str, entry: str) -> bool:
        """The namespace's newest ledger has an entry of this id (its Pods' takings are kept: PodTable)."""
        found = self._by_namespace.get(namespace)
        return found is not None and entry in found.entries

    def first_seen(self, namespace: str) -> Mapping[str, float]:
        """When this process first saw each entry of the namespace's newest ledger (monotonic seconds). Read-only:
        ``offer`` replaces a namespace's mapping whole, never changes one in place, so a reader may keep it."""
        return MappingProxyType(self._first_seen.get(namespace) or {})

    def renewed(self, namespace: str) -> Mapping[str, float]:
        """When this process last saw a member join each hold of the namespace's newest ledger (or first saw it);
        read-only, as ``first_seen``."""
        return MappingProxyType(self._renewed.get(namespace) or {})


def _ledger(obj: Mapping[str, Any]) -> Ledger | None:
    """A listed Lease as a ledger (None: another Lease of the webhook's namespace)."""
    name = (obj.get("metadata") or {}).get("name") or ""
    return decode(name[len(LEDGER_PREFIX) :], obj) if name.startswith(LEDGER_PREFIX) else None


def _joined(before: LedgerEntry | None, after: LedgerEntry) -> bool:
    """A gang's hold took a new member (or handed places to a grant) between two sights of it; places given back
    by a grant are no member's arrival, and do not lengthen its life."""
    return isinstance(before, Held) and isinstance(after, Held) and after.hold.members > before.hold.members


def _released(before: LedgerEntry | None, after: LedgerEntry) -> bool:
    """A gang's hold became an ordinary entry (app/quota/core/scene.py's released) between two sights of it."""
    return isinstance(before, Held) and not isinstance(after, Held)


def view(namespace: str, quotas: QuotaTable, pods: PodTable, ledger: Ledger | None) -> View:
    """The View of ``namespace`` from tables filled by one list each (``hami-webhook quota``): synced, every
    entry first seen now."""
    entries = ledger.entries if ledger is not None else ()
    return View(namespace, quotas.limits(namespace), ledger, {}, pods.used(namespace), pods.seen(namespace, entries), 0)
