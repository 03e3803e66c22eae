"""app/kube/backoff.py: a retry policy as a value."""

from __future__ import annotations

from app.kube.backoff import Backoff


def test_backoff_doubles_to_its_cap_and_jitters_below_the_delay() -> None:
    exact = Backoff(first=0.5, cap=5.0)
    assert [exact.delay(n) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert exact.delay(10_000) == 5.0  # no overflow however many attempts
    half = Backoff(first=0.5, cap=30.0, jitter=0.5)
    delays = [half.delay(3) for _ in range(200)]
    assert all(2.0 <= d <= 4.0 for d in delays) and len(set(delays)) > 1
    full = Backoff(first=0.01, jitter=1.0)
    assert all(0 <= full.delay(4) <= 0.16 for _ in range(200))
