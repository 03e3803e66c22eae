"""One log line per action, as logfmt text or JSON on stderr.

Fields are passed as keyword arguments and rendered by the formatter, so a
line is always ``time=… level=… msg="…" key=value``. Callers pass names,
dates and counts, never certificate or key material.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from certgen.duration import format_duration, format_instant

LOGGER = logging.getLogger("certgen")
FORMATS = ("text", "json")


def info(msg: str, **fields: object) -> None:
    LOGGER.info(msg, extra={"fields": fields})


def warning(msg: str, **fields: object) -> None:
    LOGGER.warning(msg, extra={"fields": fields})


def error(msg: str, **fields: object) -> None:
    LOGGER.error(msg, extra={"fields": fields})


def configure(fmt: str) -> None:
    """Send certgen's lines to the current stderr in `fmt`, replacing earlier setup."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    LOGGER.handlers[:] = [handler]
    LOGGER.setLevel(logging.INFO)
    LOGGER.propagate = False


def _plain(value: object) -> object:
    """Turn a field value into something both formats print readably."""
    if isinstance(value, datetime):
        return format_instant(value)
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Iterable):
        return ",".join(str(_plain(item)) for item in value)
    return str(value)


def _record(record: logging.LogRecord) -> dict[str, object]:
    fields = getattr(record, "fields", {})
    return {
        "time": _plain(datetime.fromtimestamp(record.created, UTC)),
        "level": record.levelname.lower(),
        "msg": record.getMessage(),
        **{key: _plain(value) for key, value in fields.items()},
    }


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_record(record), ensure_ascii=False)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{key}={_quote(value)}" for key, value in _record(record).items())


def _quote(value: object) -> str:
    text = "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    if text and not any(ch in text for ch in ' "=\\') and text.isprintable():
        return text
    return json.dumps(text, ensure_ascii=False)
