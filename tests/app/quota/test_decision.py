"""The quota decision without a control plane (app/quota/core/decision.py): its arithmetic case by case, and the
properties the protocol rests on, over generated ledgers (hypothesis)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.admission.ports import FITS, Verdict
from app.quota.core.decision import SHARE, Burst, Ruling, decide
from app.quota.core.encoding import LEDGER_ANNOTATION, MAX_LEDGER_BYTES, decode
from app.quota.core.entries import Ahead, LedgerEntry, Reserved, tag
from app.quota.core.scene import SLACK, WINDOW, Ask, Grant, Scene, Taken, account
from testbed import ROOT

pytestmark = pytest.mark.server  # its highest tier (tests/tiers.py checks it)

MEM, GPU = "nvidia.com/gpumem", "nvidia.com/gpu"
WALL, NOW, TTL = 1_700_000_000.0, 500.0, 60.0


def scene(limit: int = 10, used: int = 0, **changes: object) -> Scene:
    base = Scene("ai", {MEM: limit}, {}, 0, {MEM: used} if used else {}, {}, WALL, NOW, TTL)
    return replace(base, **changes)


def entry(memory: int, *, open: bool = False, expires: float = WALL + 30) -> LedgerEntry:
    return (Ahead if open else Reserved)(expires, {MEM: memory}, TTL)


def grant(uid: str, memory: int, spent: int, closing: bool = False) -> Grant:
    """One of this worker's grants: ``memory`` taken ahead, ``spent`` admitted into it."""
    return Grant(uid, {MEM: memory}, {MEM: spent}, NOW + WINDOW, 0, closing)


def ask(uid: str, memory: int, dry_run: bool = False) -> Ask:
    return Ask(uid, {MEM: memory}, dry_run)


def decided(at: Scene, *asks: Ask, rate: int = 0, ask: bool = True) -> Ruling:
    return decide(at, asks, wanted=0, ask=ask, burst=Burst(rate), new_id="new")


def run(at: Scene, *asks: Ask) -> tuple:  # type: ignore[type-arg]
    made = decided(at, *asks)
    write = made.write
    return made.verdicts, (dict(write.entries), write.mark, write.wanted, write.entry) if write else None


def full(used: int, requested: int, limit: int) -> Verdict:
    return Verdict(f"exceeding resource quota: namespace ai {MEM} used {used} + requested {requested} > limit {limit}")


TTL_ENTRY = Reserved(round(WALL + TTL, 1), {MEM: 4}, TTL)
PREVIOUS = Reserved(WALL - 1000, {MEM: 9})  # as the previous version wrote it (no ttl), long expired by WALL
SEEN = {"old": Taken({MEM: 3}, rv=42)}
RESERVED = Verdict(reservation="u")  # in the entry the write adds, once it is stored
CASES = {
    "room: reserved alone under its uid": (scene(), [ask("u", 4)], ((RESERVED,), ({"u": TTL_ENTRY}, 0, 0, "u"))),
    "equal fits": (scene(used=6), [ask("u", 4)], ((RESERVED,), ({"u": TTL_ENTRY}, 0, 0, "u"))),
    "no room: denied, nothing written": (scene(used=7), [ask("u", 4)], ((full(7, 4, 10),), None)),
    "in order: the second does not fit beside the first": (
        scene(used=2),
        [ask("a", 4), ask("b", 5)],
        ((Verdict(reservation="a"), full(6, 5, 10)), ({"a": TTL_ENTRY}, 0, 0, "a")),
    ),
    "a dry run checks, reserves nothing": (scene(), [ask("u", 4, dry_run=True)], ((FITS,), None)),
    "sent again: its entry is its reservation": (
        scene(entries={"u": entry(4)}),
        [ask("u", 4)],
        ((Verdict(reservation="u"),), None),
    ),
    "an entry counts beyond what its Pods were seen to take": (
        scene(used=3, entries={"old": entry(5)}, taken=SEEN),
        [ask("u", 6)],
        ((full(5, 6, 10),), None),
    ),
    "an entry a TTL after its first sight here counts nothing, and is pruned by the write": (
        scene(entries={"old": entry(9)}, first_seen={"old": NOW - TTL}),
        [ask("u", 4)],
        ((RESERVED,), ({"u": TTL_ENTRY}, 0, 0, "u")),
    ),
    "an entry holds room for its TTL from first sight here, whatever its writer's wall clock says": (
        scene(entries={"old": entry(9, expires=WALL - 1000)}, first_seen={"old": NOW - TTL + 1}),
        [ask("u", 4)],
        ((full(9, 4, 10),), None),
    ),
    "the previous version's entry (no ttl) holds room for the TTL and a window from first sight here": (
        scene(entries={"old": PREVIOUS}, first_seen={"old": NOW - TTL}),
        [ask("u", 4)],
        ((full(9, 4, 10),), None),
    ),
    "the previous version's entry past the TTL and a window from first sight here counts nothing": (
        scene(entries={"old": PREVIOUS}, first_seen={"old": NOW - TTL - WINDOW}),
        [ask("u", 4)],
        ((RESERVED,), ({"u": TTL_ENTRY}, 0, 0, "u")),
    ),
    "an entry whose Pods took all its room is dropped, the mark moves to them": (
        scene(used=3, entries={"old": entry(3)}, taken=SEEN),
        [ask("u", 4)],
        ((RESERVED,), ({"u": TTL_ENTRY}, 42, 0, "u")),
    ),
    "another worker's fresh grant: not certain, so undecided, and the holders are asked": (
        scene(entries={"g": entry(8, open=True)}),
        [ask("u", 4)],
        ((None,), ({"g": entry(8, open=True)}, 0, 1, "")),
    ),
    "another worker's grant past its window: certain, so denied": (
        scene(entries={"g": entry(8, open=True)}, first_seen={"g": NOW - WINDOW - SLACK}),
        [ask("u", 4)],
        ((full(8, 4, 10),), None),
    ),
    "a grant that cannot help does not hold up a denial": (
        scene(used=8, entries={"g": entry(1, open=True)}),
        [ask("u", 4)],
        ((full(8, 4, 10),), None),
    ),
    "this worker's closing grant is cut to what went into it": (
        scene(entries={"g": entry(8, open=True)}, mine={"g": grant("g", 8, spent=2, closing=True)}),
        [ask("u", 4)],
        ((RESERVED,), ({"g": Reserved(WALL + 30, {MEM: 2}, TTL), "u": TTL_ENTRY}, 0, 0, "u")),
    ),
    "a request outside the limited resources fits": (scene(), [Ask("u", {GPU: 1})], ((FITS,), None)),
}


@pytest.mark.parametrize(("at", "asks", "expected"), CASES.values(), ids=CASES.keys())
def test_decision(at: Scene, asks: list[Ask], expected: tuple) -> None:  # type: ignore[type-arg]
    assert run(at, *asks) == expected


def test_a_burst_takes_room_ahead_at_most_a_share_of_what_is_left() -> None:
    made = decide(
        scene(limit=1000, used=200), [ask("a", 1), ask("b", 1)], wanted=0, ask=True, burst=Burst(3), new_id="g"
    )
    assert made.verdicts == (Verdict(reservation="g"),) * 2 and made.reserved == (0, 1) and made.write is not None
    written = made.write.entries["g"]
    assert made.write.entry == "g" and isinstance(written, Ahead) and written.ttl == TTL + WINDOW
    assert made.write.ahead == {MEM: 16}  # 8 batches of 2; well under (1000 - 202) / 4
    tight = decide(scene(limit=30, used=2), [ask("a", 1), ask("b", 1)], wanted=0, ask=True, burst=Burst(3), new_id="g")
    assert tight.write is not None and tight.write.ahead == {MEM: (30 - 4) // SHARE}


def test_a_full_ledger_refuses_the_batch() -> None:
    crowded = {f"e{i:05}": entry(1) for i in range(MAX_LEDGER_BYTES // 40)}
    made = decided(scene(limit=10**9, entries=crowded), ask("u", 1))
    assert made.full == (0,) and made.reserved == () and made.verdicts == (None,)


# --- a rolling upgrade: the previous version wrote ``expires`` only, and judged entries by it on its wall clock ----
PREVIOUS_TEXT = json.dumps(
    {"u": {"expires": WALL + TTL, "amounts": {MEM: 4}}, "g": {"expires": WALL + 61, "amounts": {MEM: 3}, "open": True}}
)


def test_the_previous_versions_entries_hold_room_for_this_workers_ttl_from_first_sight() -> None:
    """Entries without a ``ttl`` live this worker's TTL and a window (the longest it writes) from first sight
    here; their ``expires`` is not read, so a wall clock an hour off changes nothing."""
    lease = {"metadata": {"resourceVersion": "7", "annotations": {LEDGER_ANNOTATION: PREVIOUS_TEXT}}}
    found = decode("ai", lease).entries
    assert found == {"u": Reserved(WALL + TTL, {MEM: 4}), "g": Ahead(WALL + 61, {MEM: 3})}
    for wall in (WALL - 3600, WALL + 3600):
        at = scene(entries=found, wall=wall, first_seen=dict.fromkeys(found, NOW - TTL - WINDOW + 0.1))
        assert set(account(at).live) == {"u", "g"} and account(at).upper == {MEM: 7}
        assert account(replace(at, first_seen=dict.fromkeys(found, NOW - TTL - WINDOW))).live == {}


def test_what_this_version_writes_reads_as_before_for_the_previous_version() -> None:
    """Its readers keep an entry while ``expires`` (float unix seconds) is ahead of their wall clock, and count
    ``amounts`` (and ``open``) as before; the new ``ttl`` and ``uids`` they ignore. Each entry written carries them,
    ``expires`` being the writer's wall clock plus the entry's life, as the previous version wrote it."""
    lone = decided(scene(), ask("u", 4)).write
    grant = decided(scene(limit=1000), ask("a", 1), ask("b", 1), rate=3).write
    assert lone is not None and grant is not None
    assert json.loads(lone.text()) == {"u": {"ttl": TTL, "expires": WALL + TTL, "amounts": {MEM: 4}}}
    assert json.loads(grant.text()) == {
        "new": {
            "ttl": TTL + WINDOW,
            "expires": WALL + TTL + WINDOW,
            "amounts": {MEM: 2 + 16},
            "open": True,
            "uids": tag("a") + tag("b"),
        }
    }


# --- properties ---------------------------------------------------------------------------------

amount = st.integers(0, 6)
entries = st.dictionaries(
    st.sampled_from([f"e{i}" for i in range(8)]),
    st.builds(
        lambda m, o, previous: replace(entry(m, open=o), ttl=None if previous else TTL),
        amount,
        st.booleans(),
        st.booleans(),
    ),
    max_size=6,
)
asks = st.lists(
    st.builds(lambda i, m, d: ask(f"a{i}", m, d), st.integers(0, 99), st.integers(1, 5), st.booleans()), max_size=6
)


@st.composite
def scenes(draw: st.DrawFn) -> Scene:
    found = draw(entries)
    seen = {
        i: Taken({MEM: draw(st.integers(0, e.amounts[MEM]))}, draw(st.integers(0, 99)))
        for i, e in found.items()
        if draw(st.booleans())
    }
    used = sum(h.amounts[MEM] for h in seen.values()) + draw(amount)
    first_seen = {i: NOW - draw(st.sampled_from([0.0, WINDOW + SLACK, TTL, TTL + WINDOW])) for i in found}
    mine = {
        i: grant(i, e.amounts[MEM], draw(st.integers(0, e.amounts[MEM])), draw(st.booleans()))
        for i, e in found.items()
        if isinstance(e, Ahead) and draw(st.booleans())
    }
    return scene(limit=draw(st.integers(0, 30)), used=used, entries=found, taken=seen, first_seen=first_seen, mine=mine)


@given(scenes(), asks, st.integers(0, 20))
@settings(max_examples=400, deadline=None)
def test_never_more_than_the_limit(at: Scene, batch: list[Ask], rate: int) -> None:
    """What a write reserves, room taken ahead included, fits beside everything counted as possibly taken."""
    made = decided(at, *batch, rate=rate)
    if made.reserved:
        assert made.write is not None and made.account is not None
        taken = sum(batch[i].requested[MEM] for i in made.reserved) + made.write.ahead.get(MEM, 0)
        assert possibly_taken(at) + taken <= at.limits[MEM]


def possibly_taken(at: Scene) -> int:
    """The rule restated on its own: the Pods seen, plus each live entry's room beyond what its Pods took (this
    worker's closing grants at what went into them; every other entry, open or not, at its amounts)."""
    total = at.used.get(MEM, 0)
    for entry_id, found in at.entries.items():
        if at.now < at.first_seen.get(entry_id, at.now) + (TTL + WINDOW if found.ttl is None else found.ttl):
            grant = at.mine.get(entry_id)
            room = grant.spent if grant is not None and grant.closing else found.amounts
            taken = at.taken.get(entry_id)
            total += max(room[MEM] - (taken.amounts[MEM] if taken is not None else 0), 0)
    return total


@given(scenes(), entries, st.integers(1, 5))
@settings(max_examples=400, deadline=None)
def test_a_denial_from_an_older_ledger_is_still_right(older: Scene, written: dict, memory: int) -> None:  # type: ignore[type-arg]
    """The newer ledger adds entries and drops only those whose Pods are seen: it denies what the older denied."""
    newer = replace(older, entries={**account(older).keep, **{f"n{i}": e for i, e in written.items()}})
    verdict = decided(older, ask("u", memory), ask=False).verdicts[0]
    if verdict is not None and verdict.denial:
        again = decided(newer, ask("u", memory), ask=False).verdicts[0]
        assert again is not None and again.denial


@given(scenes())
@settings(max_examples=400, deadline=None)
def test_dropping_an_entry_never_frees_room(at: Scene) -> None:
    """The entries a write drops are counted through their Pods instead: what is taken stays the same."""
    counted = account(at)
    still_open = {i: grant for i, grant in at.mine.items() if not grant.closing}  # the write closes the others
    kept = account(replace(at, entries=dict(counted.keep), mine=still_open))
    assert nonzero(kept.lower) == nonzero(counted.lower) and nonzero(kept.upper) == nonzero(counted.upper)


def nonzero(amounts: Mapping[str, int]) -> dict[str, int]:
    return {name: amount for name, amount in amounts.items() if amount}


def test_the_decision_loads_no_kubernetes_client() -> None:
    """The pure decision is pure in its imports too: cheap to load, and nothing in it can reach the API server."""
    probe = "import sys, app.quota.core.decision; print(sorted(m for m in sys.modules if m.split('.')[0] in BANNED))"
    banned = "BANNED = {'kubernetes', 'urllib3', 'app.kube'}; "
    done = subprocess.run([sys.executable, "-c", banned + probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_no_quota_class_shares_a_name_with_another_class() -> None:
    """A name means one thing across the product: app/quota's classes collide with none in app/ or certgen/."""
    classes: dict[str, list[str]] = {}
    for path in [*Path(ROOT, "app").rglob("*.py"), *Path(ROOT, "certgen").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    shared = {name: where for name, where in classes.items() if len(where) > 1 and any("quota" in w for w in where)}
    assert shared == {}
