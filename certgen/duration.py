"""Times as users write and read them: Go-style durations and UTC instants.

Helm values and kube-webhook-certgen users write durations the Go way
(``8760h``, ``30m``, ``1h30m``), so the flags accept that spelling, plus ``d``
for days because ``3650d`` reads better than ``87600h``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_UNITS = {
    "ms": timedelta(milliseconds=1),
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h|d)")


def parse_duration(text: str) -> timedelta:
    """Parse a positive duration such as ``720h`` or ``1d12h``; raise ValueError otherwise."""
    spec = text.strip()
    pos, total = 0, timedelta()
    while pos < len(spec):
        match = _PART.match(spec, pos)
        if match is None:
            raise ValueError(f"invalid duration {text!r}: use a number and a unit (d, h, m, s), e.g. 720h")
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if total <= timedelta():
        raise ValueError(f"invalid duration {text!r}: must be greater than zero")
    return total


def format_duration(value: timedelta) -> str:
    """Render whole seconds the Go way without zero parts: ``720h``, ``1h30m``, ``0s``."""
    seconds = int(value.total_seconds())
    sign, seconds = ("-", -seconds) if seconds < 0 else ("", seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n]
    return sign + ("".join(parts) or "0s")


def format_instant(moment: datetime) -> str:
    """RFC 3339 in UTC to the second, the way kubectl prints timestamps."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
