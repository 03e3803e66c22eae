"""gunicorn config for the benchmark: the project's own gunicorn.conf.py, plus per-worker request counters.

Both servers (product and floor) run under it, so both pay the same ~1 µs per
request for the count. Each worker owns one slot of a small shared file named by
``HAMI_BENCH_COUNTS``: its pid and how many requests it has answered, which the
benchmark reads to show how connections (and so requests) spread over workers.
"""

from __future__ import annotations

import itertools
import mmap
import os
import runpy
import struct
from pathlib import Path
from typing import Any

SLOTS = 64
SLOT = struct.Struct("qq")  # pid, requests

_project = runpy.run_path(str(Path(__file__).resolve().parents[1] / "gunicorn.conf.py"))
globals().update({name: value for name, value in _project.items() if not name.startswith("__")})
_project_post_fork = _project.get("post_fork")
_project_post_request = _project.get("post_request")
_slot: dict[str, Any] = {}


def post_fork(server: Any, worker: Any) -> None:
    if _project_post_fork:
        _project_post_fork(server, worker)
    with open(os.environ["HAMI_BENCH_COUNTS"], "r+b") as handle:
        _slot["map"] = mmap.mmap(handle.fileno(), SLOTS * SLOT.size)
    _slot["offset"] = (worker.age % SLOTS) * SLOT.size
    _slot["count"] = itertools.count(1)
    SLOT.pack_into(_slot["map"], _slot["offset"], os.getpid(), 0)


def post_request(worker: Any, req: Any, environ: Any, resp: Any) -> None:
    if _project_post_request:
        _project_post_request(worker, req, environ, resp)
    SLOT.pack_into(_slot["map"], _slot["offset"], os.getpid(), next(_slot["count"]))


def read_counts(path: str | Path) -> dict[int, int]:
    """pid -> requests answered, for every worker that has started."""
    data = Path(path).read_bytes()
    pairs = (SLOT.unpack_from(data, i * SLOT.size) for i in range(SLOTS))
    return {pid: count for pid, count in pairs if pid}
