"""The quota decision as a pure function: one scene of a namespace in, verdicts and the ledger to
write out. No locks, no clock, no I/O: app/quota/committer.py gathers the scene and writes the result.

Every time in a decision is this worker's own monotonic clock: an entry lives for its ``ttl`` from this worker's
first sight of it, another's grant is certain from WINDOW + SLACK after that sight. No other process's clock is
read, so no skew between replicas turns held room into free room (docs/rules.md#no-clock-but-its-own).

Rules: docs/rules.md#no-over-admission-under-concurrency; why they hold: docs/quota.md ("Deciding").

- A Pod is admitted only if what is taken *at most* (the namespace's Pods as seen, plus every live entry's
  room beyond what its Pods were seen to take, open grants of others at their full amounts) plus the request
  fits every limit.
- A Pod is denied when it does not fit even what is taken *at least* (others' open grants counted as free
  until WINDOW + SLACK after their first sight here): an older ledger never counts more, so a denial needs no
  write.
- Between the two the Pod is undecided: it waits for the grants to close.
- An entry is dropped from the ledger once its Pods were seen to take all its room; the mark moves to their
  resourceVersion, so every reader counts those Pods instead.
- A gang's first member holds room for every member still missing, in the same write (a ``Hold``); later
  members take theirs from it, ordinary Pods never; a hold whose group object is gone holds only its members' room.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from app.admission.ports import FITS, Verdict
from app.quota.core.amounts import Amounts, accumulate, plus, unseen
from app.quota.core.encoding import MAX_LEDGER_BYTES, Hold, Ledger, Reservation, encode
from app.quota.core.gang import Gang
from app.quota.core.limits import gang_overflow, limited, overflow

WINDOW = 1.0  # seconds a worker admits into a grant it wrote, counted from before the write
SLACK = 0.25  # others count a grant as possibly free this much longer, on their own clocks, from first sight
BURST = 4  # admissions per second into one namespace, in one worker, from which it takes room ahead
# A grant takes at most 1/SHARE of the room left, and at least BATCHES_AHEAD batches like the one it is written
# with. Measured with one process per replica (3 replicas, 300-Pod bursts): 8 and 4 -> 4 and 8 cut ledger
# writes from 0.16 to 0.11 per Pod (lost compare-and-swaps 0.08 -> 0.04) and room-for-50's p99 from 1.49x to
# 1.10x the no-quota p99.
SHARE = 4
BATCHES_AHEAD = 8
AHEAD_MAX = 64  # Pods' worth of room taken ahead at most


@dataclass(slots=True)
class Taken:
    """What the Pods carrying one reservation (a ledger entry) took, as this process has seen them (alive or gone):
    usage, not room held for them any more (app/quota/feed/tables.py keeps it)."""

    amounts: Amounts
    rv: int  # the newest resourceVersion among those Pods when first seen here
    alive: int = 0
    forget_at: float = float("inf")


@dataclass(frozen=True)
class Ask:
    """One admission waiting on the ledger."""

    uid: str
    requested: Amounts
    dry_run: bool = False
    gang: Gang | None = None  # the Pod's gang: its room comes from the gang's hold, never from a grant


@dataclass(eq=False)
class Grant:
    """Room this worker took ahead in a namespace (written as an open ledger entry): admissions go into it, without
    the API server, until it closes. ``closing``: a write closing it is being made, so nothing more goes in; the
    decision then writes it closed, cut to what was ``spent``."""

    id: str
    amounts: Amounts  # as written in the ledger
    spent: Amounts  # admitted into it so far
    closes_at: float  # monotonic: WINDOW after the write that made it was sent
    wanted: int  # the ledger's wanted count when it was made: a higher one asks for it to be closed at once
    closing: bool = False

    def room(self) -> Amounts:
        return {name: amount - self.spent.get(name, 0) for name, amount in self.amounts.items()}

    def unused(self) -> bool:
        return any(v > 0 for v in self.room().values())

    def admits(self, ask: Ask, now: float) -> bool:
        """Whether ``ask`` goes into this grant now (its room taken, unless a dry run): open, in its window, room."""
        room = self.room()
        if (
            ask.gang is not None
            or self.closing
            or now >= self.closes_at
            or any(room.get(n, 0) < a for n, a in ask.requested.items())
        ):
            return False
        if not ask.dry_run:
            accumulate(self.spent, ask.requested)
        return True

    def seen_by_decision(self) -> Grant:
        """A copy the decision reads apart from the lock that guards this one."""
        return replace(self, spent=dict(self.spent))


@dataclass(frozen=True)
class Scene:
    """Everything one decision reads about a namespace, taken at one moment."""

    namespace: str
    limits: Mapping[str, int]
    entries: Mapping[str, Reservation]  # the ledger's, as read
    mark: int  # the ledger's mark, which this worker's Pod watch has reached
    used: Amounts  # the namespace's Pods as seen
    taken: Mapping[str, Taken]  # per entry id: what the Pods carrying it were seen to take
    wall: float  # unix seconds: only written into new entries' ``expires``, for the previous version's readers
    now: float  # monotonic seconds: every judgement of time
    ttl: float  # this worker's reservation TTL: new entries' life, and that of entries written without one
    mine: Mapping[str, Grant] = field(default_factory=dict)  # this worker's grants, by entry id
    first_seen: Mapping[str, float] = field(default_factory=dict)  # each entry's first sight here (default: now)
    members: Mapping[str, int] = field(default_factory=dict)  # per gang key: its Pods in the namespace, as seen
    gone: frozenset[str] = frozenset()  # gangs whose group object was deleted: their holds keep members' room only
    hold_ttl: float = 0.0  # a hold's life after its last member's write (this worker's setting)


@dataclass(slots=True)
class View:
    """What a process's feed knows of one namespace, read at one moment (app/quota/ports.py's FeedView.view): the
    parts of a Scene that come from watching the API server, and whether they can be trusted yet. A value nobody
    changes, not frozen only because one is made on every review and a frozen one takes three times as long."""

    namespace: str
    limits: Amounts  # the tightest device limits of its ResourceQuotas ({}: no device quota)
    ledger: Ledger | None  # the newest ledger seen (None: none yet)
    first_seen: Mapping[str, float]  # when this process first saw each entry of that ledger (monotonic)
    used: Amounts  # the namespace's Pods as seen
    taken: Mapping[str, Taken]  # per reservation asked about: what the Pods carrying it were seen to take
    pods_at: int  # the resourceVersion its Pod watch has reached (-1: its Pods not listed yet)
    synced: bool = True  # the first lists are in (ResourceQuotas, and the Pods of every namespace quota'd then)
    broken_for: float = 0.0  # seconds the longest-broken ResourceQuota or Pod stream has been broken
    members: Mapping[str, int] = field(default_factory=dict)  # per gang key: its Pods in the namespace, as seen
    gone: frozenset[str] = frozenset()  # gangs of the ledger's holds whose group object was deleted

    def scene(
        self, found: Ledger, *, wall: float, now: float, ttl: float, mine: Mapping[str, Grant], hold_ttl: float = 0.0
    ) -> Scene:  # fmt: skip
        """The scene to decide ``found`` on (a ledger this view's ``taken`` was read for)."""
        entries, mark, used, taken = found.entries, found.mark, self.used, self.taken
        return Scene(
            self.namespace, self.limits, entries, mark, used, taken, wall, now, ttl, mine, self.first_seen,
            self.members, self.gone, hold_ttl,
        )  # fmt: skip


@dataclass(frozen=True)
class Account:
    """What a scene adds up to."""

    live: Mapping[str, Reservation]  # the entries not expired
    lower: Amounts  # taken at least: what a denial counts
    upper: Amounts  # taken at most: what an admission counts
    keep: Mapping[str, Reservation]  # the entries a write keeps (this worker's closing grants cut to what they took)
    mark: int  # the mark a write sets (moved past the Pods of the entries it drops)
    first_seen: Mapping[str, float]  # others' open grants still live, with their first sight here


@dataclass(frozen=True)
class Burst:
    """This worker's recent pace in the namespace, from which it sizes room taken ahead."""

    rate: int = 0  # admissions in the last second, before this batch
    contended: bool = False  # this batch lost a compare-and-swap already


@dataclass(frozen=True)
class Write:
    """The ledger to store with compare-and-swap."""

    entries: Mapping[str, Reservation]
    mark: int
    wanted: int
    entry: str = ""  # the entry this write adds for the reserved asks ("" none)
    ahead: Amounts = field(default_factory=dict)  # room taken ahead in it: an open grant

    def text(self) -> str:
        return encode(self.entries)


@dataclass(frozen=True)
class Ruling:
    """Verdicts for a batch, aligned with its asks, and the write, if one is needed. Every ask decided has its
    verdict here, the reserved ones naming ``write.entry`` (they stand once it is stored); None only for an ask
    that is ``undecided`` or ``full``."""

    verdicts: tuple[Verdict | None, ...]
    reserved: tuple[int, ...] = ()  # asks that hold room in ``write.entry`` once it is stored
    full: tuple[int, ...] = ()  # asks refused: the ledger would outgrow its Lease
    undecided: tuple[int, ...] = ()  # asks that must wait for others' grants to close
    write: Write | None = None
    account: Account | None = None


def account(scene: Scene) -> Account:
    """The live entries; what is taken at least and at most (Pods as seen, plus what entries hold beyond what
    their Pods were seen to take); the entries a write keeps, and the mark that dropping the others needs."""
    live = {i: e for i, e in scene.entries.items() if scene.now < scene.first_seen.get(i, scene.now) + life(scene, e)}
    first_seen = {i: scene.first_seen.get(i, scene.now) for i, e in live.items() if e.open and i not in scene.mine}
    certain_until = scene.now - WINDOW - SLACK  # others' grants first seen before this can take nothing more
    lower, upper = dict(scene.used), dict(scene.used)
    keep: dict[str, Reservation] = {}
    mark = scene.mark
    for entry_id, held in live.items():
        entry = released(scene, held) if held.hold is not None and held.hold.group in scene.gone else held
        grant = scene.mine.get(entry_id)
        taken = scene.taken.get(entry_id)
        closing = grant is not None and grant.closing
        # this worker knows what went into its own grants; an open one may still take up to its amounts
        seen = taken.amounts if taken is not None else None
        at_least = unseen(grant.spent if grant is not None else entry.amounts, seen)
        at_most = at_least if closing or grant is None else unseen(entry.amounts, seen)
        accumulate(upper, at_most)
        certain = grant is not None or not entry.open or first_seen[entry_id] <= certain_until
        if certain:
            accumulate(lower, at_least)
        if certain and (closing or grant is None) and not any(at_least.values()):
            mark = max(mark, taken.rv if taken is not None else mark)  # its Pods took all its room: drop it
        else:
            keep[entry_id] = (
                replace(entry, amounts=dict(grant.spent), open=False) if grant is not None and closing else entry
            )
    return Account(live, lower, upper, keep, mark, first_seen)


def released(scene: Scene, entry: Reservation) -> Reservation:
    """A hold whose group object is gone: its members' room only, an ordinary entry that lives the reservation TTL
    from its last member's write (its Pods drop it sooner)."""
    assert entry.hold is not None
    unfilled = entry.hold.unfilled()
    amounts = {name: amount - unfilled.get(name, 0) for name, amount in entry.amounts.items()}
    return replace(entry, expires=round(scene.wall + scene.ttl, 1), amounts=amounts, ttl=scene.ttl, hold=None)


def life(scene: Scene, entry: Reservation) -> float:
    """How long ``entry`` holds room from this worker's first sight: its ``ttl``; one written by the previous
    version has none, and holds the longest any of ours would (a grant's)."""
    return entry.ttl if entry.ttl is not None else scene.ttl + WINDOW


def free(scene: Scene) -> dict[str, int]:
    """What is free for certain, per limited resource: the limit less what is taken *at most*, never below 0. A
    Pod within it is admitted without waiting on anyone's grant; the other bound (less what is taken at least)
    only says what may come free. The one FREE: the workload warning's, ``hami-webhook quota``'s and the
    gauges' (app/quota/core/standing.py counts the same ``upper``); docs/quota.md, "Looking at quota"."""
    taken = account(scene).upper
    return {name: max(limit - taken.get(name, 0), 0) for name, limit in scene.limits.items()}


def denial(scene: Scene, requested: Mapping[str, int]) -> str:
    """The quota denial for ``requested`` counting only what is certainly taken ("" when it may fit)."""
    return overflow(scene.namespace, scene.limits, account(scene).lower, requested)


def decide(scene: Scene, asks: Sequence[Ask], *, wanted: int, ask: bool, burst: Burst, new_id: str) -> Ruling:
    """Verdicts for ``asks`` on ``scene``, in order; a write when any is reserved, a grant of this worker is
    closed, or (``ask``) an undecided one asks the holders of open grants to close them (``wanted`` + 1).

    ``new_id`` names the entry of a batch written with room ahead (a lone reservation is named by its uid, a
    gang's hold by its first member's)."""
    counted = account(scene)
    closing = {i for i, g in scene.mine.items() if g.closing and i in counted.live}
    keep = dict(counted.keep)
    verdicts, reserve, joined, undecided, taking, holding = _each(scene, counted, asks, closing, keep)
    closes = any(counted.keep.get(i) != counted.live[i] for i in closing)
    raised = wanted + 1 if undecided and ask else wanted
    decided = Ruling(tuple(verdicts), undecided=tuple(undecided), account=counted)
    if not reserve and not joined and not closes and raised == wanted:
        return decided  # denials and dry runs only: no write (an older ledger never counts more)
    entry, extra = "", {}
    if reserve:
        extra = ahead(scene.limits, plus(counted.upper, plus(taking, holding)), taking, len(reserve), burst)
        entry = asks[reserve[0]].uid if len(reserve) == 1 and not extra else new_id
        # a Pod admitted into a grant as its window ends may appear a TTL later
        ttl = scene.ttl + (WINDOW if extra else 0)
        keep[entry] = Reservation(round(scene.wall + ttl, 1), plus(taking, extra), bool(extra), ttl)
        if _size(keep) > MAX_LEDGER_BYTES:  # too big: take nothing ahead, then refuse the batch
            extra, keep[entry] = {}, Reservation(round(scene.wall + scene.ttl, 1), dict(taking), ttl=scene.ttl)
    if _size(keep) > MAX_LEDGER_BYTES:
        full = tuple(sorted(reserve + joined))
        refused = tuple(None if i in full else v for i, v in enumerate(verdicts))
        return replace(decided, verdicts=refused, full=full, write=Write(dict(counted.keep), counted.mark, raised))
    for index in reserve:
        verdicts[index] = Verdict(reservation=entry)
    write = Write(keep, counted.mark, raised, entry, extra)
    return replace(decided, verdicts=tuple(verdicts), reserved=tuple(sorted(reserve + joined)), write=write)


def _each(
    scene: Scene, counted: Account, asks: Sequence[Ask], closing: set[str], keep: dict[str, Reservation]
) -> tuple[list[Verdict | None], list[int], list[int], list[int], Amounts, Amounts]:  # fmt: skip
    """Each ask in order: its verdict, or reserved in the batch's entry (``reserve``, ``taking`` its room), or in its
    gang's hold (``joined``, written into ``keep``; ``holding`` the room added), or undecided."""
    verdicts: list[Verdict | None] = [None] * len(asks)
    reserve: list[int] = []
    joined: list[int] = []
    undecided: list[int] = []
    taking: Amounts = {}
    holding: Amounts = {}
    for index, one in enumerate(asks):
        if one.uid in counted.live and one.uid not in closing:  # sent again: its entry is there already
            verdicts[index] = Verdict(reservation=one.uid)
            continue
        both = plus(taking, holding)
        hold = _join(scene, counted, keep, both, one) if one.gang and limited(scene.limits, one.requested) else None
        if hold is not None:
            verdicts[index], taken = hold
            if taken:
                accumulate(holding, taken)
                joined.append(index)
            elif verdicts[index] is None:
                undecided.append(index)
            continue
        verdicts[index] = _verdict(scene, counted, both, one)
        if verdicts[index] is not None:
            continue
        if overflow(scene.namespace, scene.limits, plus(counted.upper, both), one.requested):
            undecided.append(index)
        else:
            accumulate(taking, one.requested)
            reserve.append(index)
    return verdicts, reserve, joined, undecided, taking, holding


def _join(
    scene: Scene, counted: Account, keep: dict[str, Reservation], taking: Amounts, one: Ask
) -> tuple[Verdict | None, Amounts] | None:  # fmt: skip
    """A gang member's verdict and the room it adds to the ledger, its gang's hold written into ``keep``; None when
    it is charged alone (its gang's hold is full, or all but it are there). The first member holds room for every
    member missing (``size`` less its Pods seen); a later one takes its room from the hold, and only what it asks
    beyond the first member's charge from free room. (None, {}): it must wait for others' grants to close."""
    assert one.gang is not None
    key = one.gang.key
    found = next((i for i, e in keep.items() if e.hold is not None and e.hold.group == key), None)
    if found is not None:
        entry = keep[found]
        assert entry.hold is not None
        if entry.hold.members >= entry.hold.size:
            return None
        need = {name: max(amount - entry.hold.each.get(name, 0), 0) for name, amount in one.requested.items()}
        members = entry.hold.members + 1
        hold_id, hold, denied = found, replace(entry.hold, members=members), ""
        amounts = {name: entry.amounts.get(name, 0) - entry.hold.each.get(name, 0) for name in entry.amounts}
        amounts = plus(amounts, one.requested)
    else:
        missing = one.gang.size - scene.members.get(key, 0)
        if missing <= 1:
            return None
        need = {name: amount * missing for name, amount in one.requested.items()}
        hold_id, hold, amounts = one.uid, Hold(key, missing, 1, dict(one.requested)), need
        denied = gang_overflow(scene.namespace, scene.limits, plus(counted.lower, taking), one.gang, missing, need)
    if denied or (denied := overflow(scene.namespace, scene.limits, plus(counted.lower, taking), need)):
        return Verdict(denied, gang=True), {}
    if overflow(scene.namespace, scene.limits, plus(counted.upper, taking), need):
        return None, {}
    if one.dry_run:
        return FITS, {}
    ttl = max(scene.hold_ttl, scene.ttl)
    keep[hold_id] = Reservation(round(scene.wall + ttl, 1), amounts, ttl=ttl, hold=hold)
    return Verdict(reservation=hold_id), need


def _verdict(scene: Scene, counted: Account, taking: Amounts, one: Ask) -> Verdict | None:
    """The verdict that needs no write: fits without a limit, denied on what is certainly taken (``taking``
    included: the batch's earlier asks), or a dry run that may fit; None when the ledger must hold it."""
    if not limited(scene.limits, one.requested):
        return FITS  # the quota went meanwhile
    if denied := overflow(scene.namespace, scene.limits, plus(counted.lower, taking), one.requested):
        return Verdict(denied)
    if one.dry_run and not overflow(scene.namespace, scene.limits, plus(counted.upper, taking), one.requested):
        return FITS  # dry runs check but never reserve (docs/rules.md#dry-runs-change-nothing)
    return None


def ahead(limits: Mapping[str, int], taken: Amounts, taking: Amounts, count: int, burst: Burst) -> Amounts:
    """Room to take ahead with a write, in a burst (several admissions at once, a recent rate of BURST or
    more, or a lost compare-and-swap): what the next WINDOW's admissions need at this worker's recent rate, and
    at least BATCHES_AHEAD batches like this one (Pods shaped like its), at most 1/SHARE of the room left."""
    rate = burst.rate + count
    if rate < BURST and count < 2 and not burst.contended:
        return {}
    pods = min(max(math.ceil(rate * WINDOW), BATCHES_AHEAD * count), AHEAD_MAX)
    each = {name: math.ceil(amount / count) for name, amount in taking.items()}
    for name, amount in each.items():
        if name in limits and amount:
            pods = min(pods, max(limits[name] - taken.get(name, 0), 0) // SHARE // amount)
    return {name: amount * pods for name, amount in each.items() if amount * pods} if pods else {}


def _size(entries: Mapping[str, Reservation]) -> int:
    return len(encode(entries))
