"""The grant closer: a worker's grants close when their window ends, or when a worker that could not decide asks
for their room (the ledger's wanted count), so the room they did not use comes free for others.

LedgerQuota (app/quota/commit.py) owns one. Closing is a commit with no admissions of its own (``close``), made
as the namespace's committer like any other (never while another commit is in flight); an admission's commit
closes the due grants too (``due``). In the server a thread closes them; the protocol simulation
(tests/app/quota/simulation.py) calls ``close_due()``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from app.quota.seams import Clock, FeedView
from app.quota.state import Grant, NamespaceState

CLOSER_RETRY = 0.02  # seconds before the closer looks again at a grant it could not close yet


class GrantCloser:
    """Closes this worker's due grants. ``namespaces``: the worker's namespaces and their state, listed now;
    ``close``: commit the namespace's due grants (called without its lock); ``thread``: run a thread
    that closes them when due (the server), or leave that to whoever calls ``close_due()``."""

    def __init__(
        self,
        feed: FeedView,
        clock: Clock,
        namespaces: Callable[[], list[tuple[str, NamespaceState]]],
        close: Callable[[str, NamespaceState], None],
        *,
        thread: bool,
    ) -> None:
        self._feed = feed
        self._clock = clock
        self._namespaces = namespaces
        self._close = close
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._close_grants, name="quota-grant-closer", daemon=True)
        self._thread_wanted = thread

    def start(self) -> None:
        """Start the thread, once: called when a grant opens, so a worker that never takes room ahead has none."""
        if self._thread_wanted and not self._thread.is_alive() and not self._stopped.is_set():
            try:
                self._thread.start()
            except RuntimeError:  # started by another thread just now
                pass

    def stop(self) -> None:
        self._stopped.set()

    def due(self, namespace: str, grant: Grant) -> bool:
        """The grant must close now: its window has ended, or a worker that could not decide asked for its room."""
        if grant.closes_at <= self._clock.monotonic():
            return True
        found = self._feed.ledger(namespace)
        return found is not None and found.wanted > grant.wanted and grant.unused()

    def close_due(self) -> float:
        """Close the grants whose window ended or whose room was asked for, so the room they did not use comes
        free for others; the seconds until the next look."""
        soonest = 1.0
        for namespace, state in self._namespaces():
            with state.cond:
                if state.busy:  # a commit in flight closes them anyway; look again soon
                    soonest = min(soonest, CLOSER_RETRY)
                    continue
                due = any(self.due(namespace, g) for g in state.grants.values())
            if due:
                self._close(namespace, state)
            with state.cond:
                now = self._clock.monotonic()
                for grant in state.grants.values():  # left open (or a failed close: try again soon)
                    soonest = min(soonest, max(grant.closes_at - now, CLOSER_RETRY))
        return soonest

    def _close_grants(self) -> None:
        """The thread: wakes when a ledger changes, and at the next window's end."""
        while not self._stopped.is_set():
            self._feed.wait_ledgers(self.close_due())
