"""What the feed keeps of the ledger Leases (app/quota/feed/tables.py's LedgerTable): the newest ledger per namespace,
and when this process first saw each entry, on its own clock: what an entry's life counts from
(docs/rules.md#no-clock-but-its-own)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from app.quota.core.encoding import LEDGER_ANNOTATION, LEDGER_PREFIX
from app.quota.feed.tables import LedgerTable


def lease(rv: int, *ids: str, namespace: str = "ai") -> dict[str, Any]:
    entries = {i: {"ttl": 60.0, "expires": 0.0, "amounts": {"nvidia.com/gpumem": 1000}} for i in ids}
    meta = {"name": LEDGER_PREFIX + namespace, "resourceVersion": str(rv)}
    return {"metadata": meta | {"annotations": {LEDGER_ANNOTATION: json.dumps(entries)}}}


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


def test_what_the_first_list_finds_counts_as_new_and_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    table = LedgerTable(lambda: 7.0)
    with caplog.at_level(logging.INFO, logger="hami_webhook.quota"):
        table.replace([lease(5, "a", "b"), lease(6, "c", namespace="ml")])
        table.replace([lease(7, "a", "b", "d")])
    assert table.first_seen("ai") == {"a": 7.0, "b": 7.0, "d": 7.0}
    said = [r.getMessage() for r in caplog.records if "found at start" in r.getMessage()]
    assert said == [
        "quota: 3 ledger entries found at start count as new: this process never saw them written, so their room "
        "is held for up to one TTL from now"
    ]
