"""Waiting for a condition in a test: one polling loop for every suite and bench/."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def eventually(
    check: Callable[[], Any], timeout: float = 10.0, what: str | None = None, *, interval: float = 0.02
) -> Any:
    """Call ``check`` every ``interval`` seconds until it returns something true, and return that; TimeoutError
    naming ``what`` (else ``check``) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what or check}")
        time.sleep(interval)
