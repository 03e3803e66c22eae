"""The quota gauges: where each quota'd namespace stands, published on a thread of its own apart from any admission,
so a scrape reads what was published last and costs neither an API call nor the feed's lock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from app import metrics
from app.quota.core.standing import Standing

EVERY = 1.0  # seconds between refreshes of the quota gauges (published only when they changed)


def publish(standings: Callable[[float], list[Standing]], synced: threading.Event, stopping: threading.Event) -> None:
    """Until ``stopping``: every EVERY seconds, the ``standings`` at that moment (the feed's), once ``synced`` (a
    fresh worker publishes nothing rather than too little)."""
    last: list[Standing] | None = None
    while not stopping.wait(EVERY):
        if not synced.is_set():
            continue
        found = standings(time.monotonic())
        if found != last:
            rows = [
                (s.namespace, f.resource, f.quota, f.limit, f.used, f.held, f.gangs) for s in found for f in s.figures
            ]
            metrics.quota_standings(rows)
            last = found
