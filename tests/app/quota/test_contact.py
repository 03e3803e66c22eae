"""The contact probe (app/quota/contact.py) on a clock the test moves, through its Clock port: how many unanswered
probes turn the API server lost, the replica unready and its connections shed, and what one answer brings back.
Counts of probes, not timings: the real-server tests (test_kube.py) show the same outcome against a black hole."""

from __future__ import annotations

import threading

from app.quota.contact import PROBE_EVERY, PROBE_TIMEOUT, Contact
from app.quota.ports import SystemClock


class Moved(SystemClock):
    """Time that passes only when the test (or a probe waiting out its timeout) moves it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class Network:
    """The probe's way to the API server: answered, or a black hole in which each probe waits out its timeout."""

    def __init__(self, clock: Moved) -> None:
        self.clock, self.cut, self.probes = clock, False, 0

    def probe(self, timeout: float) -> None:
        self.probes += 1
        if self.cut:
            self.clock.now += timeout
            raise TimeoutError("read timed out")


def paced(contact: Contact, clock: Moved) -> None:
    """One round of the probe's loop: a probe, then the rest of PROBE_EVERY."""
    sent = clock.monotonic()
    contact.check(sent)
    clock.now = max(clock.now, sent + PROBE_EVERY)


def test_the_second_unanswered_probe_steps_the_replica_aside_and_one_answer_brings_it_back() -> None:
    clock = Moved()
    network = Network(clock)
    regained: list[float] = []
    contact = Contact(network.probe, lambda: True, lambda: regained.append(clock.now), clock, threading.Event())
    paced(contact, clock)
    assert not contact.lost() and not contact.shedding.is_set()
    network.cut, network.probes = True, 0
    paced(contact, clock)  # its failure comes PROBE_EVERY + PROBE_TIMEOUT (2 s) after the last answer: not yet
    assert not contact.lost()
    paced(contact, clock)  # 3 s after it: past LOST_AFTER (2.5 s)
    assert network.probes == 2 and contact.shedding.is_set()
    assert contact.lost() == "the API server has not answered this replica for 3 s (TimeoutError: read timed out)"
    assert PROBE_TIMEOUT == PROBE_EVERY  # the counts above assume a probe waits out one pace
    network.cut = False
    paced(contact, clock)
    assert not contact.lost() and not contact.shedding.is_set()
    assert regained == [contact.regained_at] == [clock.now - PROBE_EVERY]  # the feed's streams woken once
