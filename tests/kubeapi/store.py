"""The object store: one lock, one global resourceVersion counter, a bounded event history
for watch resumption, and per-watcher queues so watches never block writers."""

from __future__ import annotations

import copy
import queue
import random
import threading
import uuid
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tests.kubeapi import errors
from tests.kubeapi.kinds import check_metadata_types, validate_metadata
from tests.kubeapi.resources import NAMESPACES, ResourceType
from tests.kubeapi.schemas import unknown_fields

Obj = dict[str, Any]
Key = tuple[str, str]  # (group, plural)
Matcher = Callable[[Obj], bool]
Event = tuple[str, Obj]  # (ADDED|MODIFIED|DELETED, object)
DROP: Event = ("DROP", {})  # queued by drop_watches(): the stream's connection is cut without a clean end

_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # what the real server uses for generateName suffixes


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _metadata(obj: Obj) -> Obj:
    """``metadata`` if it is an object (``_admit`` rejects anything else with a 400)."""
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def decode(rt: ResourceType, candidate: Obj) -> Obj:
    """A copy of ``candidate`` as the typed decoder sees it: kind checked, unknown fields dropped (400 for
    values Go could not decode). Admission webhooks get this form, defaulted by ``rt.prepare``."""
    for field, expected in (("apiVersion", rt.api_version), ("kind", rt.kind)):
        if candidate.get(field) not in (None, "", expected):
            raise errors.bad_request(
                f"{field} of the provided object ({candidate[field]}) does not match {rt.plural} ({expected})"
            )
    body = {k: v for k, v in copy.deepcopy(candidate).items() if k not in ("kind", "apiVersion")}
    obj = {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": {}, **body}  # the real key order
    unknown_fields(obj, rt.schema, prune=True)  # typed decoding drops what the type doesn't have
    check_metadata_types(obj)
    return obj


@dataclass(frozen=True)
class Change:
    """One committed write; ``obj`` is the new (or deleted) object, ``old`` the previous one."""

    type: str
    key: Key
    namespace: str
    rv: int
    obj: Obj
    old: Obj | None


class Watcher:
    """A registered watch: filters changes and queues events; ``None`` in the queue means "server stopping"."""

    def __init__(self, key: Key, namespace: str, matches: Matcher):
        self.key, self.namespace, self.matches = key, namespace, matches
        self.queue: queue.SimpleQueue[Event | None] = queue.SimpleQueue()

    def translate(self, change: Change) -> Event | None:
        """Selector transitions become ADDED/DELETED, as the real watch cache reports them."""
        if change.key != self.key or (self.namespace and change.namespace != self.namespace):
            return None
        now_matches = self.matches(change.obj)
        if change.type == "DELETED":
            return ("DELETED", change.obj) if now_matches else None
        was_matching = change.old is not None and self.matches(change.old)
        if now_matches:
            return ("MODIFIED" if was_matching else "ADDED", change.obj)
        return ("DELETED", change.obj) if was_matching else None


class Compacted(Exception):
    """The resourceVersion asked for is older than the history kept (etcd compacted it)."""


class Store:
    """All objects of all kinds. Stored dicts are never mutated after commit; readers get deep copies."""

    def __init__(self, history_size: int, namespace_deletion_delay: float):
        self._lock = threading.RLock()
        self._objects: dict[Key, dict[tuple[str, str], Obj]] = defaultdict(dict)
        self._rv = 0
        self._history: deque[Change] = deque()
        self._history_size = history_size
        self._compacted = 0  # newest resourceVersion no longer in the history
        self._watchers: list[Watcher] = []
        self._closed = False
        self._namespace_deletion_delay = namespace_deletion_delay
        self._timers: list[threading.Timer] = []

    @property
    def resource_version(self) -> int:
        return self._rv

    # --- reads -----------------------------------------------------------------------------------

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        with self._lock:
            obj = self._objects[rt.key].get((namespace, name))
            return copy.deepcopy(obj)

    def list(self, rt: ResourceType, namespace: str, matches: Matcher, at: int | None = None) -> tuple[list[Obj], int]:
        """Matching objects sorted by namespace/name (like etcd keys) and the list resourceVersion; ``at`` reads
        the state as of that resourceVersion (etcd's snapshot read, as later pages of a paged list do), or
        raises ``Compacted`` if the history no longer reaches back that far."""
        with self._lock:
            objects = self._objects[rt.key]
            if at is not None and at < self._rv:
                if at < self._compacted:
                    raise Compacted()
                objects = dict(objects)
                for change in reversed(self._history):
                    if change.rv <= at:
                        break
                    if change.key == rt.key:
                        slot = (change.namespace, change.obj["metadata"]["name"])
                        before = change.obj if change.type == "DELETED" else change.old
                        if before is None:
                            objects.pop(slot, None)
                        else:
                            objects[slot] = before
            items = [
                copy.deepcopy(obj)
                for (ns, _), obj in sorted(objects.items())
                if (not namespace or ns == namespace) and matches(obj)
            ]
            return items, self._rv if at is None else at

    # --- writes ----------------------------------------------------------------------------------

    def create(self, rt: ResourceType, namespace: str, obj: Obj, *, dry_run: bool = False) -> Obj:
        with self._lock:
            meta = _metadata(obj)
            self._check_namespace(rt, namespace, meta)
            if meta.get("resourceVersion"):
                raise errors.internal("resourceVersion should not be set on objects to be created")
            name = meta.get("name") or self._generate_name(rt, namespace, meta.get("generateName"))
            self._require_namespace(rt, namespace, name, creating=True)
            new = self._admit(rt, namespace, name, obj, None)
            if (namespace, name) in self._objects[rt.key]:
                raise errors.already_exists(rt.plural, rt.group, name)
            return new if dry_run else self._commit(rt.key, namespace, name, new, None)

    def update(
        self, rt: ResourceType, namespace: str, name: str, obj: Obj, *, dry_run: bool = False
    ) -> tuple[Obj, bool]:
        """PUT semantics: optimistic concurrency when ``metadata.resourceVersion`` is set (required for kinds
        without unconditional updates), a ``metadata.uid`` precondition, no-ops skipped; a missing object is
        created if the kind allows it. The object and whether it was created."""
        with self._lock:
            meta = _metadata(obj)
            old = self._objects[rt.key].get((namespace, name))
            if old is None and meta.get("uid"):  # the body's uid is a precondition the missing object fails
                key = "/".join(p for p in ("/registry", rt.plural, namespace, name) if p)
                why = (
                    f"StorageError: invalid object, Code: 4, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: "
                    f"Precondition failed: UID in precondition: {meta['uid']}, UID in object meta: "
                )
                raise errors.conflict(rt.plural, rt.group, name, why)
            if old is None and rt.allow_create_on_update:
                if meta.get("name") != name:
                    raise errors.bad_request(
                        f"the name of the object ({meta.get('name', '')}) does not match the name on the URL ({name})"
                    )
                fresh = {**obj, "metadata": {k: v for k, v in meta.items() if k != "resourceVersion"}}
                return self.create(rt, namespace, fresh, dry_run=dry_run), True
            old = self._existing(rt, namespace, name)
            if not rt.allow_unconditional_update and not meta.get("resourceVersion"):
                error = errors.invalid(
                    "metadata.resourceVersion", errors.GoValue("0x0"), "must be specified for an update"
                )
                raise errors.invalid_object(rt.plural, rt.group, name, [error])
            return self._replace(rt, namespace, name, obj, old, dry_run), False

    def patch(
        self, rt: ResourceType, namespace: str, name: str, apply: Callable[[Obj], Any], *, dry_run: bool = False
    ) -> Obj:
        """Apply ``apply`` to the current object atomically; a resourceVersion in the result is a precondition."""
        with self._lock:
            old = self._existing(rt, namespace, name)
            patched = apply(copy.deepcopy(old))
            if not isinstance(patched, dict):
                raise errors.bad_request("the patched document is not a JSON object")
            return self._replace(rt, namespace, name, patched, old, dry_run)

    def delete(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        *,
        preconditions: dict[str, str] | None = None,
        dry_run: bool = False,
        graceful: bool = True,
    ) -> Obj:
        """Immediate deletion (no finalizers or grace periods), except that a Namespace first turns
        Terminating and is purged with its contents ``namespace_deletion_delay`` seconds later
        (at once if that is 0 or ``graceful`` is false)."""
        with self._lock:
            old = self._existing(rt, namespace, name)
            for field, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
                wanted, actual = (preconditions or {}).get(field), old["metadata"][field]
                if wanted and wanted != actual:
                    why = f"Precondition failed: {label} in precondition: {wanted}, {label} in object meta: {actual}"
                    raise errors.conflict(rt.plural, rt.group, name, why)
            if dry_run:
                return copy.deepcopy(old)
            if rt.key == NAMESPACES and graceful and self._namespace_deletion_delay > 0:
                return self._terminate_namespace(old)
            if rt.key == NAMESPACES:
                self._purge_namespace(name)
            return self._commit(rt.key, namespace, name, old, old, "DELETED")

    def delete_collection(
        self, rt: ResourceType, namespace: str, matches: Matcher, *, dry_run: bool = False
    ) -> list[Obj]:
        with self._lock:
            doomed = self._select(rt.key, namespace, matches)
            return [
                self.delete(rt, o["metadata"].get("namespace", ""), o["metadata"]["name"], dry_run=dry_run)
                for o in doomed
            ]

    def put(self, rt: ResourceType, obj: Obj) -> Obj:
        """Unconditional create-or-overwrite used for seeding; always commits a new resourceVersion."""
        with self._lock:
            meta = _metadata(obj)
            namespace = (meta.get("namespace") or "default") if rt.namespaced else ""
            name = meta.get("name") or self._generate_name(rt, namespace, meta.get("generateName"))
            old = self._objects[rt.key].get((namespace, name))
            self._require_namespace(rt, namespace, name, creating=old is None)
            new = self._admit(rt, namespace, name, obj, old)
            if old is None:
                for field in ("uid", "creationTimestamp"):
                    new["metadata"][field] = meta.get(field) or new["metadata"][field]
            return self._commit(rt.key, namespace, name, new, old)

    # --- watch -----------------------------------------------------------------------------------

    def watch(
        self, rt: ResourceType, namespace: str, matches: Matcher, since: int | None
    ) -> tuple[Watcher, list[Event]]:
        """Register a watcher plus the events it must see first, atomically (no gap, no duplicates).

        ``since=None`` replays the current state as ADDED; otherwise the history after ``since``
        is replayed, or 410 Expired is raised if it has been compacted away.
        """
        with self._lock:
            watcher = Watcher(rt.key, namespace, matches)
            if since is None:
                initial = [("ADDED", obj) for obj in self._select(rt.key, namespace, matches)]
            elif since < self._compacted:
                raise errors.expired(f"too old resource version: {since} ({self._compacted + 1})")
            else:
                initial = [e for c in self._history if c.rv > since and (e := watcher.translate(c)) is not None]
            self._watchers.append(watcher)
            if self._closed:
                watcher.queue.put(None)
            return watcher, initial

    def progress(self, watcher: Watcher) -> int | None:
        """The resourceVersion a bookmark may announce, or None while the watcher still has queued events."""
        with self._lock:
            return self._rv if watcher.queue.empty() else None

    def unwatch(self, watcher: Watcher) -> None:
        with self._lock:
            if watcher in self._watchers:
                self._watchers.remove(watcher)

    def drop_watchers(self) -> int:
        """Cut every open watch as a broken connection would; the number cut."""
        with self._lock:
            for watcher in self._watchers:
                watcher.queue.put(DROP)
            return len(self._watchers)

    def compact(self) -> None:
        """Forget the event history, as etcd compaction does: resuming a watch from any older
        resourceVersion answers 410 Expired."""
        with self._lock:
            self._history.clear()
            self._compacted = self._rv

    def close(self) -> None:
        """Wake every watcher so its stream ends, and stop pending namespace finalizers."""
        with self._lock:
            self._closed = True
            for watcher in self._watchers:
                watcher.queue.put(None)
            timers, self._timers = self._timers, []
        for timer in timers:
            timer.cancel()
            timer.join()

    # --- internals -------------------------------------------------------------------------------

    def _select(self, key: Key, namespace: str, matches: Matcher) -> list[Obj]:
        return [
            o for (ns, _), o in sorted(self._objects[key].items()) if (not namespace or ns == namespace) and matches(o)
        ]

    def _existing(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        obj = self._objects[rt.key].get((namespace, name))
        if obj is None:
            raise errors.not_found(rt.plural, rt.group, name)
        return obj

    def check_create(self, rt: ResourceType, namespace: str, meta: Obj) -> None:
        """What kube-apiserver checks before admission: the body's namespace matches the URL's (400) and
        the namespace exists and is not terminating (404/403)."""
        with self._lock:
            self._check_namespace(rt, namespace, meta)
            self._require_namespace(rt, namespace, meta.get("name") or "", creating=True)

    def _require_namespace(self, rt: ResourceType, namespace: str, name: str, creating: bool) -> None:
        """Like the NamespaceLifecycle admission plugin: no content in missing or terminating namespaces."""
        if not rt.namespaced:
            return
        ns = self._objects[NAMESPACES].get(("", namespace))
        if ns is None:
            raise errors.not_found("namespaces", "", namespace)
        if creating and ns["metadata"].get("deletionTimestamp"):
            why = f"unable to create new content in namespace {namespace} because it is being terminated"
            cause = {
                "reason": "NamespaceTerminating",
                "message": f"namespace {namespace} is being terminated",
                "field": "metadata.namespace",
            }
            raise errors.forbidden(rt.plural, rt.group, name, why, [cause])

    def _terminate_namespace(self, namespace: Obj) -> Obj:
        name, uid = namespace["metadata"]["name"], namespace["metadata"]["uid"]
        if namespace["metadata"].get("deletionTimestamp"):
            return copy.deepcopy(namespace)
        terminating = copy.deepcopy(namespace)
        terminating["metadata"]["deletionTimestamp"] = now()
        terminating["status"] = {"phase": "Terminating"}
        timer = threading.Timer(self._namespace_deletion_delay, self._finalize_namespace, (name, uid))
        timer.daemon = True
        self._timers.append(timer)
        timer.start()
        return self._commit(NAMESPACES, "", name, terminating, namespace)

    def _finalize_namespace(self, name: str, uid: str) -> None:
        """What the namespace controller does: delete the contents, then the namespace itself."""
        with self._lock:
            namespace = self._objects[NAMESPACES].get(("", name))
            if self._closed or namespace is None or namespace["metadata"]["uid"] != uid:
                return
            self._purge_namespace(name)
            self._commit(NAMESPACES, "", name, namespace, namespace, "DELETED")

    def _purge_namespace(self, name: str) -> None:
        for key, objects in self._objects.items():
            for ns, child in [k for k in objects if k[0] == name]:
                self._commit(key, ns, child, objects[(ns, child)], objects[(ns, child)], "DELETED")

    @staticmethod
    def _check_namespace(rt: ResourceType, namespace: str, meta: Obj) -> None:
        if rt.namespaced and meta.get("namespace") and meta["namespace"] != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )

    def _generate_name(self, rt: ResourceType, namespace: str, prefix: str | None) -> str:
        if not prefix:
            error = errors.required("metadata.name", "name or generateName is required")
            raise errors.invalid_object(rt.kind, rt.group, "", [error])
        while True:
            name = prefix + "".join(random.choices(_NAME_ALPHABET, k=5))
            if (namespace, name) not in self._objects[rt.key]:
                return name

    def _replace(self, rt: ResourceType, namespace: str, name: str, obj: Obj, old: Obj, dry_run: bool) -> Obj:
        meta = _metadata(obj)
        self._check_namespace(rt, namespace, meta)
        if meta.get("name") != name:
            raise errors.bad_request(
                f"the name of the object ({meta.get('name', '')}) does not match the name on the URL ({name})"
            )
        old_meta = old["metadata"]
        if meta.get("resourceVersion") and meta["resourceVersion"] != old_meta["resourceVersion"]:
            raise errors.conflict(rt.plural, rt.group, name, errors.STALE)
        if meta.get("uid") and meta["uid"] != old_meta["uid"]:
            why = f"Precondition failed: UID in precondition: {meta['uid']}, UID in object meta: {old_meta['uid']}"
            raise errors.conflict(rt.plural, rt.group, name, why)
        new = self._admit(rt, namespace, name, obj, old)
        if new == old or dry_run:  # the real server skips no-op writes: no new resourceVersion, no event
            return copy.deepcopy(new)
        return self._commit(rt.key, namespace, name, new, old)

    def _admit(self, rt: ResourceType, namespace: str, name: str, candidate: Obj, old: Obj | None) -> Obj:
        """Type-check, set server-managed metadata, default and validate a candidate object."""
        obj = decode(rt, candidate)
        meta = obj["metadata"]
        meta["name"] = name
        if rt.namespaced:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        old_meta = old["metadata"] if old is not None else {"uid": str(uuid.uuid4()), "creationTimestamp": now()}
        for field in ("uid", "creationTimestamp", "resourceVersion", "deletionTimestamp"):
            if field in old_meta:
                meta[field] = old_meta[field]
            else:
                meta.pop(field, None)
        if rt.prepare:
            rt.prepare(obj, old)
        problems = validate_metadata(obj, rt.name_format) + (rt.validate(obj, old) if rt.validate else [])
        if problems:
            raise errors.invalid_object(rt.kind, rt.group, name, problems)
        meta.pop("generation", None)
        if rt.generation_fields:
            changed = old is not None and any(obj.get(f) != old.get(f) for f in rt.generation_fields)
            meta["generation"] = old_meta.get("generation", 1) + changed
        return obj

    def _commit(self, key: Key, namespace: str, name: str, obj: Obj, old: Obj | None, kind: str | None = None) -> Obj:
        self._rv += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self._rv)
        change = Change(kind or ("MODIFIED" if old else "ADDED"), key, namespace, self._rv, obj, old)
        if change.type == "DELETED":
            del self._objects[key][(namespace, name)]
        else:
            self._objects[key][(namespace, name)] = obj
        self._history.append(change)
        while len(self._history) > self._history_size:
            self._compacted = self._history.popleft().rv
        for watcher in self._watchers:
            event = watcher.translate(change)
            if event is not None:
                watcher.queue.put(event)
        return copy.deepcopy(obj)
