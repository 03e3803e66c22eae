"""Per-request cost of the observability code, in process: ``python bench/instrumentation.py``.

Prints the median microseconds (over alternating rounds) of the metric updates one review makes
(in multiprocess mode, as under gunicorn) and of formatting + writing its log line in each format,
next to a floor (one json.dumps of the line's fields) so a busy machine's figures can be compared.
"""

from __future__ import annotations

import io
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="hami-bench-")  # before prometheus_client loads

from app import metrics
from app.logs import JsonFormatter, TextFormatter

ROUNDS, CALLS = 9, 5000
FIELDS = {
    "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
    "namespace": "default",
    "pod": "cuda-sample",
    "generateName": "",
    "operation": "CREATE",
    "allowed": True,
    "code": 200,
    "reason": "",
    "message": "",
    "patch_ops": 4,
    "ms": 0.812,
}


def metric_updates() -> None:
    metrics.request_started()
    metrics.decided("patched", "", devices=("NVIDIA",), namespace="default")
    metrics.request_finished(200, 0.0008)


def logger(formatter: logging.Formatter) -> logging.Logger:
    log = logging.getLogger(f"bench.{type(formatter).__name__}")
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(formatter)
    log.addHandler(handler)
    log.propagate = False
    log.setLevel(logging.INFO)
    return log


def timed(call) -> float:
    started = time.perf_counter()
    for _ in range(CALLS):
        call()
    return (time.perf_counter() - started) / CALLS * 1e6


def main() -> None:
    json_log, text_log = logger(JsonFormatter()), logger(TextFormatter())
    cases = {
        "floor: json.dumps(fields)": lambda: json.dumps(FIELDS),  # the machine's speed, to read the others against
        "metrics (multiprocess)": metric_updates,
        "log line, json": lambda: json_log.info("review", extra={"fields": FIELDS}),
        "log line, text": lambda: text_log.info("review", extra={"fields": FIELDS}),
    }
    results: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(ROUNDS):
        for name, call in cases.items():
            results[name].append(timed(call))
    for name, samples in results.items():
        print(f"{name:24s} median {statistics.median(samples):6.1f} us  (min {min(samples):.1f})")
    metrics.remove_multiprocess()


if __name__ == "__main__":
    main()
