"""Gangs end to end through the real QuotaEvaluator, Committer, decision and feed tables of one or two workers, on
schedules chosen by hand against the simulation's model of the API server (tests/app/quota/simulation.py's Hand):
each test names the interleaving it reproduces, and the figure a user would see."""

from __future__ import annotations

from typing import Any

import pytest

from app.admission.ports import Verdict
from app.quota.core.decision import Burst, decide
from app.quota.core.encoding import LEDGER_ANNOTATION, LEDGER_PREFIX, decode, encode
from app.quota.core.entries import Held, Hold, LedgerEntry, Reserved, tag
from app.quota.core.gang import KUEUE_LABEL, KUEUE_TOTAL
from app.quota.core.scene import Ask, Scene, Taken, account
from app.quota.feed.tables import LedgerTable
from tests.app.quota.simulation import MEM, Hand

pytestmark = pytest.mark.server  # its highest tier (tests/tiers.py checks it)

NS, GPU = "ai", "nvidia.com/gpu"


def entry(result: Any) -> str:
    """The ledger entry an admitted Pod's seal names (app/quota/core/seal.py)."""
    return str(result.reservation).partition(".")[0]


def admitted(result: Any) -> bool:
    return isinstance(result, Verdict) and not result.denial


def denial(result: Any) -> str:
    return result.denial if isinstance(result, Verdict) else repr(result)


@pytest.mark.parametrize("count", ["\u00b2", "9" * 4299, "1234567", "-3"])
def test_a_kueue_total_count_that_is_no_short_count_refuses_its_pod_alone_with_one_line(count: str) -> None:
    """The count is the author's word: "²" passes str.isdigit and fails int(); 4299 digits made a figure Python will
    not print, which failed the whole batch, another user's Pod included. Now it refuses its own Pod, in one line."""
    hand = Hand(room=8)
    bomb = hand.obj("bomb", 1000, labels={KUEUE_LABEL: "k"}, annotations={KUEUE_TOTAL: count})
    results = hand.admit([bomb, hand.obj("victim", 1000)])
    assert admitted(results["victim"]), results
    shown = count if len(count) <= 12 else f"{count[:12]}..."
    assert denial(results["bomb"]) == (
        f"exceeding resource quota: namespace {NS} {KUEUE_TOTAL}: gang kueue.x-k8s.io/k: {shown!r} is not a count "
        "of at most 6 ASCII digits"
    )
    assert results["bomb"].gang and hand.stored() == 1000


def test_a_gang_of_mixed_sizes_is_refused_on_a_figure_that_says_it_counts_each_as_large_as_this_one() -> None:
    """A 2-Pod gang of 4000 + 1000 in room for 5000: its big member first holds 2 x 4000 and is refused, and the
    denial says why the figure is bigger than the gang; its small member first, both are admitted."""
    hand = Hand(room=5)
    hand.group("g", 2)
    big = hand.admit([hand.obj("big", 4000, group="g")])["big"]
    assert denial(big) == (
        f"exceeding resource quota: namespace {NS} nvidia.com/gpumem: gang scheduling.k8s.io/g of 2 Pods needs 8000 "
        "for 2 Pods together, 5000 free of limit 5000 (each Pod not seen yet counted as large as this one)"
    )
    small = hand.admit([hand.obj("small", 1000, group="g")])["small"]
    big = hand.admit([hand.obj("big", 4000, group="g")])["big"]
    assert admitted(small) and admitted(big) and hand.stored() == 5000


def test_a_replacement_member_takes_a_place_of_the_hold_and_the_last_member_is_charged_alone() -> None:
    """docs/rules.md said a member replacing a deleted one is charged alone; it takes a place of the hold while one is
    left, and the gang's last member is the one charged alone: the totals agree."""
    hand = Hand(room=4)
    hand.group("g", 4)
    for uid in ("m1", "m2"):
        hand.wait(1.1)  # one at a time: outside a burst, no places go into a grant
        hand.admit([hand.obj(uid, 1000, group="g")])
    hand.delete("m2")  # crashed; its controller makes m2b
    hand.wait(1.1)
    assert entry(hand.admit([hand.obj("m2b", 1000, group="g")])["m2b"]) == "m1"
    hand.wait(1.1)
    assert entry(hand.admit([hand.obj("m3", 1000, group="g")])["m3"]) == "m1"
    hand.wait(1.1)
    last = hand.admit([hand.obj("m4", 1000, group="g")])["m4"]
    assert entry(last) == "m4" and hand.stored() == 4000


def test_a_join_whose_answer_was_lost_is_recognised_on_the_re_read_and_joins_once() -> None:
    """The PUT that joins m2 into the hold is applied and its answer lost. The re-read finds m2 among the hold's
    joiners: the write landed. Before, a join added no entry, so the batch was decided again and m2 joined twice
    (and the lost round, counted as a burst, moved a place into a grant): the gang's last member was refused in
    room it fits exactly ("used 4000 + requested 1000 > limit 4000")."""
    hand = Hand(room=4)
    hand.group("g", 4)
    hand.admit([hand.obj("m1", 1000, group="g")])
    hand.wait(1.1)
    hand.sim.lose_next = 1
    assert entry(hand.admit([hand.obj("m2", 1000, group="g")])["m2"]) == "m1"
    hold = hand.ledger()["m1"]
    assert isinstance(hold, Held) and (hold.hold.members, hold.hold.joined) == (2, (tag("m2"),))
    for uid in ("m3", "m4"):
        hand.wait(1.1)
        assert admitted(hand.admit([hand.obj(uid, 1000, group="g")])[uid])
    assert hand.stored() == 4000


def test_a_join_the_api_server_sends_again_to_another_replica_joins_once() -> None:
    """The API server retries a call (the same request uid) that reached replica 0 at replica 1, which never saw it:
    the hold lists the uid, so the member gets its reservation again and takes no second place."""
    hand = Hand(room=4, workers=2)
    hand.group("g", 4)
    hand.admit([hand.obj("m1", 1000, group="g")])
    hand.wait(1.1)
    m2 = hand.obj("m2", 1000, group="g")
    assert entry(hand.admit([m2], worker=0, land=False)["m2"]) == "m1"
    again = hand.admit([m2], worker=1)["m2"]
    assert entry(again) == "m1" and not again.denial
    hold = hand.ledger()["m1"]
    assert isinstance(hold, Held) and hold.hold.members == 2


def test_a_hold_never_counts_its_finished_members_room_again() -> None:
    """Three members of four run and finish; a hold lives HAMI_QUOTA_GANG_HOLD (300 s) after its last member, while
    the feed forgot what a reservation's Pods took 60 s after they went: from then the hold counted their 3000
    again, and an empty namespace with room for 5000 refused 2000 ("used 4000 + requested 2000 > limit 5000")."""
    hand = Hand(room=5)
    hand.group("g", 4)
    hand.admit([hand.obj("y", 1000)])  # someone else's Pod
    for uid in ("m1", "m2", "m3"):
        hand.wait(1.1)
        hand.admit([hand.obj(uid, 1000, group="g")])
    for uid in ("m1", "m2", "m3"):
        hand.delete(uid)
    hand.wait(70.0)
    hand.delete("y")  # a removal: the feed sweeps what it forgets
    late = hand.admit([hand.obj("x", 3000)], land=False)["x"]
    assert admitted(late), late  # the hold's one unfilled place, 1000, is all it holds
    assert "used 4000" in denial(hand.admit([hand.obj("x2", 2000)], land=False)["x2"])  # x's 3000 + that place


def test_a_gang_run_again_under_its_group_is_held_again_in_a_quiet_namespace() -> None:
    """A filled hold is dropped by a write made while its Pods are seen; in a quiet namespace none is made. Its gang
    ran and finished; 65 s later the feed had forgotten its Pods, the hold counted 4000 full, and the gang's re-run
    under the same group was charged alone, its second member refused in an empty namespace."""
    hand = Hand(room=5)
    hand.group("g", 4)
    hand.admit([hand.obj("y", 1000)])  # someone else's Pod
    for uid in ("m1", "m2", "m3", "m4"):
        hand.wait(1.1)
        assert admitted(hand.admit([hand.obj(uid, 1000, group="g")])[uid])
    hand.wait(10.0)
    for uid in ("m1", "m2", "m3", "m4"):
        hand.delete(uid)
    hand.wait(65.0)
    hand.delete("y")  # a removal: the feed sweeps what it forgets
    runs = [hand.admit([hand.obj(f"r{i}", 1000, group="g")])[f"r{i}"] for i in (1, 2, 3, 4)]
    assert [entry(r) for r in runs] == ["r1"] * 4 and hand.stored() == 4000  # a hold of its own again


def test_a_relisted_worker_keeps_the_room_of_a_member_that_joined_while_its_watch_was_down() -> None:
    """Room for 4000, a gang of 3. m2 joins through worker 0 at t=299.9, near the end of the hold's life; worker 1's
    Lease watch was down and it lists again (410 Gone) at t=300.05. A relist compared nothing with the ledger seen
    before, so worker 1 never saw the join: at t=300.1 it found the hold expired, dropped it and admitted 3000
    while m2 was on its way, 5000 stored in room for 4000. Now the relist is a sight of the join: m2's room lives
    a TTL from it."""
    hand = Hand(room=4, workers=2)
    hand.group("g", 3)
    assert admitted(hand.admit([hand.obj("m1", 1000, group="g")], worker=0)["m1"])
    hand.wait(299.0)
    hand.paused.add((1, "leases"))  # worker 1's ledger watch is down
    hand.wait(0.9)
    m2 = hand.obj("m2", 1000, group="g")
    assert admitted(hand.admit([m2], worker=0, land=False)["m2"])
    hand.paused.discard((1, "leases"))
    hand.sim.workers[1].feed.relist(hand.sim.server, "leases")
    hand.paused.add((1, "pods"))  # m2 not stored yet: worker 1 sees it a moment later
    hand.sim.advance(0.1)
    x = hand.admit([hand.obj("x", 3000)], worker=1)["x"]
    assert (
        denial(x)
        == f"exceeding resource quota: namespace {NS} nvidia.com/gpumem used 2000 + requested 3000 > limit 4000"
    )
    hand.paused.discard((1, "pods"))
    hand.store(m2, "m1")
    assert admitted(hand.admit([hand.obj("m3", 1000, group="g")], worker=0)["m3"]) and hand.stored() == 3000


def test_one_pod_s_kueue_count_holds_the_namespace_no_longer_than_its_hold_and_members_must_agree() -> None:
    """A Kueue total count is its author's word: one Pod of 1 MiB declaring 8000 held the whole room, and every
    member admitted and never stored (a later admission stage refused it) renewed the hold's 300 s: after 1160 s,
    no Pod in the namespace and every other Pod refused. Now only a member's Pod seen renews the hold, a join holds
    just that member's room for a TTL, and a member declaring another size is refused."""
    hand = Hand(room=8)
    kueue = {KUEUE_LABEL: "k"}
    assert admitted(hand.admit([hand.obj("k1", 1, labels=kueue, annotations={KUEUE_TOTAL: "8000"})])["k1"])
    other = hand.admit([hand.obj("k2", 1, labels=kueue, annotations={KUEUE_TOTAL: "7"})])["k2"]
    assert denial(other) == (
        f"exceeding resource quota: namespace {NS} {KUEUE_TOTAL}: gang kueue.x-k8s.io/k holds room for 8000 Pods, "
        "this Pod says 7"
    )
    hand.delete("k1")
    hand.wait(290.0)
    assert "> limit 8000" in denial(hand.admit([hand.obj("v0", 1000)], land=False)["v0"])
    renew = hand.admit([hand.obj("r0", 1, labels=kueue, annotations={KUEUE_TOTAL: "8000"})], land=False)["r0"]
    assert admitted(renew)  # joined, never stored
    hand.wait(11.0)  # 301 s after k1 was seen: the places' life is over, r0's 1 MiB lives a TTL from its join
    assert admitted(hand.admit([hand.obj("v1", 7000)])["v1"])
    assert hand.stored() == 7000


def test_a_hold_released_by_its_group_s_deletion_is_a_new_sight_on_a_reader_that_skipped_the_join() -> None:
    """Version one: hold w0, one member. Two (t=250): w1 joins. Three (t=250.1): a worker that saw the PodGroup
    deleted writes the hold released (its members' room, an ordinary entry of a TTL). A reader that got three by a
    read before its watch brought two saw no join: the released entry lived 60 s from its first sight 250 s ago,
    expired at once, and w1's room, on its way, was counted nowhere: a fifth GPU into room for 4."""
    each, key = {GPU: 1}, "scheduling.k8s.io/g"
    one = {"w0": Held(0.0, {GPU: 4}, 300.0, hold=Hold(key, 4, 1, each))}
    two = {"w0": Held(0.0, {GPU: 4}, 300.0, hold=Hold(key, 4, 2, each, ("w1",)))}
    let_go = {"w0": Reserved(0.0, {GPU: 2}, 60.0)}
    now = [0.0]
    watched, skipped = LedgerTable(clock=lambda: now[0]), LedgerTable(clock=lambda: now[0])
    for table in (watched, skipped):
        table.apply("ADDED", lease(one, 1))
    now[0] = 250.0
    watched.apply("MODIFIED", lease(two, 2))
    now[0] = 250.1
    for table in (watched, skipped):
        table.offer(decode(NS, lease(let_go, 3)))
    skipped.apply("MODIFIED", lease(two, 2))  # the watch's older event, arriving late: ignored
    taken = {"w0": Taken({GPU: 1}, rv=5)}  # w0's Pod seen
    for table in (watched, skipped):
        found = table.get(NS)
        assert found is not None
        at = Scene(NS, {GPU: 4}, found.entries, 0, {GPU: 3}, taken, 1.7e9, 250.2, 60.0,
                   first_seen=table.first_seen(NS), hold_ttl=300.0, renewed=table.renewed(NS))  # fmt: skip
        assert account(at).upper == {GPU: 4}  # two others + w0 seen + w1 on its way
        made = decide(at, [Ask("x", {GPU: 1})], wanted=0, ask=True, burst=Burst(), new_id="b")
        assert made.verdicts == (
            Verdict("exceeding resource quota: namespace ai nvidia.com/gpu used 4 + requested 1 > limit 4"),
        )


def lease(entries: dict[str, LedgerEntry], rv: int) -> dict[str, Any]:
    meta = {
        "name": f"{LEDGER_PREFIX}{NS}",
        "resourceVersion": str(rv),
        "annotations": {LEDGER_ANNOTATION: encode(entries)},
    }
    return {"metadata": meta}


def test_a_gang_s_launcher_that_asks_for_no_device_is_a_member_and_holds_no_place() -> None:
    """1 CPU launcher + 3 workers of 2000 (a group of 4) in room for 6000. The launcher never reaches the webhook
    and did not count as a member: the first worker held 4 x 2000 and was refused on every try. Seen first, it fills
    its place; seen after the first worker, its place was already held at the worker's size, which the denial says."""
    hand = Hand(room=6)
    hand.group("mpi", 4)
    hand.store(hand.obj("launcher", 0, group="mpi", device=False))
    workers = [hand.admit([hand.obj(f"w{i}", 2000, group="mpi")])[f"w{i}"] for i in (1, 2, 3)]
    assert [entry(w) for w in workers] == ["w1"] * 3 and hand.stored() == 6000
    later = Hand(room=6)
    later.group("mpi", 4)
    refused = later.admit([later.obj("w1", 2000, group="mpi")])["w1"]
    assert denial(refused).endswith(
        "gang scheduling.k8s.io/mpi of 4 Pods needs 8000 for 4 Pods together, 6000 free of limit 6000 (each Pod not "
        "seen yet counted as large as this one)"
    )


def test_a_pod_of_a_batch_or_a_grant_the_api_server_sends_again_to_another_replica_is_charged_once() -> None:
    """The API server retries a call whose answer it lost (the same request uid) at another replica: an ordinary Pod
    reserved in a batch's entry, or admitted into a grant without a write and listed by its closing one, gets its
    room back, not a second charge (docs/rules.md#charged-once-per-pod)."""
    hand = Hand(room=40, workers=2)  # the batch's grant takes room for more Pods than go into it
    batch = hand.admit([hand.obj(f"b{i}", 1000) for i in range(3)], worker=0, land=False)  # a burst: one entry
    (written,) = {entry(v) for v in batch.values()}
    assert written not in batch and set(hand.ledger()[written].tags) == {tag("b0"), tag("b1"), tag("b2")}
    granted = hand.admit([hand.obj("g1", 1000)], worker=0, land=False)["g1"]  # into the batch's grant: no write
    assert entry(granted) == written
    hand.idle(0, 1.2)  # the grant's window ends; its closing write lists what went in
    assert tag("g1") in hand.ledger()[written].tags
    used = sum(e.amounts.get(MEM, 0) for e in hand.ledger().values())
    for uid in ("b1", "g1"):
        again = hand.admit([hand.obj(uid, 1000)], worker=1, land=False)[uid]
        assert entry(again) == written and not again.denial
    assert sum(e.amounts.get(MEM, 0) for e in hand.ledger().values()) == used
