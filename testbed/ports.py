"""Loopback ports: a free one to bind a server to, a taken one to see a server refuse it."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` right now (loopback by default: test traffic stays on 127.0.0.0/8)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@contextmanager
def taken_port() -> Iterator[int]:
    """A loopback port something listens on for the block, as another server already bound to it would."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])
