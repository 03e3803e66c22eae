"""Only the webhook writes a reservation (docs/rules.md#only-the-webhook-writes-a-reservation): the seal it puts on a
Pod (app/quota/core/seal.py), and the feed counting a Pod against an entry only with a seal it verifies, each once
(app/quota/feed/tables.py's PodTable). The review's side of it, a Pod reviewed again, is in test_kube.py."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from app.admission.annotations import QUOTA_RESERVATION_ANNOTATION
from app.quota.core.demand import pod_amounts
from app.quota.core.encoding import KEY_ANNOTATION, LEDGER_ANNOTATION, LEDGER_PREFIX
from app.quota.core.seal import charged, parse, seal, vouched
from app.quota.feed.tables import LedgerTable, PodTable
from app.settings import Settings
from testbed.pods import container, pod

pytestmark = pytest.mark.unit

NS, KEY, MEM, GPU = "ai", "k" * 43, "nvidia.com/gpumem", "nvidia.com/gpu"
DEVICES = Settings.from_env({}).devices
ASKED = {MEM: 2000, GPU: 1}
WHO = "alice\x00train-0"


def test_a_seal_is_the_webhook_s_for_its_namespace_and_demand_only() -> None:
    made = seal(KEY, NS, "entry-1", "n1", WHO, ASKED)
    found = parse(made.text())
    assert found == made and found.entry == "entry-1"
    assert vouched(KEY, NS, found, ASKED)
    assert not vouched("another key", NS, found, ASKED)  # forged without the ledger's key
    assert not vouched(KEY, "other", found, ASKED)  # copied to another namespace
    assert not vouched(KEY, NS, found, {MEM: 4000, GPU: 1})  # onto a Pod asking more
    assert not vouched(KEY, NS, parse(made.text().replace("entry-1", "hold-9")), ASKED)  # pointed at another entry


def test_the_same_admission_is_bound_to_its_requester_and_pod_name_and_says_what_it_charged() -> None:
    made = seal(KEY, NS, "entry-1", "n1", WHO, ASKED)
    assert charged(KEY, NS, made, WHO) == ASKED
    assert charged(KEY, NS, made, "mallory\x00train-0") is None
    assert charged(KEY, NS, made, "alice\x00train-1") is None
    assert charged("another key", NS, made, WHO) is None
    more = seal(KEY, NS, "entry-1", "n1", WHO, {MEM: 8000, GPU: 1})  # a demand written by another admission
    assert charged(KEY, NS, replace(made, demand=more.demand), WHO) is None  # swapped in: the MAC fails
    assert vouched(KEY, NS, made, ASKED)  # the feed, which cannot know who created a Pod, checks the MAC alone


@pytest.mark.parametrize("text", ["entry-1", "", "a.b.c.d", "a..c.d.e", "a.b.c.d.e.f", "x" * 600 + ".b.c.d.e"])
def test_anything_else_is_no_seal(text: str) -> None:
    assert parse(text) is None


def stored(uid: str, memory: int, annotation: str | None = None) -> dict[str, Any]:
    obj = pod(container(limits={GPU: "1", MEM: str(memory)}), name=uid, namespace=NS)
    obj["metadata"] |= {"uid": uid, "resourceVersion": "10"}
    if annotation is not None:
        obj["metadata"]["annotations"] = {QUOTA_RESERVATION_ANNOTATION: annotation}
    return obj


def sealed(entry: str, nonce: str, memory: int) -> str:
    return seal(KEY, NS, entry, nonce, WHO, pod_amounts(stored("x", memory), DEVICES)).text()


def ledger(rv: int, key: str) -> dict[str, Any]:
    entries = {"e1": {"ttl": 60.0, "expires": 0.0, "amounts": {MEM: 4000}}}
    annotations = {LEDGER_ANNOTATION: json.dumps(entries), KEY_ANNOTATION: key}
    return {"metadata": {"name": LEDGER_PREFIX + NS, "resourceVersion": str(rv), "annotations": annotations}}


def test_the_feed_counts_a_pod_against_its_entry_only_with_a_seal_it_verifies() -> None:
    pods = PodTable(DEVICES, forget_after=60)
    pods.key(NS, KEY)
    pods.replace(
        NS,
        [
            stored("genuine", 2000, sealed("e1", "n1", 2000)),
            stored("bare-id", 2000, "e1"),  # what the previous version wrote, or an author
            stored("forged", 2000, sealed("e1", "n2", 2000).rsplit(".", 1)[0] + ".AAAAAAAAAAAAAAAAAAAAAA"),
            stored("bigger", 3000, sealed("e1", "n3", 2000)),  # a seal made for a smaller Pod
        ],
    )
    assert pods.used(NS) == {MEM: 9000, GPU: 4}  # every Pod counts as used
    taken = pods.taken(NS, "e1")
    assert taken is not None and taken.amounts == {MEM: 2000, GPU: 1} and taken.alive == 1


def test_a_copied_seal_counts_once_and_its_nonce_stays_counted_after_the_pod_went() -> None:
    pods = PodTable(DEVICES, forget_after=60)
    pods.key(NS, KEY)
    text = sealed("e1", "n1", 2000)
    pods.apply("ADDED", stored("genuine", 2000, text))
    pods.apply("ADDED", stored("copy", 2000, text))
    taken = pods.taken(NS, "e1")
    assert taken is not None and taken.amounts == {MEM: 2000, GPU: 1} and taken.alive == 1
    assert pods.consumed(NS, "e1", "n1") and not pods.consumed(NS, "e1", "n2")
    pods.apply("DELETED", stored("genuine", 2000, text))
    assert pods.consumed(NS, "e1", "n1")  # a review presenting it is of another Pod, while the entry may live


def test_pods_seen_before_their_namespace_s_key_are_counted_when_the_ledger_brings_it() -> None:
    pods = PodTable(DEVICES, forget_after=60)
    ledgers = LedgerTable(lambda: 0.0, on_key=pods.key)
    pods.apply("ADDED", stored("early", 2000, sealed("e1", "n1", 2000)))
    pods.apply("ADDED", stored("gone", 1000, sealed("e1", "n2", 1000)))
    pods.apply("DELETED", stored("gone", 1000, sealed("e1", "n2", 1000)))
    assert pods.taken(NS, "e1") is None  # no key yet: counted as used, the entry holds its room
    ledgers.replace([ledger(5, KEY)])
    taken = pods.taken(NS, "e1")  # the one gone before the key too: else its entry would hold its room again
    assert taken is not None and taken.amounts == {MEM: 3000, GPU: 2} and taken.alive == 1
    assert pods.used(NS) == {MEM: 2000, GPU: 1}
