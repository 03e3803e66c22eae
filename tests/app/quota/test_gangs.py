"""Gang holds in the pure decision (app/quota/core/decision.py), their ledger encoding, and how a Pod's gang is read
(app/quota/core/gang.py, app/quota/feed/groups.py): a gang's first member holds the whole gang's room or is refused,
later members take theirs from the hold, ordinary Pods never do, and a hold gives its unfilled room back."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

from app.admission.ports import FITS, Verdict
from app.quota.command import render
from app.quota.core.decision import BURST, Burst, Ruling, Write, decide
from app.quota.core.encoding import LEDGER_ANNOTATION, MAX_LEDGER_BYTES, decode, encode
from app.quota.core.entries import JOINERS, Held, Hold, LedgerEntry, Places, Reserved, tag
from app.quota.core.gang import Gang, group
from app.quota.core.scene import CAP, SLACK, WINDOW, Ask, Grant, Scene, Taken, View, account
from app.quota.core.standing import standing
from app.quota.feed.groups import GroupTable
from app.quota.feed.tables import LedgerTable
from app.quota.state import NamespaceState

GPU = "nvidia.com/gpu"
WALL, NOW, TTL, HOLD = 1_700_000_000.0, 500.0, 60.0, 300.0
TRAIN = Gang("scheduling.k8s.io/train", 4)
OTHER = Gang("scheduling.k8s.io/other", 4)


def scene(room: int = 6, used: int = 0, **changes: Any) -> Scene:
    base = Scene("ai", {GPU: room}, {}, 0, {GPU: used} if used else {}, {}, WALL, NOW, TTL, hold_ttl=HOLD)
    return replace(base, **changes)


def ask(uid: str, gpus: int = 1, gang: Gang | None = TRAIN, dry_run: bool = False) -> Ask:
    return Ask(uid, {GPU: gpus}, dry_run, gang)


def decided(at: Scene, *asks: Ask) -> Ruling:
    return decide(at, asks, wanted=0, ask=True, burst=Burst(), new_id="batch")


def hold(
    members: int, size: int = 4, each: int = 1, charged: int | None = None, key: str = TRAIN.key,
    joined: tuple[str, ...] = (),
) -> Held:  # fmt: skip
    """A hold as the ledger keeps it: ``members`` admitted of ``size`` (charged ``each`` unless said), ``joined``
    listing the members that joined it through the ledger."""
    charged = members * each if charged is None else charged
    amounts = {GPU: charged + (size - members) * each}
    return Held(round(WALL + HOLD, 1), amounts, HOLD, hold=Hold(key, size, members, {GPU: each}, joined))


def free(at: Scene) -> int:
    return at.limits[GPU] - account(at).upper.get(GPU, 0)


def test_the_first_member_holds_the_whole_gang() -> None:
    made = decided(scene(), ask("w0"))
    assert made.verdicts == (Verdict(reservation="w0"),)
    assert made.write is not None and dict(made.write.entries) == {"w0": hold(1)}
    assert free(scene(entries=made.write.entries)) == 2


def test_a_gang_that_does_not_fit_is_refused_on_its_first_member_with_its_figures() -> None:
    made = decided(scene(entries={"w0": hold(1)}), ask("o0", gang=OTHER))
    assert made.verdicts == (
        Verdict(
            "exceeding resource quota: namespace ai nvidia.com/gpu: gang scheduling.k8s.io/other of 4 Pods "
            "needs 4 for 4 Pods together, 2 free of limit 6 (each Pod not seen yet counted as large as this one)",
            gang=True,  # counted as the gang's denial (the metric's cause)
        ),
    )
    assert made.write is None


def test_two_gangs_in_one_batch_one_holds_the_other_is_refused() -> None:
    made = decided(scene(), ask("w0"), ask("o0", gang=OTHER), ask("w1"), ask("o1", gang=OTHER))
    assert [bool(v and v.denial) for v in made.verdicts] == [False, True, False, True]
    assert made.verdicts[2] == Verdict(reservation="w0")
    # two members at once are a burst: the worker takes the two places left into a grant of its own
    written = {"w0": placed(hold(2, joined=(tag("w1"),)), 2), "batch-gang": places(2)}
    assert made.write is not None and dict(made.write.entries) == written


def placed(entry: Held, count: int) -> Held:
    """``entry``, a hold, after ``count`` of its places went into a grant."""
    members = replace(entry.hold, members=entry.hold.members + count)
    return replace(entry, amounts={GPU: entry.amounts[GPU] - count * entry.hold.each[GPU]}, hold=members)


def places(count: int, key: str = TRAIN.key) -> Places:
    """A grant of ``count`` places of gang ``key``'s hold, as the ledger keeps it."""
    return Places(round(WALL + TTL + WINDOW, 1), {GPU: count}, TTL + WINDOW, gang=key)


def test_in_a_burst_no_places_go_into_a_grant_where_it_would_outgrow_the_lease() -> None:
    """A grant of places is one entry more: in a ledger with room for the join but not for that entry, the member
    joins the hold and no places move; with a few entries fewer, they do."""
    crowded: dict[str, LedgerEntry] = {"w0": hold(1, size=40)}
    while MAX_LEDGER_BYTES - len(encode(crowded)) >= 110:  # each entry ~74 bytes: it stops 36-110 bytes short
        crowded[f"p{len(crowded):05}"] = Reserved(WALL, {GPU: 1}, TTL)
    for entries, moved in ((crowded, False), (dict(list(crowded.items())[:-4]), True)):
        made = decide(
            scene(room=10**6, entries=entries), [ask("w1")], wanted=0, ask=True, burst=Burst(BURST), new_id="b"
        )
        assert made.verdicts == (Verdict(reservation="w0"),) and made.write is not None
        assert (made.write.places > 0, "b-gang" in made.write.entries) == (moved, moved)
        assert len(made.write.text()) <= MAX_LEDGER_BYTES


def test_in_a_burst_a_worker_takes_places_of_the_hold_into_a_grant_and_no_free_room() -> None:
    at = scene(entries={"w0": hold(1)})
    made = decide(at, [ask("w1")], wanted=0, ask=True, burst=Burst(rate=BURST), new_id="b")
    assert made.verdicts == (Verdict(reservation="w0"),)
    written = {"w0": placed(hold(2, joined=(tag("w1"),)), 2), "b-gang": places(2)}
    assert made.write is not None and dict(made.write.entries) == written
    assert (made.write.hold, made.write.places, made.write.gang_grant, made.write.joined) == (
        "w0",
        2,
        "b-gang",
        (tag("w1"),),
    )
    assert free(at) == free(scene(entries=made.write.entries)) == 2  # the gang's own room, moved


def test_members_go_into_a_gang_grant_one_place_each_and_nobody_else() -> None:
    state = NamespaceState()
    write = Write({"w0": placed(hold(2), 2), "g": places(2)}, 0, 0, places=2, hold="w0", gang_grant="g")
    state.written(write, [], sent=NOW, now=NOW)
    assert state.alone(ask("a", gang=None), NOW) is None  # an ordinary Pod: not its room
    assert state.alone(ask("o", gang=OTHER), NOW) is None  # another gang's member
    assert state.alone(ask("big", gpus=2), NOW) is None  # bigger than a place: the ledger charges the difference
    assert state.alone(ask("w2"), NOW) == state.alone(ask("w3"), NOW) == Verdict(reservation="g")
    assert state.alone(ask("w4"), NOW) is None  # no place left: beyond the gang's size
    assert state.alone(ask("w2"), NOW) == Verdict(reservation="g")  # the same request again
    late = NamespaceState()
    late.written(write, [], sent=NOW, now=NOW)
    assert late.alone(ask("w2"), NOW + WINDOW) is None  # its window has ended


def test_a_gang_grant_whose_places_went_to_smaller_members_is_still_written_down() -> None:
    grant = Grant("g", {GPU: 4}, {GPU: 2}, NOW, 0, gang=TRAIN.key, hold="w0", slots=2, count=2)
    assert grant.unused()  # every place taken, half its room not: closing it writes that room down
    assert not replace(grant, spent={GPU: 4}).unused()


def test_closing_a_gang_grant_gives_its_unused_places_back_and_counts_them_at_once() -> None:
    grant = Grant("g", {GPU: 2}, {GPU: 1}, NOW, 0, closing=True, gang=TRAIN.key, hold="w0", slots=2, count=1)
    at = scene(entries={"w0": placed(hold(2), 2), "g": places(2)}, mine={"g": grant})
    counted = account(at)
    assert counted.keep == {"w0": placed(hold(2), 1), "g": Reserved(places(2).expires, {GPU: 1}, TTL + WINDOW)}
    assert counted.upper == counted.lower == {GPU: 4}  # two members, one place given back, one still open
    made = decided(at, ask("a", gpus=3, gang=None))
    assert made.verdicts[0] is not None and made.verdicts[0].denial  # the place given back is not free room
    # that write landed but its answer was lost: decided again on the ledger re-read, nothing is given back twice
    again = scene(entries=dict(counted.keep), mine={"g": grant})
    assert account(again).keep == counted.keep


def test_a_member_waits_while_another_worker_s_grant_may_give_places_back() -> None:
    entries = {"w0": placed(hold(2), 2), "g": places(2)}
    waits = decided(scene(entries=entries, first_seen={"g": NOW}), ask("w4"))
    assert waits.undecided == (0,) and waits.write is not None and waits.write.wanted == 1  # asks for them
    late = {"g": NOW - WINDOW - SLACK}  # it admits no more; its worker's closing write may still be on its way
    assert decided(scene(entries=entries, first_seen=late), ask("w4")).undecided == (0,)
    certain = {"g": NOW - 2 * WINDOW - SLACK}  # a window more, and no place came back: the member is charged alone
    alone = decided(scene(entries=entries, first_seen=certain), ask("w4"))
    assert alone.verdicts == (Verdict(reservation="w4"),)
    assert alone.write is not None and not isinstance(alone.write.entries["w4"], Held)


def test_later_members_take_their_room_from_the_hold_and_ordinary_pods_never_do() -> None:
    at = scene(entries={"w0": hold(1)})
    made = decided(at, ask("a", gang=None), ask("b", gang=None), ask("c", gang=None), ask("w1"))
    assert made.verdicts[:2] == (Verdict(reservation="batch"), Verdict(reservation="batch"))
    assert made.verdicts[2] is not None and made.verdicts[2].denial  # the hold's room is not an ordinary Pod's
    assert not made.verdicts[2].gang
    assert made.verdicts[3] == Verdict(reservation="w0")
    assert made.write is not None and made.write.entries["w0"] == placed(hold(2, joined=(tag("w1"),)), 2)  # a burst


def test_a_member_bigger_than_the_first_is_charged_the_difference_from_free_room() -> None:
    at = scene(entries={"w0": hold(1)})
    made = decided(at, ask("w1", gpus=3))
    assert made.verdicts == (Verdict(reservation="w0"),)
    assert made.write is not None and made.write.entries["w0"] == hold(2, charged=4, joined=(tag("w1"),))
    assert free(scene(entries=made.write.entries)) == 0
    too_big = decided(at, ask("w1", gpus=4))
    assert too_big.verdicts[0] is not None and "requested 3 > limit 6" in too_big.verdicts[0].denial


def test_a_member_the_hold_lists_as_joined_gets_its_verdict_again_and_adds_nothing() -> None:
    """Decided again (its write's answer lost, or the request sent again to another replica): not a second place."""
    at = scene(entries={"w0": hold(2, joined=(tag("w1"),))})
    assert decided(at, ask("w1")) == Ruling((Verdict(reservation="w0"),), account=account(at))
    made = decided(at, ask("w2"))
    assert made.write is not None and made.write.entries["w0"] == hold(3, joined=(tag("w1"), tag("w2")))
    assert made.write.landed(at.entries, made.write.entries) and not made.write.landed(at.entries, at.entries)
    many = scene(room=40, entries={"w0": hold(2, size=40, joined=tuple(tag(f"j{i}") for i in range(JOINERS)))})
    listed = decided(many, ask("w2")).write
    assert listed is not None and isinstance(kept := listed.entries["w0"], Held)
    assert kept.hold.joined == (*(tag(f"j{i}") for i in range(1, JOINERS)), tag("w2"))  # the last ones


def test_members_beyond_the_size_are_charged_alone() -> None:
    made = decided(scene(entries={"w0": hold(4)}), ask("w4"))
    assert made.verdicts == (Verdict(reservation="w4"),)
    assert made.write is not None and not isinstance(made.write.entries["w4"], Held)


def test_a_member_that_replaces_a_lost_one_is_charged_alone() -> None:
    """Three of the four are there (the hold was filled and dropped): the fourth asks only its own room."""
    made = decided(scene(used=3, members={TRAIN.key: 3}), ask("w3"))
    assert made.verdicts == (Verdict(reservation="w3"),)
    assert made.write is not None and not isinstance(made.write.entries["w3"], Held)
    # all four lost (the job restarts): its first Pod holds for the whole gang again
    again = decided(scene(members={}), ask("r0"))
    assert again.write is not None and again.write.entries["r0"] == hold(1)


def test_a_hold_whose_group_is_gone_keeps_only_its_members_room() -> None:
    at = scene(entries={"w0": hold(2)}, gone=frozenset({TRAIN.key}))
    assert free(at) == 4
    made = decided(at, ask("a", gpus=4, gang=None))
    assert made.verdicts == (Verdict(reservation="a"),)
    released = Reserved(round(WALL + TTL, 1), {GPU: 2}, TTL)
    assert made.write is not None and made.write.entries["w0"] == released


def test_a_hold_s_places_live_from_its_last_member_s_pod_seen_a_join_renews_only_that_member_s_room() -> None:
    entries = {"w0": hold(2)}
    assert free(scene(entries=entries, first_seen={"w0": NOW - HOLD + 1})) == 2
    assert free(scene(entries=entries, first_seen={"w0": NOW - HOLD})) == 6  # no member since: gone
    member_seen = {"w0": Taken({GPU: 1}, rv=3, since=NOW - 1)}
    assert free(scene(entries=entries, first_seen={"w0": NOW - HOLD}, taken=member_seen, used=1)) == 2
    # a join seen (its member's Pod not yet): that member's room for a TTL from the sight, no places
    joined = scene(entries=entries, first_seen={"w0": NOW - HOLD}, renewed={"w0": NOW - TTL + 1})
    assert free(joined) == 4
    made = decided(joined, ask("a", gpus=4, gang=None))
    released = Reserved(round(WALL + TTL, 1), {GPU: 2}, TTL)  # written as its members' room only
    assert made.verdicts == (Verdict(reservation="a"),) and made.write is not None
    assert made.write.entries["w0"] == released
    # however often its members' Pods are seen, CAP lives from its first sight at most
    capped = scene(entries=entries, first_seen={"w0": NOW - CAP * HOLD}, taken=member_seen, used=1)
    assert free(capped) == 5  # its Pod seen only
    table = LedgerTable(clock=iter([0.0, 200.0, 400.0, 600.0]).__next__)
    for members, rv in ((1, 1), (2, 2), (2, 3)):
        table.offer(decode("ai", lease({"w0": hold(members)}, rv)))
        if rv == 2:
            assert table.renewed("ai") == {"w0": 200.0}  # a new member joined: seen here now
    assert (table.first_seen("ai"), table.renewed("ai")) == ({"w0": 0.0}, {"w0": 200.0})  # no new member: same
    table.offer(decode("ai", lease({"w0": hold(1)}, 4)))  # places a grant gave back: no member's arrival
    assert (table.first_seen("ai"), table.renewed("ai")) == ({"w0": 0.0}, {"w0": 200.0})


def test_a_hold_lasts_at_least_the_reservation_ttl() -> None:
    made = decided(scene(hold_ttl=5.0), ask("w0"))
    assert made.write is not None and made.write.entries["w0"].ttl == TTL


def test_the_hold_is_dropped_once_its_members_are_all_seen() -> None:
    taken = {"w0": Taken({GPU: 4}, rv=9)}
    counted = account(scene(entries={"w0": hold(4)}, used=4, taken=taken, members={TRAIN.key: 4}))
    assert counted.keep == {} and counted.mark == 9
    partly = account(scene(entries={"w0": hold(3)}, used=3, taken={"w0": Taken({GPU: 3}, rv=9)}))
    assert "w0" in partly.keep and partly.upper == {GPU: 4}


def test_a_dry_run_checks_the_whole_gang_and_writes_nothing() -> None:
    assert decided(scene(), ask("w0", dry_run=True)) == Ruling((FITS,), account=account(scene()))
    refused = decided(scene(used=3), ask("w0", dry_run=True))
    assert refused.verdicts[0] is not None and "needs 4 for 4 Pods together, 3 free" in refused.verdicts[0].denial


def test_a_hold_survives_the_ledger_encoding() -> None:
    entries = {"w0": hold(3, charged=5), "plain": Reserved(WALL, {GPU: 1}, TTL), "g": places(1)}
    assert decode("ai", lease(entries, 1)).entries == entries
    joined = {"w1": hold(3, joined=(tag("w2"), tag("w3")))}  # the previous version's readers read no "joined"
    assert decode("ai", lease(joined, 1)).entries == joined and f'"joined":"{tag("w2")}{tag("w3")}"' in encode(joined)
    assert '"joined"' not in encode(entries)
    for listed in (["w2"], "w2", tag("w2")[:-1], 7):  # no whole tags: the entry holds its room, listing nothing
        text = encode(joined).replace(f'"{tag("w2")}{tag("w3")}"', json.dumps(listed))
        assert decode("ai", {"metadata": {"annotations": {LEDGER_ANNOTATION: text}}}).entries == {
            "w1": hold(3, joined=())
        }
    broken = '{"w0": {"expires": 1, "amounts": {"g": 1}, "hold": {"group": "x"}}}'
    assert decode("ai", {"metadata": {"annotations": {LEDGER_ANNOTATION: broken}}}).entries == {}


def lease(entries: Mapping[str, LedgerEntry], rv: int) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": str(rv), "annotations": {LEDGER_ANNOTATION: encode(entries)}}}


def member(*, name: str = "", labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> Any:
    spec = {"schedulingGroup": {"podGroupName": name}} if name else {}
    return {"metadata": {"labels": labels or {}, "annotations": annotations or {}}, "spec": spec}


def podgroup(name: str, spec: dict[str, Any], namespace: str = "ai") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


WAYS = {
    "upstream": (member(name="t"), "scheduling.k8s.io", {"schedulingPolicy": {"gang": {"minCount": 4}}}),
    "coscheduling": (member(labels={"scheduling.x-k8s.io/pod-group": "t"}), "scheduling.x-k8s.io", {"minMember": 4}),
    "volcano": (member(annotations={"scheduling.k8s.io/group-name": "t"}), "scheduling.volcano.sh", {"minMember": 4}),
    "volcano's own key": (
        member(annotations={"scheduling.volcano.sh/group-name": "t"}),
        "scheduling.volcano.sh",
        {"minMember": 4},
    ),
}


@pytest.mark.parametrize("way", WAYS)
def test_each_way_of_declaring_a_group_gives_its_gang(way: str) -> None:
    pod, api, spec = WAYS[way]
    table = GroupTable()
    gang, why = table.gang("ai", pod)
    assert gang is None and why == f"pod group t: the {api} PodGroup API is not served here; the Pod is charged alone"
    table.replace(api, [])
    assert table.gang("ai", pod) == (None, f"pod group t ({api}) does not exist yet; the Pod is charged alone")
    table.apply(api, "ADDED", podgroup("t", spec, namespace="elsewhere"))
    assert table.gang("ai", pod)[0] is None
    table.apply(api, "ADDED", podgroup("t", spec))
    assert table.gang("ai", pod) == (Gang(f"{api}/t", 4), "")
    assert table.gone("ai", [f"{api}/t"]) == frozenset()
    being_deleted = podgroup("t", spec)
    being_deleted["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"  # a finalizer keeps it while Pods live
    table.apply(api, "MODIFIED", being_deleted)
    assert table.gone("ai", [f"{api}/t"]) == {f"{api}/t"}
    table.apply(api, "DELETED", being_deleted)
    assert table.gone("ai", [f"{api}/t"]) == {f"{api}/t"}


def test_kueue_declares_the_size_on_the_pod_and_a_basic_policy_is_no_gang() -> None:
    kueue = member(
        labels={"kueue.x-k8s.io/pod-group-name": "k"}, annotations={"kueue.x-k8s.io/pod-group-total-count": "3"}
    )
    table = GroupTable()
    assert table.gang("ai", kueue) == (Gang("kueue.x-k8s.io/k", 3), "")
    assert table.gone("ai", ["kueue.x-k8s.io/k"]) == frozenset()  # no object to lose: its hold expires
    table.replace("scheduling.k8s.io", [podgroup("b", {"schedulingPolicy": {"basic": {}}})])
    assert table.gang("ai", member(name="b")) == (None, "")
    assert group(member()) == "" and table.gang("ai", member()) == (None, "")


def test_the_standing_shows_room_held_for_gangs_per_group() -> None:
    ledger = decode("ai", lease({"w0": hold(1)}, 4))
    seen = View("ai", {GPU: 6}, ledger, {}, {GPU: 1}, {"w0": Taken({GPU: 1}, rv=3)}, 4)
    found = standing(seen, {"gpu": {GPU: 6}}, 1, now=NOW, ttl=TTL)
    assert [(f.used, f.held, f.gangs, f.free) for f in found.figures] == [(1, 3, 3, 2)]
    assert found.gangs == (Hold(TRAIN.key, 4, 1, {GPU: 1}),)
    assert render([found], "wide", wide_scope=False).splitlines()[1].split()[-2:] == ["3", f"{TRAIN.key}=1/4"]
    # two of its places in a worker's grant, one member seen in it: the room for the other still counts as the gang's
    granted = decode("ai", lease({"w0": placed(hold(1), 2), "g": places(2)}, 5))
    taken = {"w0": Taken({GPU: 1}, rv=3), "g": Taken({GPU: 1}, rv=5)}
    moved = standing(View("ai", {GPU: 6}, granted, {}, {GPU: 2}, taken, 5), {"gpu": {GPU: 6}}, 2, now=NOW, ttl=TTL)
    assert [(f.used, f.held, f.gangs, f.free) for f in moved.figures] == [(2, 2, 2, 2)]
