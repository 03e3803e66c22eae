"""certgen's log lines, in the webhook's own formats (app.logs): one image, one kind of line.

Fields are passed as keyword arguments and rendered after the message by the formatter; dates, durations
and lists are first put the way certgen prints them on its command line. Callers pass names, dates and
counts, never certificate or key material.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from datetime import datetime, timedelta

from app.logs import FORMATS, JsonFormatter, TextFormatter
from certgen.duration import format_duration, format_instant

__all__ = ["FORMATS", "configure", "error", "info", "warning"]
LOGGER = logging.getLogger("certgen")


def info(msg: str, **fields: object) -> None:
    LOGGER.info(msg, extra={"fields": _plain_fields(fields)})


def warning(msg: str, **fields: object) -> None:
    LOGGER.warning(msg, extra={"fields": _plain_fields(fields)})


def error(msg: str, **fields: object) -> None:
    LOGGER.error(msg, extra={"fields": _plain_fields(fields)})


def configure(fmt: str) -> None:
    """Send certgen's lines to the current stderr in `fmt`, replacing earlier setup."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    LOGGER.handlers[:] = [handler]
    LOGGER.setLevel(logging.INFO)
    LOGGER.propagate = False


def _plain_fields(fields: dict[str, object]) -> dict[str, object]:
    return {key: _plain(value) for key, value in fields.items()}


def _plain(value: object) -> object:
    """A field value as certgen's command line shows it: RFC 3339 instants, Go durations, comma-joined lists."""
    if isinstance(value, datetime):
        return format_instant(value)
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Iterable):
        return ",".join(str(_plain(item)) for item in value)
    return str(value)
