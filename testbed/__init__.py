"""Helpers every suite, bench/ and scripts/ share, one copy of each: ports, TLS clients, servers, Pods.

Each module is cheap to import (no Flask, no kubernetes client), so bench/ and scripts/ may use them too.
"""

from __future__ import annotations

import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def version() -> str:
    """The project's version, from its one declaration: ``setup.cfg``'s ``[metadata] version``."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return config["metadata"]["version"]


HAMI_EXAMPLES = ROOT.parent / "shared" / "hami-examples"
"""HAMi's own example manifests, read where they are (shared/ beside the clone), never copied into it."""
