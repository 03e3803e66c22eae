"""Helpers every suite, bench/ and scripts/ share: one copy of each."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` right now (loopback by default: test traffic stays on 127.0.0.0/8)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
