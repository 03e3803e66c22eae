"""How long to wait before the next attempt, as a value: each retry loop names its policy once."""

from __future__ import annotations

import random
from dataclasses import dataclass

_MAX_DOUBLINGS = 64  # past this the cap has long been reached; keeps 2**n from overflowing a float


@dataclass(frozen=True)
class Backoff:
    """Exponential back-off: ``first`` seconds, doubling per attempt up to ``cap``; ``jitter`` is the fraction of
    each delay drawn at random (0: exact, 0.5: between half and all of it, 1: anywhere from zero to all of it),
    so that processes failing together do not retry together."""

    first: float
    cap: float = float("inf")
    jitter: float = 0.0

    def delay(self, attempt: int) -> float:
        """The wait after failed attempt number ``attempt`` (counted from 0)."""
        delay = min(self.cap, self.first * 2 ** min(attempt, _MAX_DOUBLINGS))
        return delay * random.uniform(1 - self.jitter, 1) if self.jitter else delay
