"""What the feed keeps of the ledger Leases (app/quota/feed/tables.py's LedgerTable): the newest ledger per namespace,
and when this process first saw each entry, on its own clock: what an entry's life counts from
(docs/rules.md#no-clock-but-its-own)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from app.quota.core.demand import pod_amounts
from app.quota.core.encoding import LEDGER_ANNOTATION, LEDGER_PREFIX
from app.quota.core.seal import seal
from app.quota.feed.tables import LedgerTable, PodTable, say_found_at_start, say_uncounted
from app.settings import Settings

DEVICES = Settings.from_env({}).devices
KEY = "the namespace's ledger key"


def lease(rv: int, *ids: str, namespace: str = "ai") -> dict[str, Any]:
    entries = {i: {"ttl": 60.0, "expires": 0.0, "amounts": {"nvidia.com/gpumem": 1000}} for i in ids}
    meta = {"name": LEDGER_PREFIX + namespace, "resourceVersion": str(rv)}
    return {"metadata": meta | {"annotations": {LEDGER_ANNOTATION: json.dumps(entries)}}}


def gpu_pod(
    uid: str, reservation: str = "", *, memory: str = "1000", group: str = "", device: bool = True
) -> dict[str, Any]:  # fmt: skip
    """A stored Pod ``p-<uid>`` asking one GPU of ``memory`` MiB (none but CPU: ``device`` false), carrying
    ``reservation``, a member of PodGroup ``group``."""
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": memory} if device else {"cpu": "1"}
    meta: dict[str, Any] = {
        "uid": uid,
        "namespace": "ai",
        "name": f"p-{uid}",
        "resourceVersion": "3",
        "annotations": {},
    }
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"limits": limits}}]}
    if reservation:  # sealed as the webhook seals it, with KEY (app/quota/core/seal.py)
        asked = pod_amounts({"metadata": meta, "spec": spec}, DEVICES)
        meta["annotations"]["hami.io/quota-reservation"] = seal(KEY, "ai", reservation, uid, "", asked).text()
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {"metadata": meta, "spec": spec}


def test_an_entry_is_first_seen_when_a_ledger_holding_it_first_arrives() -> None:
    now = [100.0]
    table = LedgerTable(lambda: now[0])
    table.replace([lease(5, "a")])
    now[0] = 101.0
    table.apply("MODIFIED", lease(6, "a", "b"))
    now[0] = 102.0
    table.apply("MODIFIED", lease(4, "a", "b", "c"))  # older than the one held: not a sight of c
    assert table.first_seen("ai") == {"a": 100.0, "b": 101.0}
    table.replace([lease(7, "b")])  # listed again (410 Gone): a's gone, b's sight stands
    now[0] = 103.0
    table.apply("MODIFIED", lease(8, "a", "b"))  # an id back after it left counts from now
    assert table.first_seen("ai") == {"b": 101.0, "a": 103.0}
    table.apply("DELETED", lease(9))
    assert table.first_seen("ai") == {} and table.get("ai") is None


def test_what_the_first_list_finds_counts_as_new_and_is_returned_once(caplog: pytest.LogCaptureFixture) -> None:
    table = LedgerTable(lambda: 7.0)
    with caplog.at_level(logging.INFO, logger="hami_webhook.quota"):
        found = [
            table.replace([lease(5, "a", "b"), lease(6, "c", namespace="ml")]),
            table.replace([lease(7, "a", "b", "d")]),
        ]
        for each in found:
            say_found_at_start(each)
    assert found == [3, 0]
    assert table.first_seen("ai") == {"a": 7.0, "b": 7.0, "d": 7.0}
    said = [r.getMessage() for r in caplog.records if "found at start" in r.getMessage()]
    assert said == [
        "quota: 3 ledger entries found at start count as new: this process never saw them written, so their room "
        "is held for up to one TTL from now"
    ]


def test_a_pod_the_arithmetic_refuses_counts_nothing_and_is_returned_to_be_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The table logs nothing itself: the feed calls it under its lock and says what it returned after."""
    table = PodTable(Settings.from_env({}).devices, forget_after=60.0)

    with caplog.at_level(logging.DEBUG, logger="hami_webhook.quota"):
        listed = table.replace("ai", [gpu_pod("a", memory="1000"), gpu_pod("b", memory="1e400")])
        watched = table.apply("ADDED", gpu_pod("c", memory="x"))
        assert table.apply("ADDED", gpu_pod("d", memory="500")) is None
    assert caplog.records == []
    assert [(u.namespace, u.name) for u in listed] == [("ai", "p-b")] and "out of range" in listed[0].reason
    assert watched is not None and watched.name == "p-c" and "not a valid quantity" in watched.reason
    assert table.used("ai") == {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 1500} and table.count("ai") == 2
    with caplog.at_level(logging.WARNING, logger="hami_webhook.quota"):
        say_uncounted([*listed, watched])
    said = [r.getMessage() for r in caplog.records]
    assert [line.split(": ")[1] for line in said] == ["cannot count pod ai/p-b", "cannot count pod ai/p-c"]


def test_what_a_reservation_s_pods_took_is_forgotten_on_the_feed_s_own_clock() -> None:
    """The table forgets on the clock it is given (the Committer's: the simulation's simulated one), never on
    time.monotonic behind it: a schedule that runs minutes in milliseconds forgets as a server would."""
    now = [1000.0]
    table = PodTable(Settings.from_env({}).devices, forget_after=60.0, clock=lambda: now[0])
    table.key("ai", KEY)
    table.replace("ai", [gpu_pod("a", "r"), gpu_pod("b")])
    table.apply("DELETED", gpu_pod("a", "r"))
    now[0] += 59.9
    table.apply("DELETED", gpu_pod("b"))  # a removal sweeps what is due
    assert table.taken("ai", "r") is not None
    now[0] += 0.1
    table.apply("ADDED", gpu_pod("c"))
    table.apply("DELETED", gpu_pod("c"))
    assert table.taken("ai", "r") is None


def test_what_a_reservation_s_pods_took_is_kept_while_the_ledger_has_its_entry() -> None:
    """Forgotten while its entry lives (a gang's hold, minutes after its members went), the entry would hold their
    room again: kept while the ledger names it, forgotten a TTL after it left."""
    now, named = [0.0], {"r"}
    table = PodTable(Settings.from_env({}).devices, 60.0, lambda: now[0], lambda ns, r: r in named)
    table.key("ai", KEY)
    table.replace("ai", [gpu_pod("a", "r"), gpu_pod("b"), gpu_pod("c"), gpu_pod("d")])
    table.apply("DELETED", gpu_pod("a", "r"))
    for uid in ("b", "c"):  # removals sweep what is due
        now[0] += 61.0
        table.apply("DELETED", gpu_pod(uid))
        assert table.taken("ai", "r") is not None
    named.clear()  # a write dropped the entry
    now[0] += 61.0
    table.apply("DELETED", gpu_pod("d"))
    assert table.taken("ai", "r") is None


def test_a_gang_s_pods_that_ask_for_no_device_are_its_members_and_hold_no_quota() -> None:
    """An MPI launcher, a Ray head, a Spark driver: the group's size counts them, the webhook never sees them."""
    table = PodTable(Settings.from_env({}).devices, forget_after=60.0)
    table.replace("ai", [gpu_pod("w1", "w1", group="mpi"), gpu_pod("l", group="mpi", device=False)])
    table.apply("ADDED", gpu_pod("cpu", device=False))  # no group: nothing to count
    assert table.members("ai") == {"scheduling.k8s.io/mpi": 2}
    assert table.used("ai") == {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000} and table.count("ai") == 1
    table.apply("DELETED", gpu_pod("w1", "w1", group="mpi"))
    table.apply("MODIFIED", {**gpu_pod("l", group="mpi", device=False), "status": {"phase": "Succeeded"}})
    assert (table.members("ai"), table.used("ai"), table.count("ai")) == ({}, {}, 0)
