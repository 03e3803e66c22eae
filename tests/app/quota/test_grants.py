"""Grants, through two real ports in one namespace (two workers, as two gunicorn workers or replicas are): room
a worker takes ahead in a burst and admits into without the API server, and how the other worker decides
meanwhile: it never counts on that room, and when only that room is left it asks for it and gets it; and a grant
of a gang's places, which the gang's members go into as ordinary Pods go into a grant."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY

from app.admission.review import QUOTA_RESERVATION_ANNOTATION
from app.quota.core.encoding import WANTED_ANNOTATION
from app.quota.core.gang import KUEUE_LABEL, KUEUE_TOTAL
from testbed.pods import container, pod
from testbed.polling import eventually
from testbed.reviews import Outcome, run
from tests.app.quota.conftest import GPU, MEM, Cluster

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)

ROOM = 100  # Pods of 1000 MiB


def admit(port: Any, settings: Any, cluster: Cluster, memory: int, uid: str) -> Outcome:
    return run(pod(container(limits={GPU: "1", MEM: str(memory)}), namespace=cluster.ns), settings, port, uid=uid)


def reservation(outcome: Outcome) -> str:
    """The ledger entry an admitted Pod's seal names."""
    assert outcome.response["allowed"], outcome.response
    sealed: str = outcome.patched["metadata"]["annotations"][QUOTA_RESERVATION_ANNOTATION]
    return sealed.partition(".")[0]


def writes(cluster: Cluster) -> int:
    return sum(r.split()[0] in ("PUT", "POST") for r in cluster.ledger_requests())


def written(outcome: str) -> float:
    return REGISTRY.get_sample_value("hami_webhook_quota_ledger_writes_total", {"outcome": outcome}) or 0.0


def test_a_burst_takes_room_ahead_and_admits_into_it_without_the_api(cluster: Cluster, start_quota) -> None:
    cluster.quota({f"limits.{MEM}": str(ROOM * 1000)})
    port, settings = start_quota()
    before = written("written")
    first = [reservation(admit(port, settings, cluster, 1000, f"u-{i}")) for i in range(4)]
    # The first three were reserved one by one, each under its request uid; the fourth came at a burst's rate
    # (4 a second), so its write took room ahead: an open entry with more than its own Pod's room.
    assert first[:3] == ["u-0", "u-1", "u-2"] and first[3] not in first[:3]
    grant = cluster.ledger()[first[3]]
    assert grant["open"] is True and grant["amounts"][MEM] > 1000
    assert written("written") - before == writes(cluster) == 4
    taken = [
        reservation(admit(port, settings, cluster, 1000, f"v-{i}")) for i in range(grant["amounts"][MEM] // 1000 - 1)
    ]
    assert set(taken) == {first[3]} and writes(cluster) == 4  # admitted into the grant: no request at all
    assert sum(e["amounts"][MEM] for e in cluster.ledger().values()) <= ROOM * 1000


def test_room_held_ahead_is_asked_for_and_handed_over_exactly(cluster: Cluster, start_quota) -> None:
    """Worker B needs exactly the room left, part of it held ahead by worker A: B does not count on it (that
    could admit over the limit), raises the ledger's wanted count, A closes its grant at what it admitted,
    and B takes the rest of the room: used equals the limit, and A's next Pod is denied."""
    cluster.quota({f"limits.{MEM}": str(ROOM * 1000)})
    a, settings = start_quota()
    b, _ = start_quota()
    held = [reservation(admit(a, settings, cluster, 1000, f"a-{i}")) for i in range(4)]
    assert cluster.ledger()[held[3]]["open"] is True
    rest = reservation(admit(b, settings, cluster, (ROOM - 4) * 1000, "b-rest"))
    lease = cluster.lease()
    assert lease is not None and int(lease["metadata"]["annotations"][WANTED_ANNOTATION]) >= 1
    entries = cluster.ledger()
    assert not any(e.get("open") for e in entries.values()), entries
    assert entries[held[3]]["amounts"][MEM] == 1000 and entries[rest]["amounts"][MEM] == (ROOM - 4) * 1000
    assert sum(e["amounts"][MEM] for e in entries.values()) == ROOM * 1000
    late = admit(a, settings, cluster, 1000, "a-late")
    assert late.denial() == (
        False,
        403,
        "GPUQuotaExceeded",
        f"exceeding resource quota: namespace {cluster.ns} {MEM} used {ROOM * 1000} + requested 1000 > limit "
        f"{ROOM * 1000}",
    )


def member(port: Any, settings: Any, cluster: Cluster, uid: str, size: int = 8) -> Outcome:
    """A member of Kueue plain-Pod group ``train`` (its size on the Pod: no group object to read)."""
    marks = {"labels": {KUEUE_LABEL: "train"}, "annotations": {KUEUE_TOTAL: str(size)}}
    obj = pod(container(limits={GPU: "1", MEM: "1000"}), namespace=cluster.ns, metadata=marks)
    return run(obj, settings, port, uid=uid)


def test_a_gang_s_members_go_into_a_grant_of_its_places_and_hand_the_rest_over(
    cluster: Cluster, start_quota
) -> None:  # fmt: skip
    """Worker A admits a gang's members at a burst's rate: its join takes the hold's last places into a grant of its
    own, and the next member goes into it without the API server. Worker B's member finds the hold full: it waits,
    asks, and A gives the places it did not use back to the hold, which B's member joins, once. If B's round lost a
    compare-and-swap meanwhile (A's grant closing as its window ends, or B's cached ledger behind: a loaded machine),
    that is a burst, and its join takes the hold's last places into a grant of B's: they are the gang's still."""
    cluster.quota({f"limits.{MEM}": str(ROOM * 1000)})
    a, settings = start_quota()
    b, _ = start_quota()
    first = [reservation(member(a, settings, cluster, f"a-{i}")) for i in range(4)]
    assert first == ["a-0"] * 4 and writes(cluster) == 4  # the first member's hold, three joins
    entries = cluster.ledger()
    grant = next(i for i, e in entries.items() if e.get("gang"))
    assert entries[grant]["open"] is True and entries[grant]["amounts"][MEM] == 4000  # the four places left
    assert entries["a-0"]["hold"]["members"] == 8 and entries["a-0"]["amounts"][MEM] == 4000
    assert reservation(member(a, settings, cluster, "a-4")) == grant and writes(cluster) == 4  # no request
    assert reservation(member(b, settings, cluster, "b-5")) == "a-0"  # after A gave three places back
    entries = cluster.ledger()
    assert entries[grant] == {**entries[grant], "amounts": {GPU: 1, MEM: 1000}} and not entries[grant].get("open")
    # the hold: a-0..a-3 and b-5 charged, two places to come, some perhaps in B's grant; with a-4 in A's closed
    # grant, the gang's 8 places
    placed = [e["amounts"][MEM] // 1000 for i, e in entries.items() if e.get("gang") and e.get("open")]
    assert entries["a-0"]["hold"]["members"] - sum(placed) == 6 and placed in ([], [2])
    assert entries["a-0"]["amounts"][MEM] + 1000 * sum(placed) == 7000
    assert sum(e["amounts"][MEM] for e in entries.values()) == 8000


def test_a_gang_grant_whose_write_lost_its_answer_is_still_this_worker_s(cluster: Cluster, start_quota) -> None:
    """The write that joins a member and takes places into a grant reaches the API server, but its answer is lost:
    the re-read shows the grant there, so the write landed and the member is admitted into the hold; the grant is
    this worker's, which closes it when its window has passed and gives its places back (a grant nobody owned would
    keep them, the member would wait, then be charged alone)."""
    cluster.quota({f"limits.{MEM}": str(ROOM * 1000)})
    a, settings = start_quota()
    assert [reservation(member(a, settings, cluster, f"a-{i}")) for i in range(3)] == ["a-0"] * 3
    before = len(cluster.ledger_requests())
    cluster.proxy.hold_next("PUT", f"/leases/{cluster.ledger_name}$", answer=True)
    assert reservation(member(a, settings, cluster, "a-3")) == "a-0"
    assert [r.split()[0] for r in cluster.ledger_requests()[before:]][:2] == ["PUT", "GET"]  # read again, not resent

    def given_back() -> bool:
        entries = cluster.ledger()
        return entries["a-0"]["hold"]["members"] == 4 and not any(e.get("open") for e in entries.values())

    eventually(given_back, timeout=5, what="the grant's four places back in the hold")
