"""A deterministic simulation of the quota protocol: several webhook workers, each running the real QuotaEvaluator
(app/quota/committer.py) and the real decision (app/quota/core/decision.py), the real Leases (its Lease bodies and
compare-and-swap) and the real Pod/ResourceQuota/ledger tables of the feed
(app/quota/feed/tables.py), against ``ApiServer`` below.

Why this is not a fake of our code: ``ApiServer`` models the *Kubernetes API server's* protocol, the part our
design relies on, and nothing of the webhook: a global resourceVersion (etcd's revision) bumped by every write;
Lease GET / POST (409 when it exists) / PUT (409 unless the body's resourceVersion is the stored one); Pods
created and deleted by others; and per-watcher event streams that are delivered in resourceVersion order within
one watch, at any delay, interleaved across watches in any order, sometimes cut with 410 Gone (the watcher lists
again), with bookmarks that move a quiet watch's resourceVersion on. Faults the real server can produce: a write
applied whose answer is lost, a worker SIGKILLed at any point (holding grants, mid-write), an admitted Pod that
never lands (another admission plugin refused it), replicas' wall clocks skewed far beyond the TTL (up to ten
minutes either way) and jumping during a run (a VM resumed, NTP stepping the clock). What it leaves out
(timing, TLS, the feed's HTTP streaming, the API server's own admission) is why tests/realkube and the
tests/app/quota tests that use a real kube-apiserver remain the authority; this explores interleavings those
tests happen not to produce, thousands per minute, replayable from a seed.

Determinism: each thread of a worker process (its committers, up to MAX_ADMITTING admissions, the contact probe)
is a greenlet, so only one runs at a time and a hand-over costs about a microsecond, not a thread switch. A thread
switches back to the scheduler at every port call (each ledger request, before and after it reaches the server;
each wait on the feed or on the Committer's conditions, with the lock released as Condition.wait releases it;
each sleep), and the scheduler, drawing from one seeded Random, picks what happens next. Time is simulated;
QuotaEvaluator and the Committer read it, and wait, through the Clock seam. The global ``random`` module (the
back-off's jitter) is seeded too. The Committer's locks are real: the port never holds one across a port call,
or a schedule would hang here.

Partitions: a worker cut off from the API server (a black hole: nothing copied, nothing closed) gets no watch
events, and its requests hang until their timeout or the heal; a request it gave up on reaches the server when the
network resumes, or never when the partition ends by resetting connections. Its contact probe runs too.

Gangs: some schedules declare up to three PodGroups (scheduling.k8s.io, sizes 2-4, watched like the other kinds)
and make half their admissions members; a group may be deleted mid-run; a quarter of the members are created late,
half a hold's life to past it (an OrderedReady creator), and Lease watches are cut often, so joins, releases and
relists meet at the end of a hold's life. Every hold that every reader still counts (its group not deleted, its last
member's write less than its life ago) must be real room: the Pods stored or landing plus every such hold's unfilled
room never exceed the limit, so two gangs never each hold part of it. Each reader must count the entry of a Pod
admitted less than a TTL ago, which it has not seen, as live (``check_unseen``), and give a hold's places up by their
life past its own last sight of the hold or of a Pod naming it (``check_places``). A mixed gang's refusal must name
what it assumes (``check_assumed``); at the end a gang that fits the free room, its launcher first or second, is
admitted whole (``admit_whole``).
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import greenlet
import orjson

from app.admission.edit import PodEdit
from app.admission.ports import QuotaUnavailable, Verdict
from app.kube.errors import ApiError
from app.quota.committer import COMMIT_FAILED, Committer
from app.quota.contact import Contact
from app.quota.core.encoding import Ledger, decode
from app.quota.core.entries import Ahead, Held, LedgerEntry, Places
from app.quota.core.gang import KUEUE, KUEUE_LABEL, KUEUE_TOTAL, UPSTREAM, Gang
from app.quota.core.scene import CAP, WINDOW, Scene, View, until, whole
from app.quota.evaluator import QuotaEvaluator
from app.quota.feed.groups import GroupTable
from app.quota.feed.tables import LedgerTable, PodTable, QuotaTable
from app.quota.lease import KubeLeases
from app.settings import Settings
from testbed.pods import container, pod

NS, HOME = "ai", "hami"
MEM, GPU = "nvidia.com/gpumem", "nvidia.com/gpu"
TTL = 60.0
RESERVATION = "hami.io/quota-reservation"
HOLD = 90.0  # HAMI_QUOTA_GANG_HOLD: longer than TTL, so a hold's own expiry is what gives it back
ASSUMED = "(each Pod not seen yet counted as large as this one)"  # what a gang's refusal assumes (docs/quota.md)
SKEW = 600.0  # the most a replica's wall clock is off, either way: ten TTLs (no decision may read it)
LAND_WITHIN = 3.0  # an admitted Pod is stored within this many seconds of its admission, or never
CALL_TIMEOUT = 30.0  # the most a webhook call lasts (timeoutSeconds' bound): answered later, the Pod is never made
MAX_ADMITTING = 3  # admission threads of one worker at a time
SPIN = 10_000  # clock reads in one step that mean a thread loops without ever waiting
DEVICES = Settings.from_env({}).devices


def _copy(obj: Any) -> Any:
    """A deep copy of JSON (what the API server stores and sends), at a fraction of copy.deepcopy's cost."""
    return orjson.loads(orjson.dumps(obj))


def entry_of(verdict: Verdict) -> str:
    """The ledger entry an admission's seal names (app/quota/core/seal.py)."""
    return verdict.reservation.partition(".")[0]


def entry_of_pod(obj: dict[str, Any]) -> str:
    """The ledger entry an admitted Pod's seal names."""
    return str(obj["metadata"]["annotations"][RESERVATION].partition(".")[0])


def memory(obj: dict[str, Any]) -> int:
    """The GPU memory a simulated Pod asks for (its one container's limit; a gang's launcher: none)."""
    return int(obj["spec"]["containers"][0]["resources"]["limits"].get(MEM, 0))


def placed(found: Ledger) -> dict[str, str]:
    """The gangs' grants of ``found`` (grants of a hold's places), and the gang of each."""
    return {grant_id: e.gang for grant_id, e in found.entries.items() if isinstance(e, Places)}


class Killed(BaseException):
    """The worker's process was SIGKILLed: unwinds its thread (not an Exception: nothing in the port catches it)."""


class Violation(AssertionError):
    pass


@dataclass(eq=False)
class Watch:
    """One watch of one kind, as the API server streams it to one worker: events not delivered yet."""

    pending: deque[tuple[str, dict[str, Any]]] = field(default_factory=deque)


class ApiServer:
    """The API server's protocol for Leases and Pods (see the module docstring)."""

    def __init__(self) -> None:
        self.rv = 1
        self.leases: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        self.groups: dict[str, dict[str, Any]] = {}  # PodGroups by name
        self.watches: dict[str, list[Watch]] = {"leases": [], "pods": [], "podgroups": []}
        self._parsed: Ledger | None = None  # the stored ledger, parsed once per write (checked every step)
        self._fresh = False  # _parsed is the stored ledger's

    def _stored(self, kind: str, obj: dict[str, Any], event: str) -> dict[str, Any]:
        self.rv += 1
        if kind == "leases":
            self._fresh = False
        obj["metadata"]["resourceVersion"] = str(self.rv)
        stored = orjson.dumps(obj)  # a copy for each watch and the answer, encoded once
        for watch in self.watches[kind]:
            watch.pending.append((event, orjson.loads(stored)))
        return orjson.loads(stored)

    def request(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        if method == "GET":
            if path not in self.leases:
                raise ApiError(404, "Not Found", {"code": 404, "reason": "NotFound"})
            return _copy(self.leases[path])
        assert body is not None
        if method == "POST":
            path = f"{path}/{body['metadata']['name']}"
            if path in self.leases:
                raise ApiError(409, "Conflict", {"code": 409, "reason": "AlreadyExists"})
            self.leases[path] = _copy(body)
            return self._stored("leases", self.leases[path], "ADDED")
        assert method == "PUT"
        if path not in self.leases:
            raise ApiError(404, "Not Found", {"code": 404, "reason": "NotFound"})
        if body["metadata"].get("resourceVersion") != self.leases[path]["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", {"code": 409, "reason": "Conflict"})
        self.leases[path] = _copy(body)
        return self._stored("leases", self.leases[path], "MODIFIED")

    def create_pod(self, obj: dict[str, Any]) -> None:
        self.pods[obj["metadata"]["uid"]] = obj
        self._stored("pods", obj, "ADDED")

    def delete_pod(self, uid: str) -> None:
        self._stored("pods", self.pods.pop(uid), "DELETED")

    def modify_pod(self, uid: str, annotations: dict[str, str]) -> None:
        self.pods[uid]["metadata"]["annotations"] = annotations
        self._stored("pods", self.pods[uid], "MODIFIED")

    def create_group(self, name: str, size: int) -> None:
        spec = {"schedulingPolicy": {"gang": {"minCount": size}}}
        self.groups[name] = {"metadata": {"name": name, "namespace": NS}, "spec": spec}
        self._stored("podgroups", self.groups[name], "ADDED")

    def delete_group(self, name: str) -> None:
        self._stored("podgroups", self.groups.pop(name), "DELETED")

    def ledger_entries(self) -> Ledger | None:
        if not self._fresh:
            lease = next(iter(self.leases.values()), None)
            self._parsed = None if lease is None else decode(NS, lease)
            self._fresh = True
        return self._parsed


class SimFeed:
    """A worker's feed (FeedView, FeedPort): the real tables, filled as the scheduler delivers its watches' events."""

    def __init__(self, worker: Worker, server: ApiServer, limit: int) -> None:
        self.worker = worker
        clock = lambda: worker.sim.now + worker.offset  # noqa: E731 (the worker's monotonic clock, never counted)
        # the seals of Pods seen are checked with the ledger's key once it brings it
        self.ledgers = LedgerTable(clock, on_key=lambda namespace, key: self.pods.key(namespace, key))
        self.pods = PodTable(DEVICES, forget_after=TTL, clock=clock, named=self.ledgers.names)
        self.quotas = QuotaTable(DEVICES)
        self.quotas.replace([{"metadata": {"namespace": NS, "name": "gpu"}, "spec": {"hard": {MEM: str(limit)}}}])
        self.groups = GroupTable()
        self.watches = {"pods": Watch(), "leases": Watch(), "podgroups": Watch()}
        self.shown: set[str] = set()  # the uids of every Pod a list or an event showed this feed
        # simulated time of this feed's first sight of each ledger entry, and its last first sight of a Pod naming one
        self.sighted: dict[str, float] = {}
        self.pod_sighted: dict[str, float] = {}
        self.unseen_checked: tuple[int, ...] = ()  # what Simulation.check_unseen last checked here
        self.pod_rv = 0
        for kind, watch in self.watches.items():
            server.watches[kind].append(watch)
            self.relist(server, kind)

    def relist(self, server: ApiServer, kind: str) -> None:
        """A fresh list (first start, or after 410 Gone): the watch's undelivered events are gone."""
        self.worker.feed_version += 1
        self.watches[kind].pending.clear()
        if kind == "pods":
            self.sight_pods(o for u, o in server.pods.items() if u not in self.shown)
            self.shown |= set(server.pods)
            self.pods.replace(NS, _copy(list(server.pods.values())))
            self.pod_rv = server.rv
        elif kind == "podgroups":
            self.groups.replace(UPSTREAM, _copy(list(server.groups.values())))
        else:
            self.ledgers.replace(_copy(list(server.leases.values())))
            self.sight_entries()

    def gone(self, server: ApiServer, kind: str) -> None:
        """410 Gone: the watch's events not delivered are lost, it lists again."""
        self.worker.sim.trace.append(f"{self.worker.sim.now:.3f} worker {self.worker.index} lists {kind} again")
        self.relist(server, kind)

    def bookmark(self, server: ApiServer) -> None:
        """A bookmark on the Pod watch: its resourceVersion moves on to the server's."""
        self.pod_rv = server.rv
        self.worker.feed_version += 1

    def deliver(self, kind: str) -> None:
        self.worker.feed_version += 1
        event, obj = self.watches[kind].pending.popleft()
        if kind == "pods":
            if event != "DELETED" and obj["metadata"]["uid"] not in self.shown:  # a Pod gone unseen: nothing known
                self.sight_pods([obj])
                self.shown.add(obj["metadata"]["uid"])
            self.pods.apply(event, obj)
            self.pod_rv = int(obj["metadata"]["resourceVersion"])
        elif kind == "podgroups":
            self.groups.apply(UPSTREAM, event, obj)
        else:
            self.ledgers.apply(event, obj)
            self.sight_entries()

    def sight_pods(self, objs: Iterable[dict[str, Any]]) -> None:
        """Pods shown here for the first time: a sight of the entry each names (sealed or not: the bound it gives
        ``Simulation.check_places`` is the later for it)."""
        for obj in objs:
            if named := (obj["metadata"].get("annotations") or {}).get(RESERVATION, "").partition(".")[0]:
                self.pod_sighted[named] = self.worker.sim.now

    def sight_entries(self) -> None:
        """The entries of the newest ledger here that it had not seen before are first seen now."""
        if (found := self.ledgers.get(NS)) is not None:
            for entry_id in found.entries.keys() - self.sighted.keys():
                self.sighted[entry_id] = self.worker.sim.now

    # --- FeedView ---------------------------------------------------------------------------------

    def view(self, namespace: str, entries: Iterable[str] | None = None) -> View:
        ledger = self.ledgers.get(namespace)
        wanted = entries if entries is not None else (ledger.entries if ledger is not None else ())
        taken = self.pods.seen(namespace, wanted)
        first_seen, renewed = self.ledgers.first_seen(namespace), self.ledgers.renewed(namespace)
        holds = ledger.gangs if ledger is not None else frozenset()
        limits, used, members = self.quotas.limits(namespace), self.pods.used(namespace), self.pods.members(namespace)
        gone = self.groups.gone(namespace, holds)
        return View(namespace, limits, ledger, first_seen, used, taken, self.pod_rv, True, 0.0, members, gone, renewed)

    def gang(self, namespace: str, pod: dict[str, Any]) -> tuple[Gang | None, str]:
        return self.groups.gang(namespace, pod)

    def offer(self, found: Ledger) -> None:
        self.ledgers.offer(found)
        self.sight_entries()

    def wait_ledger(self, namespace: str, rv: int, timeout: float) -> Ledger | None:
        def newer() -> Ledger | None:
            found = self.ledgers.get(namespace)
            return found if found is not None and found.rv > rv else None

        if timeout > 0:
            self.worker.wait(timeout, lambda: newer() is not None, on_feed=True)
        return newer()

    def wait_pods(self, namespace: str, rv: int, timeout: float) -> bool:
        if self.pod_rv < rv and timeout > 0:
            self.worker.wait(timeout, lambda: self.pod_rv >= rv, on_feed=True)
        return self.pod_rv >= rv

    def wait_synced(self, timeout: float) -> bool:
        return True

    def key(self, namespace: str) -> str:
        found = self.ledgers.get(namespace)
        return found.key if found is not None else ""

    def consumed(self, namespace: str, entry: str, nonce: str) -> bool:
        return self.pods.consumed(namespace, entry, nonce)


class SimStreams:
    """A worker's streams as the evaluator (StreamsPort) and the contact probe see them: always answered and in
    sync; the scheduler delivers their events to the SimFeed."""

    def quota_in_play(self) -> bool:
        return True

    def nudge(self) -> None:
        pass

    def answered_since(self, moment: float) -> bool:
        return True

    def status(self) -> dict[str, Any]:
        return {"synced": {"pods": True, "resourcequotas": True}, "broken_seconds": 0.0}

    def start(self) -> None:
        pass

    def stop(self, timeout: float) -> None:
        pass


@dataclass
class Admission:
    uid: str
    memory: int
    dry_run: bool
    group: str = ""  # the PodGroup it is a member of, or Kueue's plain-Pod group (``declares`` its size)
    declares: str = (
        ""  # Kueue's: the total count on the Pod (its author's word: now and then not its group's, or no count)
    )
    result: Verdict | QuotaUnavailable | None = None
    sent: float = 0.0  # when the API server called the webhook


class Task:
    """One thread of a worker process (an admission, a committer, the contact probe), as a greenlet the scheduler
    switches to. Idle between operations, it is reused."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.kind = ""
        self.op: Callable[[], object] | None = None  # None: idle
        self.ready: Callable[[], bool] = lambda: False  # when the scheduler may resume it
        self.on_feed = False  # ready() reads the worker's feed
        self._asked: tuple[int, int, int] = (-1, -1, -1)  # (versions, epoch) when ready() was last asked
        self._ready = False
        self.dead = False
        self.glet = greenlet.greenlet(self._loop, parent=worker.sim.scheduler)

    @property
    def done(self) -> bool:
        return self.op is None

    def is_ready(self) -> bool:
        """``ready()``, asked again only once the worker (its feed, when ready() reads it) or the time has changed:
        it reads nothing else."""
        worker = self.worker
        key = (worker.version, worker.feed_version if self.on_feed else 0, worker.sim.epoch)
        if key != self._asked:
            self._asked, self._ready = key, self.ready()
        return self._ready

    def pause(self, ready: Callable[[], bool], on_feed: bool = False) -> None:
        self.ready, self.on_feed = ready, on_feed
        self.worker.sim.scheduler.switch()
        if self.worker.killed:
            raise Killed()

    def _loop(self) -> None:
        try:
            while True:
                assert self.op is not None
                self.op()
                self.op = None
                self.pause(lambda: False)
        except Killed:
            pass
        except BaseException as exc:  # a bug in the port: the scheduler raises it
            self.worker.sim.problems.append(f"worker {self.worker.index} {self.kind} crashed: {exc!r}")
        finally:
            self.dead = True


class Worker:
    """One webhook process: a QuotaEvaluator on its own feed and clock, its committer threads, and up to MAX_ADMITTING
    admission threads, each a Task."""

    def __init__(self, sim: Simulation, index: int) -> None:
        self.sim, self.index = sim, index
        # bumped whenever what its threads wait on may have changed: a thread ran, its network or clock changed
        self.version = 0
        self.feed_version = 0  # bumped whenever its feed changed (an event, a list, a bookmark)
        self.skew = sim.rng.uniform(-SKEW, SKEW)
        self.offset = sim.rng.uniform(0, 1000)  # monotonic clocks start anywhere
        self.feed = SimFeed(self, sim.server, sim.limit)
        ledger = KubeLeases(self._send, HOME)
        committer = Committer(self.feed, ledger, ttl=TTL, clock=self, new_id=sim.new_id, hold_ttl=sim.hold)
        # its own shedding: this process's worker is not the simulated one's
        streams = SimStreams()
        contact = Contact(ledger.probe, streams.quota_in_play, streams.nudge, self, threading.Event())
        self.port = QuotaEvaluator(
            self.feed,
            streams,
            committer,
            contact,
            DEVICES,
            stale_after=30,
            clock=self,
            groups=self.feed,
            gang_hold=sim.hold,
        )
        self.killed = False
        self.cut = False  # cut off from the API server: its requests and watches hang
        self.held: list[tuple[str, str, dict[str, Any] | None]] = []  # requests given up on, still in the black hole
        self.tasks: list[Task] = []
        self.current: Task | None = None  # the task running now (one at a time)
        self._key: tuple[Any, ...] = ()
        self._options: tuple[list[float], list[tuple[Any, ...]]] = ([], [])
        for _ in range(sim.rng.choice([1, 1, 2])):
            self.spawn("committer", self.port.committer.run)

    def spawn(self, kind: str, op: Callable[[], object]) -> Task:
        """Run ``op`` in an idle thread of this worker (a new one if none is idle), until its first pause."""
        task = next((t for t in self.tasks if t.done and not t.dead), None)
        if task is None:
            task = Task(self)
            self.tasks.append(task)
        task.kind, task.op = kind, op
        self.sim.resume(task)
        return task

    def busy(self, kind: str) -> int:
        """Tasks of ``kind`` still running."""
        return sum(task.kind == kind and task.op is not None for task in self.tasks)

    def options(self) -> tuple[list[float], list[tuple[Any, ...]]]:
        """What may happen next to this worker, each with its weight, as ``Simulation.choices`` lists them: the
        same until the worker, the time, the server or the schedule's budgets change (kept till then)."""
        sim = self.sim
        budgets = (sim.admissions_left > 0, sim.kills_left > 0, sim.partitions_left > 0)
        key = (self.version, self.feed_version, sim.epoch, sim.server.rv, budgets)
        if key == self._key:
            return self._options
        weights: list[float] = []
        actions: list[tuple[Any, ...]] = []
        weigh, act = weights.append, actions.append
        admitting = contacting = 0
        for task in self.tasks:
            if task.op is None:  # idle
                continue
            if task.kind == "admission":
                admitting += 1
            elif task.kind == "contact":
                contacting += 1
            if not task.dead and task.is_ready():
                weigh(6)
                act((sim.resume, task))
        if sim.admissions_left and admitting < MAX_ADMITTING:
            weigh(3)
            act((sim.start_admission, self))
        if not contacting:
            weigh(0.5)
            act((self.spawn, "contact", self.probe))
        if self.cut:
            weigh(0.3)
            act((sim.heal, self))
        else:  # cut off, nothing reaches it: no events, no bookmarks
            if sim.partitions_left:
                weigh(0.05)
                act((sim.cut_off, self))
            feed = self.feed
            for kind, watch in feed.watches.items():
                if watch.pending:
                    weigh(4)
                    act((feed.deliver, kind))
                    weigh(0.5 if kind == "leases" else 0.05)  # a relist amid a gang's joins and releases
                    act((feed.gone, sim.server, kind))
                elif kind == "pods":  # a bookmark: the watch's resourceVersion moves on
                    weigh(0.3)
                    act((feed.bookmark, sim.server))
            if sim.kills_left:
                weigh(0.05)
                act((sim.kill, self))
            weigh(0.05)
            act((sim.jump, self))
        self._key, self._options = key, (weights, actions)
        return weights, actions

    def probe(self) -> None:
        """The contact probe's one round."""
        self.port.contact.check(self.monotonic())

    # --- Clock -----------------------------------------------------------------------------------

    def monotonic(self) -> float:
        self.sim.reads += 1
        if self.sim.reads > SPIN:  # time never passes inside a step: a thread that reads it this often spins
            raise Violation(
                f"worker {self.index}'s {self.current and self.current.kind} ran {SPIN} clock reads without a pause"
            )
        return self.sim.now + self.offset

    def time(self) -> float:
        return 1.7e9 + self.sim.now + self.skew

    def sleep(self, seconds: float) -> None:
        self.wait(seconds, lambda: False)

    def wait_for(self, cond: threading.Condition, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """The Committer's waits: the lock released, the baton given back until ``predicate()`` or the timeout."""
        if predicate():
            return True
        cond.release()
        try:
            self.wait(math.inf if timeout is None else timeout, predicate)
        finally:
            cond.acquire()
        return predicate()

    # --- the baton -------------------------------------------------------------------------------

    def wait(self, timeout: float, until: Callable[[], bool], on_feed: bool = False) -> None:
        """Give the baton back until ``until()`` holds or ``timeout`` simulated seconds have passed."""
        deadline = self.monotonic() + timeout
        self._pause(lambda: until() or self.monotonic() >= deadline, on_feed)

    def _pause(self, ready: Callable[[], bool], on_feed: bool = False) -> None:
        assert self.current is not None
        self.current.pause(ready, on_feed)

    def _send(
        self, method: str, path: str, *, timeout: float, body: dict[str, Any] | None = None, query: Any = None
    ) -> Any:
        """A ledger request: it reaches the server at some point after it is sent, and its answer comes back
        at some point after that (a kill in between: applied, never answered). Cut off, it hangs until the
        partition heals or its timeout: timed out, it stays in the black hole, and reaches the server when the
        network resumes (or never, when the partition ends by resetting connections)."""
        self._pause(lambda: True)
        if self.cut:
            deadline = self.monotonic() + timeout
            self._pause(lambda: not self.cut or self.monotonic() >= deadline)
            if self.cut:
                self.held.append((method, path, body))
                raise OSError(f"read timed out ({timeout:g} s, simulated partition)")
            if self.sim.heal_by_reset:
                raise OSError("connection reset by peer (simulated: a partition healed by resetting)")
        if query is not None:  # the contact probe's list
            self._pause(lambda: True)
            return {"kind": "LeaseList", "items": []}
        answer = self.sim.server.request(method, path, body)
        if method != "GET" and (self.sim.lose_next or self.sim.rng.random() < self.sim.lost_answers):
            self.sim.lose_next = max(self.sim.lose_next - 1, 0)
            raise OSError("connection reset by peer (simulated: the write was applied, its answer lost)")
        self._pause(lambda: True)
        return answer

    def admit(self, admission: Admission) -> None:
        admission.sent = self.sim.now
        obj = self.sim.pod_object(admission)
        who = f"author\x00{admission.uid}"  # the requester and the Pod's name, as every review of it sees them
        try:
            admission.result = self.port.admit(NS, PodEdit(obj), uid=admission.uid, dry_run=admission.dry_run, who=who)
            result = admission.result
            in_time = self.sim.now - admission.sent <= CALL_TIMEOUT  # later, the API server gave up on the call
            if result.reservation and in_time and self.sim.authors.random() < self.sim.reinvocations:
                self.admit_again(obj, admission, who)
        except QuotaUnavailable as exc:
            admission.result = exc
        self.sim.answered(self, admission)

    def admit_again(self, obj: dict[str, Any], admission: Admission, who: str) -> None:
        """The API server reviews the admitted Pod again (a later webhook changed it), with a new request uid and the
        seal the first review wrote on it: the same admission, charged nothing more
        (docs/rules.md#charged-once-per-pod). Undecided now, the Pod is not created: the first charge stays its TTL."""
        assert isinstance(admission.result, Verdict)
        sealed = admission.result.reservation
        obj["metadata"]["annotations"][RESERVATION] = sealed
        again = self.port.admit(NS, PodEdit(obj), uid=f"{admission.uid}-again", dry_run=False, who=who)
        self.sim.trace.append(f"{self.sim.now:.3f} worker {self.index} {admission.uid} reviewed again: {again!r}")
        if again.reservation != sealed:
            self.sim.problems.append(f"{admission.uid} reviewed again was charged again: {again!r}")


@dataclass
class Outcome:
    seed: int
    steps: int
    admitted: int
    denied: int
    unavailable: dict[str, int]
    free_at_end: int


class Simulation:
    """One seeded schedule: ``run()`` raises Violation (with the seed and the step) when an invariant breaks."""

    def __init__(
        self, seed: int, *, workers: int = 3, room: int = 8, admissions: int = 30, kills: int = 1, gangs: int = 0,
        hold: float = HOLD,
    ) -> None:  # fmt: skip
        self.seed = seed
        self.hold = hold  # HAMI_QUOTA_GANG_HOLD
        self.rng = random.Random(seed)
        self.now = 0.0
        self.epoch = 0  # bumped whenever time passes
        self.limit = room * 1000
        self.server = ApiServer()
        self.kueue: dict[str, int] = {}  # Kueue's plain-Pod groups (no object: each Pod declares the size)
        for index in range(gangs):  # before the workers start: their first list finds them
            if self.rng.random() < 0.3:
                self.kueue[f"kueue-{index}"] = self.rng.choice([2, 3, 4])
            else:
                self.server.create_group(f"gang-{index}", self.rng.choice([2, 3, 4]))
        self.gangs = sorted([*self.server.groups, *self.kueue])
        self.launched: set[str] = set()  # groups whose Pod that asks for no device (a launcher) was created
        self.started: dict[str, list[Admission]] = {}  # per group: its members' admissions, in order
        self.answered_at: dict[str, float] = {}  # per admission uid: when its answer came
        self.placed: dict[str, str] = {}  # per gang grant id ever stored: its gang
        self.killed = False  # a worker was killed
        self.hold_stored: dict[str, float] = {}  # hold or gang grant id -> when the server first had it
        self.carried: dict[str, float] = {}  # reservation -> when a Pod carrying it was last stored
        self.landed: dict[str, tuple[str, int]] = {}  # uid -> the reservation and memory of every admitted Pod stored
        self.holds_of: Ledger | None = None  # the stored ledger whose holds ``holds`` lists
        self.holds: list[tuple[float, str, Held | Places]] = []
        self.charged: dict[str, int] = {}  # per reservation: the memory of every Pod admitted into it
        self.scheduler = greenlet.getcurrent()  # where every task switches back to
        self.reads = 0  # clock reads since the running task was resumed
        self.ids = 0
        self.lost_answers = self.rng.choice([0.0, 0.0, 0.05])
        self.lose_next = 0  # the answers of this many next writes lost, whatever lost_answers draws (a Hand's)
        self.admissions_left = admissions
        self.kills_left = kills
        self.never_lands = self.rng.choice([0.0, 0.1, 0.3])
        self.partitions_left = self.rng.choice([0, 1, 2])
        self.heal_by_reset = self.rng.random() < 0.5
        # The authors, on a Random of their own (the schedule's draws stay the seed's): how often a stored Pod's
        # reservation is rewritten after admission (a copy of another's, an entry's or a hold's bare id), and how
        # often the API server reviews an admitted Pod again (a later webhook changed it).
        self.authors = random.Random(seed ^ 0x5EA1)
        self.rewrites = self.authors.choice([0.0, 0.0, 0.2])
        self.rewritten = False  # a stored Pod's reservation was rewritten: its entry may hold its room again
        self.reinvocations = self.authors.choice([0.0, 0.3])
        self.workers: list[Worker] = []
        for _ in range(workers):
            self.workers.append(Worker(self, len(self.workers)))
        self.landing: dict[str, tuple[float, dict[str, Any]]] = {}  # uid -> (deadline, the Pod)
        self.committed = 0  # the memory of the Pods stored or landing, kept as they come and go (recounted at the end)
        self.admitted = self.denied = 0
        self.unavailable: dict[str, int] = {}
        self.step = 0
        self.trace: deque[str] = deque(maxlen=40)
        self.problems: list[str] = []  # found in a worker's thread, raised by the scheduler
        self.checked_rv = -1  # the stored ledger's resourceVersion when last checked
        self.places_epoch = -1  # the epoch when the holds' places were last checked
        self.gang_denials: dict[str, list[str]] = {}  # per group: its members' denials
        self.coming: dict[str, tuple[str, float]] = {}  # per Pod admitted to be stored: its entry and call's start
        self.stragglers: list[tuple[float, int, Admission]] = []  # members created late: when, through which worker
        self.present: set[str] = set()  # the entries stored then
        self.gone: set[str] = set()  # entries that left the stored ledger

    def new_id(self) -> str:
        self.ids += 1
        return f"grant-{self.ids}"

    def pod_object(self, admission: Admission) -> dict[str, Any]:
        limits = {GPU: "1", MEM: str(admission.memory)} if admission.memory else {"cpu": "1"}
        obj = pod(container(limits=limits), namespace=NS)
        obj["metadata"] |= {"uid": admission.uid, "name": admission.uid, "annotations": {}}
        if admission.group in self.kueue:
            obj["metadata"]["labels"] = {KUEUE_LABEL: admission.group}
            obj["metadata"]["annotations"][KUEUE_TOTAL] = admission.declares
        elif admission.group:
            obj["spec"]["schedulingGroup"] = {"podGroupName": admission.group}
        return obj

    # --- what happens ------------------------------------------------------------------------------

    def answered(self, worker: Worker, admission: Admission) -> None:
        """The API server got the webhook's answer: an admitted Pod is stored soon (unless it never lands)."""
        result = admission.result
        self.answered_at[admission.uid] = self.now
        self.trace.append(f"{self.now:.3f} worker {worker.index} {admission.uid} ({admission.memory}): {result!r}")
        if isinstance(result, QuotaUnavailable):
            reason = str(result)
            if not reason:
                self.problems.append("a refusal without a reason")
            if COMMIT_FAILED in reason:  # the committer caught a bug of its own
                self.problems.append(reason)
            self.unavailable[reason[:60]] = self.unavailable.get(reason[:60], 0) + 1
            return
        assert result is not None
        if result.denial:
            if not result.denial.startswith(f"exceeding resource quota: namespace {NS} "):
                self.problems.append(f"a denial that does not say why: {result.denial!r}")
            if admission.group:
                self.gang_denials.setdefault(admission.group, []).append(result.denial)
            self.denied += 1
            return
        if admission.dry_run:
            return
        self.admitted += 1
        entry = entry_of(result)
        self.charged[entry] = self.charged.get(entry, 0) + admission.memory
        if not result.reservation:
            self.problems.append(f"{admission.uid} admitted without a reservation")
        if self.now - admission.sent > CALL_TIMEOUT:  # the API server gave up on the call: the Pod is not made
            self.trace.append(f"{self.now:.3f} {admission.uid} answered after its call timed out")
        elif self.rng.random() >= self.never_lands:
            self.coming[admission.uid] = (entry, admission.sent)
            obj = self.pod_object(admission)
            obj["metadata"]["annotations"][RESERVATION] = result.reservation
            self.landing[admission.uid] = (self.now + self.rng.uniform(0, LAND_WITHIN), obj)
            self.committed += admission.memory

    def resume(self, task: Task) -> None:
        if task.dead:  # crashed: the scheduler raises what it left in ``problems``
            return
        task.worker.current = task
        self.reads = 0
        task.glet.switch()  # back here when it pauses or ends
        task.worker.version += 1

    def kill(self, worker: Worker) -> None:
        """SIGKILL: wherever it is, the process is gone (a write it sent may have landed); a new one starts."""
        self.trace.append(f"{self.now:.3f} worker {worker.index} killed")
        self.kills_left -= 1
        self.killed = True
        self.stop(worker)
        for kind, watch in worker.feed.watches.items():
            self.server.watches[kind].remove(watch)
        self.workers[worker.index] = Worker(self, worker.index)

    def stop(self, worker: Worker) -> None:
        """Every thread of the worker unwinds (Killed) where it waits."""
        worker.killed = True
        for task in list(worker.tasks):
            if task.glet:  # started and not ended
                self.resume(task)

    def choices(self) -> tuple[list[float], list[tuple[Any, ...]]]:
        """What may happen next and the weight of each: an action is a callable and its arguments."""
        weights: list[float] = []
        actions: list[tuple[Any, ...]] = []
        for worker in self.workers:
            weighed, acts = worker.options()
            weights += weighed
            actions += acts
        for uid in self.landing:
            weights.append(1)
            actions.append((self.land, uid))
        if self.server.pods:
            weights.append(0.2)
            actions.append((self.delete_some_pod,))
        if self.server.groups:
            weights.append(0.02)
            actions.append((self.delete_some_group,))
        if len(self.launched) < len(self.gangs):
            weights.append(0.05)
            actions.append((self.launch,))
        weights.append(1)
        actions.append((self.advance,))
        if self.quiet():  # toward the end of a hold's life: often while one waits for members
            found = self.server.ledger_entries()
            waiting = found is not None and any(
                isinstance(e, Held) and e.hold.members < e.hold.size for e in found.entries.values()
            )
            weights.append(1.0 if waiting else 0.2)
            actions.append((self.advance, 25.0))
            if self.stragglers and self.idle(found):
                weights.append(1.0)  # time passes to the next late member
                actions.append((self.straggle,))
        if self.stragglers and self.stragglers[0][0] <= self.now:
            weights.append(1.0)
            actions.append((self.straggle,))
        return weights, actions

    def quiet(self) -> bool:
        """No Pod on its way and every watch delivered: time may pass in a long step. The protocol counts on a feed
        whose watch shows an admitted Pod within its reservation's TTL (a minute, past the API server's request
        timeout); a long step with events pending would make a watch lag that long, which it does not claim to
        survive (seed 2607 of SIM_BASE 868916498 did: an entry expired before its Pod was seen)."""
        return not self.landing and not any(w.pending for x in self.workers for w in x.feed.watches.values())

    def idle(self, found: Ledger | None) -> bool:
        """Nothing on its way: no admission, no grant open (a step longer than a TTL would stall its worker past its
        life: the places it holds lost, as a killed worker's)."""
        open_grant = found is not None and any(isinstance(e, Ahead) for e in found.entries.values())
        return not open_grant and not any(w.busy("admission") for w in self.workers)

    def pick(self, weights: list[float], actions: list[tuple[Any, ...]]) -> tuple[Any, ...]:
        """``self.rng.choices(actions, weights)[0]``, the same draw, without its checks and copies."""
        cumulative = list(itertools.accumulate(weights))
        return actions[bisect.bisect(cumulative, self.rng.random() * (cumulative[-1] + 0.0), 0, len(actions) - 1)]

    def jump(self, worker: Worker) -> None:
        """The worker's wall clock is set anywhere within SKEW of the true time (its monotonic clock runs on)."""
        worker.skew = self.rng.uniform(-SKEW, SKEW)
        worker.version += 1
        self.trace.append(f"{self.now:.3f} worker {worker.index}'s wall clock off by {worker.skew:+.1f} s")

    def cut_off(self, worker: Worker) -> None:
        """A black-holed network between the worker and the API server: nothing copied, nothing closed."""
        self.trace.append(f"{self.now:.3f} worker {worker.index} cut off")
        self.partitions_left -= 1
        worker.cut = True
        worker.version += 1

    def heal(self, worker: Worker) -> None:
        """The partition ends: what it held reaches the server now (answers go nowhere), or is reset."""
        self.trace.append(
            f"{self.now:.3f} worker {worker.index} healed ({'reset' if self.heal_by_reset else 'resumed'})"
        )
        worker.cut = False
        worker.version += 1
        held, worker.held = worker.held, []
        for method, path, body in [] if self.heal_by_reset else held:
            try:
                self.server.request(method, path, body)
            except ApiError:
                pass

    def start_admission(self, worker: Worker) -> None:
        self.admissions_left -= 1
        group = self.rng.choice(self.gangs) if self.gangs and self.rng.random() < 0.5 else ""
        admission = Admission(
            f"pod-{self.admissions_left}", self.rng.choice([1000, 1000, 2000]), self.rng.random() < 0.1, group
        )
        if group and self.rng.random() < 0.2:  # a gang of mixed sizes
            admission.memory = 4000
        if group in self.kueue:  # now and then a member declares another size than its group's, or no number
            admission.declares = self.rng.choice([str(self.kueue[group])] * 16 + [str(self.kueue[group] + 1), "\u00b2"])
        if group and self.rng.random() < 0.25:  # a member created late (an OrderedReady creator, a retried one)
            due = self.now + self.rng.uniform(0.5, 1.1) * self.hold
            bisect.insort(self.stragglers, (due, worker.index, admission), key=lambda s: s[0])
            return
        self.spawn_admission(worker, admission)

    def spawn_admission(self, worker: Worker, admission: Admission) -> None:
        if admission.group and not admission.dry_run:
            self.started.setdefault(admission.group, []).append(admission)
        worker.spawn("admission", lambda: worker.admit(admission))

    def straggle(self) -> None:
        """The first late member comes (time passes to it)."""
        due, index, admission = self.stragglers.pop(0)
        if due > self.now:
            self.advance(due - self.now)
        self.trace.append(f"{self.now:.3f} {admission.uid} of {admission.group} created late")
        self.spawn_admission(self.workers[index], admission)

    def launch(self) -> None:
        """A gang's Pod that asks for no device (an MPI launcher, a Spark driver): created by its controller, never
        sent to the webhook; the group's size counts it."""
        group = self.rng.choice(sorted(set(self.gangs) - self.launched))
        self.launched.add(group)
        uid = f"launcher-{group}"
        self.trace.append(f"{self.now:.3f} {uid} stored")
        self.server.create_pod(self.pod_object(Admission(uid, 0, False, group, str(self.kueue.get(group, "")))))

    def land(self, uid: str) -> None:
        _, obj = self.landing.pop(uid)
        self.trace.append(f"{self.now:.3f} {uid} stored")
        carries = obj["metadata"]["annotations"][RESERVATION].partition(".")[0]  # the entry its seal names
        self.carried[carries] = self.now
        self.landed[uid] = (carries, memory(obj))
        self.server.create_pod(obj)
        if self.authors.random() < self.rewrites:
            self.rewrite(uid)

    def rewrite(self, uid: str) -> None:
        """The Pod's author rewrites its reservation once it is stored (what the guard refuses; a feed that trusted
        the annotation would count it against the named entry and free that entry's room): a copy of another
        Pod's, or the bare id of a ledger entry, a gang's hold among them."""
        others = [p["metadata"]["annotations"].get(RESERVATION, "") for u, p in self.server.pods.items() if u != uid]
        found = self.server.ledger_entries()
        choices = [a for a in others if a] + (list(found.entries) if found is not None else [])
        if not choices:
            return
        forged = self.authors.choice(sorted(choices))
        self.rewritten = True
        self.trace.append(f"{self.now:.3f} {uid}'s reservation rewritten to {forged}")
        self.server.modify_pod(uid, {RESERVATION: forged})

    def delete_some_pod(self) -> None:
        uid = self.rng.choice(sorted(self.server.pods))
        self.trace.append(f"{self.now:.3f} {uid} deleted")
        self.committed -= memory(self.server.pods[uid])
        self.server.delete_pod(uid)

    def delete_some_group(self) -> None:
        name = self.rng.choice(sorted(self.server.groups))
        self.trace.append(f"{self.now:.3f} podgroup {name} deleted")
        self.server.delete_group(name)

    def advance(self, most: float = 0.0) -> None:
        """Time passes (never past an admitted Pod's landing: it lands first)."""
        dt = most or self.rng.choice([0.001, 0.01, 0.05, 0.3, 1.2])
        due = min((deadline for deadline, _ in self.landing.values()), default=self.now + dt)
        if due < self.now + dt:
            self.land(min(self.landing, key=lambda u: self.landing[u][0]))
        self.now += dt
        self.epoch += 1

    # --- invariants --------------------------------------------------------------------------------

    def violation(self, what: str) -> Violation:
        trace = "\n  ".join(self.trace)
        return Violation(f"seed {self.seed}, step {self.step}, t={self.now:.3f}: {what}\n  last events:\n  {trace}")

    def check(self) -> None:
        if self.problems:
            raise self.violation("; ".join(self.problems))
        committed = self.committed
        if committed > self.limit:
            raise self.violation(f"over-admitted: Pods stored or landing hold {committed} > limit {self.limit}")
        if self.epoch != self.places_epoch:
            self.places_epoch = self.epoch
            self.check_places()
        found = self.server.ledger_entries()
        if found is None:
            return
        self.check_holds(found, committed)
        self.check_unseen(found)
        if found.rv == self.checked_rv:
            return
        self.placed.update(placed(found))
        self.checked_rv, stored = found.rv, set(found.entries)
        for entry_id, entry in found.entries.items():
            life = max(self.hold, TTL) if isinstance(entry, Held) else TTL + WINDOW
            latest = 1.7e9 + self.now + SKEW + life + 0.05  # for the previous version's readers; rounded to 0.1 s
            if entry.ttl is None or entry.ttl > life or entry.expires > latest:
                raise self.violation(f"entry {entry_id} holds room past its TTL: {entry}")
        if stored & self.gone:  # its readers would count its life again from their next sight
            raise self.violation(f"entries {sorted(stored & self.gone)} came back to the ledger after they left it")
        if left := self.present - stored:  # no room is given back while a Pod admitted into it is on its way
            for uid, (_, obj) in self.landing.items():
                if (carries := entry_of_pod(obj)) in left:
                    raise self.violation(f"entry {carries} left the ledger while {uid}, admitted into it, is landing")
        self.gone |= self.present - stored
        self.present = stored

    def check_holds(self, found: Ledger, committed: int) -> None:
        """Every hold each reader still counts is real room: the Pods stored or landing plus those holds' unfilled
        room, and the room of the places their grants hold that no member was admitted into, fit the limit (two
        gangs never each hold part of it, and a hold can always be filled). Every reader counts a hold's places
        until at least its life past the later of its first write and its last member's Pod stored (each reader's
        sights of them come later), CAP lives from that write at most."""
        if found is not self.holds_of:  # a new ledger: its holds and gangs' grants, with when the server first had it
            self.holds_of, self.holds = (
                found,
                [
                    (self.hold_stored.setdefault(entry_id, self.now), entry_id, entry)
                    for entry_id, entry in found.entries.items()
                    if isinstance(entry, Held | Places)
                ],
            )  # fmt: skip
        unfilled = 0
        for stored, entry_id, entry in self.holds:
            group = entry.hold.group if isinstance(entry, Held) else entry.gang
            api, _, name = group.partition("/")
            if api != KUEUE and name not in self.server.groups:
                continue
            life = max(self.hold, TTL)  # its places: from the last Pod with its id stored, CAP lives at most
            if (
                isinstance(entry, Held)
                and self.now < min(max(stored, self.carried.get(entry_id, 0.0)), stored + (CAP - 1) * life) + life
            ):
                unfilled += entry.hold.unfilled().get(MEM, 0)
            elif isinstance(entry, Places) and self.now < stored + TTL + WINDOW:  # a gang's grant: its places not taken
                unfilled += max(entry.amounts.get(MEM, 0) - self.charged.get(entry_id, 0), 0)
        if committed + unfilled > self.limit:
            raise self.violation(
                f"holds are not real room: Pods {committed} + unfilled holds {unfilled} > {self.limit}"
            )

    def check_unseen(self, found: Ledger) -> None:
        """Every reader of the stored ledger counts the entry of each Pod admitted less than a TTL ago that it has not
        seen yet as live (an entry lives a TTL from each reader's first sight of it, or of it released; a hold also a
        TTL from each reader's sight of its last join, a relist's included: docs/quota.md, "Giving it back"); a Pod
        shown later than that its watch does not claim to survive (``quiet``)."""
        if self.coming and min(sent for _, sent in self.coming.values()) + TTL <= self.now:
            self.coming = {u: c for u, c in self.coming.items() if self.now < c[1] + TTL}
        for worker in self.workers if self.coming else ():
            feed = worker.feed
            if (seen := feed.ledgers.get(NS)) is None or seen.rv != found.rv:
                continue  # an older ledger: a write on it fails its compare-and-swap
            key = (self.epoch, found.rv, worker.feed_version, len(self.coming))
            if feed.unseen_checked == key:
                continue
            feed.unseen_checked = key
            unseen = {u: e for u, (e, _) in self.coming.items() if u not in feed.shown and e in found.entries}
            if not unseen:
                continue
            scene = self.sights(worker, found, unseen.values())
            for uid, carries in unseen.items():
                if scene.now >= until(scene, carries, found.entries[carries]):
                    raise self.violation(
                        f"worker {worker.index} gave back {carries} before it saw {uid}, admitted into it"
                    )

    def sights(self, worker: Worker, found: Ledger, entries: Iterable[str]) -> Scene:
        """``found`` as a decision of ``worker`` would read it now: its sights of the entries and their Pods, and the
        groups it saw deleted (the limits and the Pods' usage left out: the checks judge time, not room)."""
        feed = worker.feed
        groups = found.gangs
        return Scene(
            NS, {}, found.entries, found.mark, {}, feed.pods.seen(NS, entries), worker.time(), self.now + worker.offset,
            TTL, first_seen=feed.ledgers.first_seen(NS), gone=feed.groups.gone(NS, groups), hold_ttl=self.hold,
            renewed=feed.ledgers.renewed(NS),
        )  # fmt: skip

    def check_places(self) -> None:
        """No reader holds a gang's places (room for members still to come) longer than the hold's life past the
        later of its first sight of the hold and its last sight of a Pod naming it, nor past CAP lives from its first
        sight: a join alone (a member admitted and never stored) renews nothing (docs/quota.md, "Giving it back")."""
        life = max(self.hold, TTL)
        for worker in self.workers:
            feed = worker.feed
            found = feed.ledgers.get(NS)
            holds = [
                (i, e)
                for i, e in (found.entries.items() if found else ())
                if isinstance(e, Held) and e.hold.members < e.hold.size
            ]
            if not holds:
                continue
            assert found is not None
            scene = self.sights(worker, found, [i for i, _ in holds])
            for hold_id, entry in holds:
                first = feed.sighted.get(hold_id, self.now)
                seen = max(first, feed.pod_sighted.get(hold_id, first))
                if self.now >= min(seen, first + (CAP - 1) * life) + life and whole(scene, hold_id, entry):
                    raise self.violation(
                        f"worker {worker.index} holds the places of {hold_id} {self.now - seen:.3f} s after its last "
                        f"sight of it or of a Pod naming it, {self.now - first:.3f} s after its first"
                    )

    def check_assumed(self) -> None:
        """A gang whose Pods are of several sizes (a launcher that asks for no device among them), refused for its
        members together, is told that the figure counts each Pod not seen yet as large as the refused one: why a
        gang that would fit in some order was refused in this one (docs/rules.md)."""
        for group, denials in self.gang_denials.items():
            sizes = {a.memory for a in self.started.get(group, [])} | ({0} if group in self.launched else set())
            for denial in denials if len(sizes) > 1 else ():
                if " Pods together" in denial and ASSUMED not in denial:
                    raise self.violation(
                        f"gang {group} of sizes {sorted(sizes)} refused without its assumption: {denial}"
                    )

    def check_members(self) -> None:
        """No member takes two places: once every admission is answered, a hold whose gang has no grant open counts
        no more members than the admissions answered into it or into its gang's grants (a join decided again, its
        answer lost, included). Not where a worker was killed (the places of its grants are lost, counted) or a
        member's admission failed (its join may have landed, unanswered)."""
        found = self.server.ledger_entries()
        if found is None or self.killed:
            return
        for hold_id, entry in found.entries.items():
            if not isinstance(entry, Held) or any(
                isinstance(e, Places) and e.gang == entry.hold.group for e in found.entries.values()
            ):
                continue
            admissions = self.started.get(entry.hold.group.partition("/")[2], [])
            if any(isinstance(a.result, QuotaUnavailable) for a in admissions):
                continue
            into = {hold_id} | {g for g, gang in self.placed.items() if gang == entry.hold.group}
            admitted = sum(isinstance(a.result, Verdict) and entry_of(a.result) in into for a in admissions)
            if entry.hold.members > admitted:
                raise self.violation(
                    f"hold {hold_id} counts {entry.hold.members} members, {admitted} were admitted into it"
                )

    def run(self) -> Outcome:
        before = random.getstate()
        random.seed(self.seed)  # the back-off's jitter: drawn in the one running thread, so in a fixed order
        try:
            while (
                self.admissions_left
                or self.stragglers
                or self.landing
                or any(w.busy("admission") for w in self.workers)
            ):
                self.step += 1
                action, *arguments = self.pick(*self.choices())
                action(*arguments)
                self.check()
            self.check_members()
            self.check_assumed()
            free = self.settle()
            recounted = sum(memory(o) for o in [*self.server.pods.values(), *(o for _, o in self.landing.values())])
            if recounted != self.committed:
                raise self.violation(f"the harness counted {self.committed} stored or landing, not {recounted}")
        finally:
            random.setstate(before)
            for worker in self.workers:
                self.stop(worker)
        return Outcome(self.seed, self.step, self.admitted, self.denied, self.unavailable, free)

    def finish(self, worker: Worker, kind: str, op: Callable[[], object]) -> None:
        """Run ``op`` on ``worker`` to its end (its other threads running as they can), time passing in small
        steps."""
        task = worker.spawn(kind, op)
        for _ in range(100_000):
            if task.done:
                return
            self.advance(0.01)
            for other in [t for t in worker.tasks if not t.done and not t.dead and t.is_ready()]:
                self.resume(other)
        raise self.violation(f"worker {worker.index}'s {kind} did not end")

    def drain(self) -> None:
        """Every thread that can run runs, until none can without time passing: a request in flight reaches the
        server before the quiet time, not after it (in a run cut short it can still be on its way)."""
        for _ in range(10_000):
            ready = [t for w in self.workers for t in w.tasks if not t.done and not t.dead and t.is_ready()]
            if not ready:
                return
            for task in ready:
                self.resume(task)
            self.deliver_all()

    def deliver_all(self) -> None:
        for worker in self.workers:
            while any(w.pending for w in worker.feed.watches.values()):
                for kind in worker.feed.watches:
                    while worker.feed.watches[kind].pending:
                        worker.feed.deliver(kind)

    def settle(self) -> int:
        """After the burst, once every worker has seen the ledger and a TTL has run out since: a worker admits
        exactly the room Pods do not hold."""
        self.kills_left, self.lost_answers, self.partitions_left = 0, 0.0, 0
        for worker in self.workers:
            if worker.cut:
                self.heal(worker)
        self.deliver_all()
        self.drain()
        held = self.held_by_holds()
        self.advance(TTL + WINDOW + 1)  # every ordinary entry and grant is given back by now
        if held is not None and self.server.pods:  # a Pod goes: the feeds look at what they may forget
            self.delete_some_pod()
        self.deliver_all()
        worker = self.workers[0]
        # it hears the API server again
        self.finish(worker, "contact", lambda: worker.port.contact.check(worker.monotonic()))
        if held is not None:  # the holds live on: the room neither Pods nor they hold, no more
            self.fill(worker, "held", (self.limit - sum(map(memory, self.server.pods.values())) - held) // 1000)
        self.advance(max(TTL, self.hold) + WINDOW + 1)  # every hold not filled is given back by now
        self.deliver_all()
        free = (self.limit - sum(map(memory, self.server.pods.values()))) // 1000
        self.fill(worker, "after", free)
        if self.gangs:
            self.advance(TTL + WINDOW + 1)  # the room the fill's Pods (never stored) were admitted into is back
            self.deliver_all()
            self.admit_whole(worker, self.limit - sum(map(memory, self.server.pods.values())))
        return free

    def admit_whole(self, worker: Worker, free: int) -> None:
        """A gang that fits the free room, its members one after the other and nothing else asking, is admitted
        whole: its launcher (a Pod that asks for no device) created before its first member fills a place of no
        room; created after it, its place is held at that member's size (docs/rules.md), so the gang is sized for
        that. Its members of one size, as large as the room allows."""
        self.never_lands = self.rewrites = 0.0
        first = self.rng.random() < 0.5  # the launcher before the first member
        members = self.rng.choice([1, 2, 3])
        each = free // (members if first else members + 1)
        if each < 1:
            return
        name, size = "whole", members + 1
        if self.rng.random() < 0.3:
            self.kueue[name] = size
        else:
            self.server.create_group(name, size)
        launcher = self.pod_object(Admission(f"launcher-{name}", 0, False, name, str(size)))
        for i in range(members + 1):
            if i == int(not first):
                self.trace.append(f"{self.now:.3f} launcher-{name} stored")
                self.server.create_pod(launcher)
            self.deliver_all()
            if i == members:
                break
            admission = Admission(f"{name}-{i}", each, False, name, str(size))
            self.finish(worker, "admission", lambda a=admission: worker.admit(a))
            result = admission.result
            if not (isinstance(result, Verdict) and result.reservation) or admission.uid not in self.landing:
                raise self.violation(
                    f"gang {name} of {size} (the launcher {'first' if first else 'second'}, {members} of {each}) in "
                    f"room for {free}: member {i} not admitted: {result!r}"
                )
            self.land(admission.uid)
            self.check()

    def held_by_holds(self) -> int | None:
        """The room the ledger's holds hold for worker 0 beyond what the Pods carrying their ids that its feed was
        shown took (gone ones too: a Pod made and deleted while its watch was down it never saw), when every reader
        certainly counts each of them a TTL on (each written less than its life less that ago, its group there, no
        grant open); None when that cannot be told so (or a worker was killed: a feed started since was never shown
        the Pods that went before; or an author rewrote a Pod's reservation: a reader that listed it holds its room
        in its entry again, stricter than this count)."""
        found = self.server.ledger_entries()
        if found is None or self.killed or any(isinstance(e, Ahead) for e in found.entries.values()):
            return None
        holds = {i: e for i, e in found.entries.items() if isinstance(e, Held)}
        if self.rewritten:  # a reader that listed a rewritten Pod counts its room in its entry again: stricter
            return None
        last = self.now + TTL + WINDOW + 1 + 1 - max(self.hold, TTL)  # written after this: live through the check
        if not holds or any(
            self.hold_stored.get(i, -math.inf) < last
            or (not e.hold.group.startswith(f"{KUEUE}/") and e.hold.group.partition("/")[2] not in self.server.groups)
            for i, e in holds.items()
        ):
            return None
        shown = self.workers[0].feed.shown
        took = {i: sum(m for uid, (r, m) in self.landed.items() if r == i and uid in shown) for i in holds}
        return sum(max(e.amounts.get(MEM, 0) - took[i], 0) for i, e in holds.items())

    def fill(self, worker: Worker, name: str, free: int) -> None:
        """``worker`` admits ``free`` Pods of 1000 one by one, and refuses the next (none of them is stored)."""
        for i in range(free + 1):
            admission = Admission(f"{name}-{i}", 1000, False)
            self.finish(worker, "admission", lambda a=admission: worker.admit(a))
            self.check()
            result = admission.result
            if i < free and not (isinstance(result, Verdict) and result.reservation):
                raise self.violation(f"room not usable after the burst ({name}): {i} of {free} admitted, {result!r}")
            if i == free and not (isinstance(result, Verdict) and result.denial):
                raise self.violation(f"past the room after the burst ({name}): {result!r}")
            if (landing := self.landing.pop(admission.uid, None)) is not None:
                self.committed -= memory(landing[1])


class Hand:
    """A schedule chosen by hand, not drawn: workers of a Simulation with no faults of their own, admissions run to
    their end, admitted Pods stored at once with their reservation, every watch delivered promptly unless held back
    (``paused``). What a test reproduces with it is one interleaving the API server may produce, named step by
    step; the shipped HAMI_QUOTA_GANG_HOLD (300 s) unless said."""

    def __init__(self, room: int, workers: int = 1, hold: float = 300.0) -> None:
        self.sim = Simulation(seed=7, workers=workers, room=room, admissions=0, kills=0, gangs=0, hold=hold)
        sim = self.sim
        sim.lost_answers, sim.never_lands, sim.partitions_left = 0.0, 0.0, 0
        sim.deliver_all()
        self.paused: set[tuple[int, str]] = set()  # (worker, watch kind) whose events are held back

    def deliver(self) -> None:
        for worker in self.sim.workers:
            for kind, watch in worker.feed.watches.items():
                while (worker.index, kind) not in self.paused and watch.pending:
                    worker.feed.deliver(kind)

    def obj(
        self, uid: str, mem: int, *, group: str = "", labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None, device: bool = True,
    ) -> dict[str, Any]:  # fmt: skip
        """A Pod asking ``mem`` of GPU memory (none but CPU: ``device`` false), a member of PodGroup ``group``."""
        made = pod(container(limits={GPU: "1", MEM: str(mem)} if device else {"cpu": "1"}), namespace=NS)
        made["metadata"] |= {"uid": uid, "name": uid, "annotations": dict(annotations or {}), "labels": labels or {}}
        if group:
            made["spec"]["schedulingGroup"] = {"podGroupName": group}
        return made

    def group(self, name: str, size: int) -> None:
        self.sim.server.create_group(name, size)
        self.deliver()

    def admit(self, objs: Iterable[dict[str, Any]], worker: int = 0, land: bool = True) -> dict[str, Any]:
        """These admissions, at once on ``worker``, run to their end (time passing 2 ms a step); the admitted ones
        stored unless ``land`` is false. Returns uid -> Verdict or QuotaUnavailable."""
        objs = list(objs)
        results: dict[str, Any] = {}
        at = self.sim.workers[worker]

        def admit(obj: dict[str, Any]) -> None:
            uid = obj["metadata"]["uid"]
            try:
                results[uid] = at.port.admit(NS, PodEdit(obj), uid=uid, dry_run=False)
            except QuotaUnavailable as exc:
                results[uid] = exc

        self.run(worker, [at.spawn("admission", lambda o=obj: admit(o)) for obj in objs])
        for obj in objs if land else ():
            verdict = results[obj["metadata"]["uid"]]
            if isinstance(verdict, Verdict) and not verdict.denial:
                self.store(obj, verdict.reservation)
        return results

    def run(self, worker: int, tasks: list[Task]) -> None:
        """``tasks`` of ``worker`` run to their end, its other threads as they can, watches delivered."""
        at = self.sim.workers[worker]
        for _ in range(20_000):
            if all(t.done for t in tasks):
                break
            self.deliver()
            for other in [t for t in at.tasks if not t.done and not t.dead and t.is_ready()]:
                self.sim.resume(other)
            self.sim.advance(0.002)
        assert all(t.done for t in tasks), "the admissions did not end"
        self.deliver()

    def store(self, obj: dict[str, Any], reservation: str = "") -> None:
        if reservation:
            obj["metadata"]["annotations"][RESERVATION] = reservation
        self.sim.server.create_pod(obj)
        self.deliver()

    def delete(self, uid: str) -> None:
        self.sim.server.delete_pod(uid)
        self.deliver()

    def stored(self) -> int:
        """The GPU memory of the Pods stored."""
        return sum(
            int(o["spec"]["containers"][0]["resources"]["limits"].get(MEM, 0)) for o in self.sim.server.pods.values()
        )

    def ledger(self) -> dict[str, LedgerEntry]:
        found = self.sim.server.ledger_entries()
        return dict(found.entries) if found is not None else {}

    def wait(self, seconds: float) -> None:
        self.sim.advance(seconds)
        self.deliver()

    def idle(self, worker: int, seconds: float) -> None:
        """``worker``'s threads run as they can for ``seconds`` (its committer closes the grants that come due)."""
        at = self.sim.workers[worker]
        for _ in range(round(seconds / 0.002)):
            self.deliver()
            for other in [t for t in at.tasks if not t.done and not t.dead and t.is_ready()]:
                self.sim.resume(other)
            self.sim.advance(0.002)
        self.deliver()
