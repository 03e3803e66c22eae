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
from app.quota.core.amounts import Amounts, accumulate, beyond, plus, times
from app.quota.core.encoding import MAX_LEDGER_BYTES, encode
from app.quota.core.entries import Ahead, LedgerEntry, Reserved
from app.quota.core.hold import grant_places, join
from app.quota.core.limits import limited, overflow
from app.quota.core.scene import WINDOW, Account, Ask, Scene, account

BURST = 4  # admissions per second into one namespace, in one worker, from which it takes room ahead
# A grant takes at most 1/SHARE of the room left, and at least BATCHES_AHEAD batches like the one it is written
# with. Measured with one process per replica (3 replicas, 300-Pod bursts): 8 and 4 -> 4 and 8 cut ledger
# writes from 0.16 to 0.11 per Pod (lost compare-and-swaps 0.08 -> 0.04) and room-for-50's p99 from 1.49x to
# 1.10x the no-quota p99.
SHARE = 4
BATCHES_AHEAD = 8
AHEAD_MAX = 64  # Pods' worth of room taken ahead at most


@dataclass(frozen=True)
class Burst:
    """This worker's recent pace in the namespace, from which it sizes room taken ahead."""

    rate: int = 0  # admissions in the last second, before this batch
    contended: bool = False  # this batch lost a compare-and-swap already


@dataclass(frozen=True)
class Write:
    """The ledger to store with compare-and-swap."""

    entries: Mapping[str, LedgerEntry]
    mark: int
    wanted: int
    entry: str = ""  # the entry this write adds for the reserved asks ("" none)
    ahead: Amounts = field(default_factory=dict)  # room taken ahead in it: an open grant
    places: int = 0  # places of a gang's hold (``hold``) taken into a grant of this worker's (``gang_grant``)
    hold: str = ""
    gang_grant: str = ""
    joined: tuple[str, ...] = ()  # the requests (tags) this write lists in entries: joined into holds, or grown into
    encoded: str = ""  # ``entries`` encoded, when the decision had to encode them already (their size)

    def text(self) -> str:
        return self.encoded or encode(self.entries)

    def landed(self, before: Mapping[str, LedgerEntry], after: Mapping[str, LedgerEntry]) -> bool:
        """Whether ``after``, the ledger read once this write's answer was lost, holds it where ``before`` (the ledger
        it was decided on) did not: an entry it adds (its batch's, its gang grant), or a request it lists (a member
        joined into a hold, which lists its last joiners; a Pod reviewed again whose entry it grows). A write that
        lands twice would charge its asks twice."""
        if any(entry and entry not in before and entry in after for entry in (self.entry, self.gang_grant)):
            return True
        listed, listed_before = _listed(after), _listed(before)
        return any(tag in listed and tag not in listed_before for tag in self.joined)


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


def free(scene: Scene) -> dict[str, int]:
    """What is free for certain, per limited resource: the limit less what is taken *at most*, never below 0. A
    Pod within it is admitted without waiting on anyone's grant; the other bound (less what is taken at least)
    only says what may come free. The one FREE: the workload warning's, ``hami-webhook quota``'s and the
    gauges' (app/quota/core/standing.py counts the same ``upper``); docs/quota.md, "Looking at quota"."""
    return beyond(scene.limits, account(scene).upper)


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
    tags: tuple[str, ...] = ()
    if reserve:
        extra = ahead(scene.limits, plus(counted.upper, plus(taking, holding)), taking, len(reserve), burst)
        entry = asks[reserve[0]].uid if len(reserve) == 1 and not extra else new_id
        tags = () if entry == asks[reserve[0]].uid else tuple(asks[i].tag for i in reserve)
        # a Pod admitted into a grant as its window ends may appear a TTL later
        ttl = scene.ttl + (WINDOW if extra else 0)
        keep[entry] = (Ahead if extra else Reserved)(round(scene.wall + ttl, 1), plus(taking, extra), ttl, tags)
    before_places = dict(keep) if joined else keep
    hold, places, gang_grant = _places(scene, asks, joined, len(reserve), burst, keep, f"{new_id}-gang")
    text = encode(keep)  # once (as a rule): its size decides, and it is what the write sends
    if len(text) > MAX_LEDGER_BYTES and places:  # too big: no places into a grant of this worker's
        keep, (hold, places, gang_grant) = before_places, ("", 0, "")
        text = encode(keep)
    if len(text) > MAX_LEDGER_BYTES and extra:  # too big: take nothing ahead, then refuse the batch
        at = round(scene.wall + scene.ttl, 1)
        extra, keep[entry] = {}, Reserved(at, dict(taking), scene.ttl, tags)
        text = encode(keep)
    if len(text) > MAX_LEDGER_BYTES:
        full = tuple(sorted(reserve + joined))
        refused = tuple(None if i in full else v for i, v in enumerate(verdicts))
        return replace(decided, verdicts=refused, full=full, write=Write(dict(counted.keep), counted.mark, raised))
    for index in reserve:
        verdicts[index] = Verdict(reservation=entry)
    joins = tuple(asks[i].tag for i in joined)
    write = Write(keep, counted.mark, raised, entry, extra, places, hold, gang_grant, joins, text)
    return replace(decided, verdicts=tuple(verdicts), reserved=tuple(sorted(reserve + joined)), write=write)


def _places(
    scene: Scene, asks: Sequence[Ask], joined: list[int], others: int, burst: Burst, keep: dict[str, LedgerEntry],
    grant_id: str,
) -> tuple[str, int, str]:  # fmt: skip
    """In a burst, places of the first joining gang's hold taken into a grant of this worker's (app/quota/core/
    hold.py), as many as ``pace`` says: (its hold, the places, the grant's id), or ("", 0, ""). ``decide`` takes
    them back if the ledger would outgrow its Lease."""
    gang = next((asks[i].gang for i in joined if asks[i].gang is not None), None)
    if gang is None:
        return "", 0, ""
    members = sum(1 for i in joined if asks[i].gang == gang)
    most = pace(burst, others + len(joined), members)
    hold, places = grant_places(scene, keep, gang.key, most, grant_id) if most else ("", 0)
    return (hold, places, grant_id) if places else ("", 0, "")


def _each(
    scene: Scene, counted: Account, asks: Sequence[Ask], closing: set[str], keep: dict[str, LedgerEntry]
) -> tuple[list[Verdict | None], list[int], list[int], list[int], Amounts, Amounts]:  # fmt: skip
    """Each ask in order: its verdict, or reserved in the batch's entry (``reserve``, ``taking`` its room), or in an
    entry of ``keep`` (``joined``: its gang's hold, or the entry it grows; ``holding`` the room added), or
    undecided."""
    verdicts: list[Verdict | None] = [None] * len(asks)
    reserve: list[int] = []
    joined: list[int] = []
    undecided: list[int] = []
    taking: Amounts = {}
    holding: Amounts = {}
    admitted = {tag: i for i, e in counted.live.items() for tag in e.tags}
    for index, one in enumerate(asks):
        if one.uid in counted.live and one.uid not in closing:  # sent again: its entry is there already
            verdicts[index] = Verdict(reservation=one.uid)
            continue
        if one.tag in admitted:  # sent again to this worker, after another admitted it into a batch or grant
            verdicts[index] = Verdict(reservation=admitted[one.tag])
            continue
        both = plus(taking, holding)
        if one.gang and limited(scene.limits, one.requested):
            into = join(scene, counted, keep, both, one)
        else:
            into = grow(scene, counted, keep, both, one) if one.grows else None
        if into is not None:
            verdicts[index], taken = into
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


def grow(
    scene: Scene, counted: Account, keep: dict[str, LedgerEntry], taking: Amounts, one: Ask
) -> tuple[Verdict | None, Amounts] | None:  # fmt: skip
    """A Pod reviewed again with a larger demand than its first review charged: its verdict and the room its entry
    grows by (the difference), the entry written into ``keep`` listing the request; (None, {}) undecided. None: its
    entry is not a closed ordinary one any more (a grant's, a hold's, dropped or expired), so it is charged in full
    like any Pod, and its first charge's room is held until that entry expires."""
    entry = keep.get(one.grows)
    if not isinstance(entry, Reserved):
        return None
    more = beyond(one.requested, one.charged)
    verdict = _verdict(scene, counted, taking, replace(one, requested=more))
    if verdict is not None:
        return verdict, {}
    if overflow(scene.namespace, scene.limits, plus(counted.upper, taking), more):
        return None, {}
    keep[one.grows] = replace(entry, amounts=plus(entry.amounts, more), tags=(*entry.tags, one.tag))
    return Verdict(reservation=one.grows), more


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
    """Room to take ahead with a write, in a burst: ``pace``'s Pods shaped like this batch's, at most 1/SHARE of
    the room left."""
    pods = pace(burst, count, count)
    each = {name: math.ceil(amount / count) for name, amount in taking.items()}
    for name, amount in each.items():
        if name in limits and amount:
            pods = min(pods, max(limits[name] - taken.get(name, 0), 0) // SHARE // amount)
    return {name: amount for name, amount in times(each, pods).items() if amount}


def pace(burst: Burst, count: int, alike: int) -> int:
    """How many Pods to take room ahead for with a write of ``count`` admissions (``alike`` of them shaped like those
    the room is for), 0 outside a burst (several admissions at once, a recent rate of BURST or more, or a lost
    compare-and-swap): what the next WINDOW's admissions need at this worker's recent rate, and at least
    BATCHES_AHEAD batches like this one, AHEAD_MAX at most."""
    rate = burst.rate + count
    if rate < BURST and count < 2 and not burst.contended:
        return 0
    return min(max(math.ceil(rate * WINDOW), BATCHES_AHEAD * alike), AHEAD_MAX)


def _listed(entries: Mapping[str, LedgerEntry]) -> set[str]:
    """The requests (tags) ``entries`` list: what each admitted, and each hold's joiners."""
    return {tag for entry in entries.values() for tag in entry.listed()}
