"""Loaded (as Python's ``sitecustomize``) only by a webhook replica the quota's clock test runs under libfaketime
with its wall clock moved and its monotonic clock left alone (``FAKETIME_DONT_FAKE_MONOTONIC=1``): a wall clock
off while the monotonic clock runs true is what a node with NTP down or a resumed VM has.

Why this exists: libfaketime 0.9.10 (Debian's) then makes ``clock_nanosleep`` fail with EINVAL, so every
``time.sleep`` raises (gunicorn's arbiter dies spawning workers); moving the monotonic clock too is no way out,
because lock and condition waits with a timeout (``sem_clockwait``) then get a deadline on the wrong clock and
never return. So ``time.sleep`` waits on an Event that is never set, as long as asked: the same wait, on the
monotonic clock, through a call libfaketime leaves working. Nothing of the webhook is replaced."""

import threading
import time

_NEVER = threading.Event()


def _sleep(seconds: float) -> None:
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    _NEVER.wait(seconds)


time.sleep = _sleep
