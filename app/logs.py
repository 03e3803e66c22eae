"""Log formats (json | text) for the webhook's own lines and gunicorn's, and the logging config gunicorn loads.

Lines cannot be forged or flooded: every value is length-bounded and escaped, so a newline in a uid
or a 6 MB quantity in a denial message stays inside one bounded field of one line. Structured fields
ride on the record as ``extra={"fields": {...}}``; both formats print them after the message.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import time
from collections.abc import Mapping
from typing import Any

import orjson

FORMATS = ("json", "text")
LEVELS = ("debug", "info", "warning", "error")
FIELD_LIMIT = 1024  # characters per field value: a uid, a name, a denial message
MESSAGE_LIMIT = 4096  # the message itself (gunicorn's and ours, after %-formatting)
TRACEBACK_LIMIT = 16384
# Neither format prints the caller's file or line, so logging need not walk the stack for them on every
# record (the logging HOWTO's "Optimization"); nor look up multiprocessing's process name.
logging._srcfile = None
logging.logMultiprocessing = False
_SAFE = re.compile(r"[\w.:/@*+,-]+")  # text values made only of these print bare; others are quoted


def bound(text: str, limit: int = FIELD_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, saying how much was dropped."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...[+{len(text) - limit} chars]"


def _value(value: Any) -> Any:
    """A field value fit for a log line: numbers, booleans and None as they are, anything else a bounded string."""
    if value.__class__ is str:  # the common case first: a review line is a dozen of these and numbers
        return value if len(value) <= FIELD_LIMIT else bound(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), default=str)
    return bound(text)


def _message(record: logging.LogRecord) -> str:
    """The %-formatted message, with string arguments bounded first so a huge one is never even built."""
    args = record.args
    if isinstance(args, tuple) and args:
        try:
            return bound(str(record.msg) % tuple(bound(a) if isinstance(a, str) else a for a in args), MESSAGE_LIMIT)
        except (TypeError, ValueError):
            pass
    return bound(record.getMessage(), MESSAGE_LIMIT)


def _fields(record: logging.LogRecord) -> Mapping[str, Any]:
    fields = getattr(record, "fields", None)
    return fields if isinstance(fields, Mapping) else {}


class JsonFormatter(logging.Formatter):
    """One JSON object per line; ``json.dumps`` with ASCII output escapes every control and non-ASCII character."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
            "msg": _message(record),
        }
        for key, value in _fields(record).items():
            line.setdefault(str(key), _value(value))
        if record.exc_info:
            line["exc"] = bound(self.formatException(record.exc_info), TRACEBACK_LIMIT)
        return _json_line(line)


def _json_line(line: dict[str, Any]) -> str:
    """orjson for the common all-ASCII line (a review's, ~10 µs less than ``json.dumps``); the standard
    encoder, which escapes every non-ASCII character, for the rest and for integers orjson refuses."""
    try:
        out = orjson.dumps(line)
        if out.isascii():
            return out.decode()
    except orjson.JSONEncodeError:
        pass
    return json.dumps(line, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """gunicorn's layout, ``[time] [pid] [LEVEL] message key=value ...``; values with anything but
    name-like characters are JSON-quoted, so no value can end the line or fake another field."""

    def format(self, record: logging.LogRecord) -> str:
        head = f"[{_timestamp(record.created)}] [{record.process}] [{record.levelname}]"
        parts = [f"{head} {_printable(_message(record))}"]
        for key, value in _fields(record).items():
            parts.append(f"{key}={_text_value(_value(value))}")
        line = " ".join(parts)
        if record.exc_info:
            # Continuation lines are indented: every line that starts at column 0 is a record of its own.
            trace = bound(self.formatException(record.exc_info), TRACEBACK_LIMIT)
            line += "".join(f"\n    {_printable(t)}" for t in trace.splitlines())
        return line


def _text_value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.3f}"
    text = str(value)
    return text if _SAFE.fullmatch(text) else json.dumps(text)


def _printable(text: str) -> str:
    """``text`` with control and other unprintable characters escaped (newlines, ANSI escapes, bidi overrides)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else json.dumps(c)[1:-1] for c in text)


def _timestamp(created: float) -> str:
    return f"{_second(int(created))}.{int(created % 1 * 1000):03d}Z"


@functools.lru_cache(maxsize=4)
def _second(whole: int) -> str:
    """The timestamp to the second, formatted once per second (``strftime`` is most of a timestamp's cost)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))


def logconfig(log_format: str, level: str) -> dict[str, Any]:
    """gunicorn's ``logconfig_dict``: its messages and ours to stderr in one format; no access log
    (the review line already says who asked and what was decided)."""
    formatter = JsonFormatter if log_format == "json" else TextFormatter
    upper = level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"hami": {"()": f"{formatter.__module__}.{formatter.__qualname__}"}},
        "handlers": {
            "error_console": {"class": "logging.StreamHandler", "formatter": "hami", "stream": "ext://sys.stderr"}
        },
        "root": {"level": upper, "handlers": ["error_console"]},
        "loggers": {
            "gunicorn.error": {"level": upper, "handlers": ["error_console"], "propagate": False},
            "gunicorn.access": {"level": "WARNING", "handlers": [], "propagate": False},
        },
    }
