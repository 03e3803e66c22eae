"""In-process cost of one single-GPU review, and of its parts, side by side in one run.

Prints medians over several repeats (this machine is shared and noisy; compare ratios, not absolutes).
Usage: .venv/bin/python bench/review_inprocess.py [--repeats 7] [--number 2000]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import timeit

import jsonpatch

from app import schemas
from app.cli import sample_review
from app.quota import QuotaOff
from app.review import decide, review
from app.settings import Settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--number", type=int, default=2000)
    args = parser.parse_args()

    settings, quota = Settings.from_env({}), QuotaOff()
    request = sample_review()
    obj = request["request"]["object"]
    mutated = copy.deepcopy(obj)
    mutated["spec"]["schedulerName"] = "hami-scheduler"
    mutated["metadata"]["annotations"] = {"hami.io/gpu-type": "NVIDIA"}

    cases = {
        "review() total": lambda: review(request, settings, quota),
        "  envelope validation": lambda: schemas.problems(schemas.REVIEW, request, ""),
        "  Pod validation": lambda: schemas.problems(schemas.POD, obj, "request.object"),
        "  decide() (policy + patch ops)": lambda: decide(obj, settings, quota, namespace="d", uid="u", dry_run=False),
        "jsonpatch.make_patch (for scale)": lambda: jsonpatch.make_patch(obj, mutated),
    }
    print(f"{'case':36} {'median µs':>10} {'min µs':>8}")
    for name, call in cases.items():
        runs = [t / args.number * 1e6 for t in timeit.repeat(call, number=args.number, repeat=args.repeats)]
        print(f"{name:36} {statistics.median(runs):10.1f} {min(runs):8.1f}")


if __name__ == "__main__":
    main()
