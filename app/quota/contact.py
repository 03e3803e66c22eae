"""Whether this process reaches the API server now, known within seconds: a small request every second.

A watch cut off by a black-holed network stays silent until its read timeout (a minute), and a ledger request
waits its own timeout: neither tells in time that this replica should step aside. While a namespace has a device
quota, the probe asks the API server for one ledger Lease every PROBE_EVERY seconds, with PROBE_TIMEOUT; once
none has been answered for LOST_AFTER seconds the API server counts as lost: /readyz turns unready, the worker
closes its kept-alive connections (app.readiness: ``shedding``), so the API server's pooled connections move to the
healthy replicas, and admissions into quota'd namespaces are refused at once saying why. When a probe is answered
again the feed's streams are woken from their back-off, and the replica is ready once each has been answered
since (QuotaEvaluator.status). With no device quota anywhere nothing is probed and nothing changes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from app.kube.errors import describe
from app.quota.ports import SYSTEM_CLOCK, Clock

PROBE_EVERY = 1.0  # seconds between probes
PROBE_TIMEOUT = 1.0  # seconds one probe waits for its answer
LOST_AFTER = 2.5  # seconds without an answer after which the API server counts as lost
log = logging.getLogger("hami_webhook.quota")


class Contact:
    """The probe's thread and what it found. ``probe(timeout)``: one request (raises when unanswered);
    ``in_play()``: a namespace has a device quota; ``lost(reason)`` and ``regained()``: called on each change."""

    def __init__(
        self,
        probe: Callable[[float], None],
        in_play: Callable[[], bool],
        regained: Callable[[], None],
        clock: Clock = SYSTEM_CLOCK,
        shedding: threading.Event | None = None,
    ) -> None:
        self._probe = probe
        self._in_play = in_play
        self._regained = regained
        self._clock = clock
        self._answered = clock.monotonic()  # when the last answered probe was sent
        self._failure = ""  # why the last probe failed
        self._lost = False
        self.regained_at = 0.0  # monotonic: when contact last came back (0: never lost)
        self.shedding = shedding or threading.Event()  # what tells the worker to let go of its connections
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="quota-contact", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self.shedding.clear()

    def lost(self) -> str:
        """Why the API server counts as lost ("" when it does not)."""
        if not self._lost:
            return ""
        silent = self._clock.monotonic() - self._answered
        return f"the API server has not answered this replica for {silent:.0f} s ({self._failure})"

    def _run(self) -> None:
        while not self._stopped.is_set():
            sent = self._clock.monotonic()
            if self._in_play():
                self.check(sent)
            else:
                self._answered = sent  # nothing depends on the API server now
                self._set(lost=False)
            self._stopped.wait(max(sent + PROBE_EVERY - self._clock.monotonic(), 0))

    def check(self, sent: float) -> None:
        """One probe, sent at ``sent``, and what it changes."""
        try:
            self._probe(PROBE_TIMEOUT)
        except Exception as exc:  # unanswered, refused, or an error status: no contact either way
            self._failure = describe(exc)
            self._set(lost=self._clock.monotonic() - self._answered > LOST_AFTER)
            return
        self._answered = sent
        self._set(lost=False)

    def _set(self, *, lost: bool) -> None:
        if lost == self._lost:
            return
        self._lost = lost
        if lost:
            self.shedding.set()
            log.warning("quota: %s; unready until it answers", self.lost())
            return
        self.shedding.clear()
        self.regained_at = self._clock.monotonic()
        log.info("quota: the API server answers again; ready once the feed has caught up")
        self._regained()
