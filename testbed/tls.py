"""The TLS client a webhook meets: kube-apiserver's rules, written once."""

from __future__ import annotations

import ssl
from pathlib import Path


def client_context(ca: Path | bytes) -> ssl.SSLContext:
    """Trust only `ca` (a file, or PEM bytes), check SANs only (no CN fallback), strict X.509, TLS 1.2+: Go's rules."""
    if isinstance(ca, bytes):
        context = ssl.create_default_context(cadata=ca.decode())
    else:
        context = ssl.create_default_context(cafile=str(ca))
    context.hostname_checks_common_name = False
    context.verify_flags |= ssl.VERIFY_X509_STRICT
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context
