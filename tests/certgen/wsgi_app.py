"""A trivial WSGI app for serving certgen's certificate from gunicorn in tests."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"ok"]
