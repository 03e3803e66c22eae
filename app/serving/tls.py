"""The serving certificate: one SSLContext per worker, rebuilt when the mounted pair changes.

kubelet updates a Secret volume by swapping its ``..data`` symlink, so the pair is re-read every
few seconds and compared by content. A pair that does not load (half-written, key not matching the
certificate, expired) is refused and the previous context keeps serving.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from pathlib import Path

from cryptography import x509

RELOAD_INTERVAL = 5.0  # seconds between looks at the files; a new pair is served within this


def server_context(cert: str, key: str) -> tuple[ssl.SSLContext, float]:
    """A TLS 1.2+ server context for the pair and the certificate's notAfter (Unix time); raises ValueError."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        # Read first: ssl's own errors for a missing or unreadable file do not say which file it was.
        pem = Path(cert).read_bytes()
        Path(key).read_bytes()
        context.load_cert_chain(cert, key)
        not_after = x509.load_pem_x509_certificate(pem).not_valid_after_utc.timestamp()
    except ssl.SSLError as exc:  # an OSError too: catch it first
        raise ValueError(f"not a usable certificate/key pair: {exc.reason or exc}") from None
    except FileNotFoundError as exc:
        raise ValueError(f"file not found: {exc.filename or f'{cert} or {key}'}") from None
    except OSError as exc:
        raise ValueError(f"cannot read {exc.filename or f'{cert} or {key}'}: {exc.strerror or exc}") from None
    if not_after < time.time():
        raise ValueError(f"certificate {cert} expired at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(not_after))}")
    return context, not_after


class ServingCertificate:
    """The current server SSLContext; ``poll()`` swaps in a changed pair once it loads."""

    def __init__(
        self,
        cert: str,
        key: str,
        on_loaded: Callable[[float], None],
        on_rejected: Callable[[str], None],
    ) -> None:
        self.cert, self.key = cert, key
        self.on_loaded, self.on_rejected = on_loaded, on_rejected
        self._seen = self._contents()
        self.context, not_after = server_context(cert, key)
        self._next_look = time.monotonic() + RELOAD_INTERVAL
        on_loaded(not_after)

    def _contents(self) -> tuple[bytes, bytes]:
        try:
            return Path(self.cert).read_bytes(), Path(self.key).read_bytes()
        except OSError:
            return b"", b""  # mid-swap; the next look reads the new pair

    def poll(self) -> None:
        """Reload the pair when its contents changed since the last look (at most every RELOAD_INTERVAL)."""
        now = time.monotonic()
        if now < self._next_look:
            return
        self._next_look = now + RELOAD_INTERVAL
        contents = self._contents()
        if contents == self._seen:
            return
        self._seen = contents  # a refused pair is reported once, not at every look
        try:
            self.context, not_after = server_context(self.cert, self.key)
        except ValueError as exc:
            self.on_rejected(str(exc))
            return
        self.on_loaded(not_after)
