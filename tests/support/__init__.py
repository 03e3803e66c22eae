"""Helpers every suite, bench/ and scripts/ share, one copy of each: ports, TLS clients, servers, Pods.

Each module is cheap to import (no Flask, no kubernetes client), so bench/ and scripts/ may use them too.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
