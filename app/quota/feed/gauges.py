"""The quota gauges: where each quota'd namespace stands, published on a thread of its own apart from any admission,
so a scrape reads what was published last and costs neither an API call nor the feed's lock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from app import metrics
from app.quota.core.standing import Standing

EVERY = 1.0  # seconds between refreshes of the quota gauges (published only when they changed)


def publish(
    standings: Callable[[float], list[Standing]], synced: Callable[[float], bool], stopping: threading.Event
) -> None:
    """Until ``stopping`` (the feed's streams stop): every EVERY seconds, the ``standings`` at that moment (the
    Feed's), once ``synced(0)`` (the Feed's wait_synced: a fresh worker publishes nothing rather than too little).
    app/quota/startup.py puts it on its thread, which QuotaEvaluator starts and joins."""
    last: list[Standing] | None = None
    while not stopping.wait(EVERY):
        if not synced(0):
            continue
        found = standings(time.monotonic())
        if found != last:
            rows = [
                (s.namespace, f.resource, f.quota, f.limit, f.used, f.held, f.gangs) for s in found for f in s.figures
            ]
            metrics.quota_standings(rows)
            last = found
