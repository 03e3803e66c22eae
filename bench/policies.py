"""What the admission policies add to a Pod create, through a real kube-apiserver of each pinned version.

    python -m bench.policies [--pods 400] [--rounds 3] [--versions 1.37.2,1.30.14] [--json FILE]

One control plane per version (tests/realkube), no webhook: only the policies' cost is in the difference. The
shipped policies (manifests/base/policies/, and the floor component where MutatingAdmissionPolicy is served)
are applied with each binding narrowed to namespaces labelled for its case, so every case pays the bindings'
selector checks and only its own namespace the expressions. Cases, created in turn by one client (the order
rotating each create, so drift falls on all alike):

- ``none``: no policy binds; ``vaps``: the three validating policies; ``floor``: those and the floor (1.36+);
- for a device Pod as the webhook leaves it (hami-scheduler, ``hami.io/gpu-type``; with the floor: on
  default-scheduler, for the floor to route) and for a CPU-only Pod, the common create, which the policies'
  matchConditions turn away.

Printed: per version, case and Pod, the median and p90 of each round's client-timed create, less ``none``'s in
the same round, then the median over rounds. Every create is checked (201, the scheduler it must have).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from bench.inprocess import percentile
from testbed import ROOT
from testbed.api import IMAGE, Api
from testbed.cluster import RealKube, build_binaries, pinned_versions

POLICIES = (ROOT / "manifests" / "base" / "policies", ROOT / "manifests" / "components" / "floor")
LABEL = "hami-bench/policies"
PODS = ("device", "cpu")
GPU = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4k", "nvidia.com/gpucores": "30"}
Figures = dict[str, dict[str, float]]
"""By ``case/kind``: the p50 and p90 added over the reference case, and the reference's own p50 (ms)."""
NAME = "pod-name-here"
"""Replaced by a name of its own in each create (generateName's five random characters collide in thousands)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=400, help="creates per case, Pod and round (%(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (%(default)s)")
    parser.add_argument("--versions", default=",".join(reversed(pinned_versions())), help="(%(default)s)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return each_version(args, lambda kube: measure(kube, args), "added per create (ms), median over rounds")


def each_version(args: argparse.Namespace, measure_on: Callable[[RealKube], dict[str, Any]], what: str) -> int:
    """``measure_on`` a control plane of each version in ``args.versions``, in turn; each table printed as it
    comes, all of them written to ``args.json`` if asked."""
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="hami-bench-") as tmp:
        for version in args.versions.split(","):
            kube = RealKube(build_binaries(version), Path(tmp) / version).start()
            try:
                results[version] = measure_on(kube)
            finally:
                kube.stop()
            print(table(f"kube-apiserver {version}: {what}", results[version]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


def cases(kube: RealKube) -> tuple[str, ...]:
    return ("none", "vaps", "floor") if kube.minor >= 36 else ("none", "vaps")


def install(kube: RealKube, names: tuple[str, ...]) -> None:
    """The shipped policies, each binding narrowed to the namespaces of the cases that include it."""
    for case in names:
        kube.namespace(f"bench-{case}", {LABEL: case})
    documents = []
    for directory in POLICIES[: 2 if "floor" in names else 1]:
        for path in sorted(directory.glob("*.yaml")):
            if path.name != "kustomization.yaml":
                documents += [d for d in yaml.safe_load_all(path.read_text()) if d]
    for obj in documents:
        if obj["kind"].endswith("Binding"):
            wanted = ["floor"] if obj["kind"].startswith("Mutating") else ["vaps", "floor"]
            match = obj["spec"].setdefault("matchResources", {})
            selector = match.setdefault("namespaceSelector", {})
            requirement = {"key": LABEL, "operator": "In", "values": wanted}
            selector["matchExpressions"] = [*selector.get("matchExpressions", []), requirement]
    kube.kubectl("apply", "-f", "-", stdin="\n---\n".join(json.dumps(o) for o in documents))


def pod(case: str, kind: str) -> bytes:
    limits = GPU if kind == "device" else {"cpu": "1"}
    ctr = {"name": "c", "image": IMAGE, "resources": {"limits": limits}}
    meta: dict[str, Any] = {"name": NAME}
    spec: dict[str, Any] = {"containers": [ctr]}
    if kind == "device":
        meta["annotations"] = {"hami.io/gpu-type": "NVIDIA"}
        if case != "floor":
            spec["schedulerName"] = "hami-scheduler"
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}).encode()


def expected(kind: str) -> str:
    return "hami-scheduler" if kind == "device" else "default-scheduler"


def measure(kube: RealKube, args: argparse.Namespace) -> dict[str, Any]:
    names = cases(kube)
    install(kube, names)
    api = Api(kube)
    bodies = {(case, kind): pod(case, kind) for case in names for kind in PODS}
    problems: list[str] = []
    made = itertools.count()

    def create(case: str, kind: str) -> float:
        body = bodies[case, kind].replace(NAME.encode(), f"{kind}-{next(made)}".encode())
        started = time.perf_counter()
        status, data = api.call("POST", f"/api/v1/namespaces/bench-{case}/pods", body)
        took = time.perf_counter() - started
        got = json.loads(data).get("spec", {}).get("schedulerName") if status == 201 else None
        if got != expected(kind):
            problems.append(f"{case} {kind}: HTTP {status}, schedulerName {got}: {data[:200]!r}")
        return took

    # Until the policies are loaded, the floor case's device Pod stays on default-scheduler.
    return measured(create, names, PODS, args.pods, args.rounds, problems, "creates", [api])


def measured(
    write: Callable[[str, str], float],
    cases: Sequence[str],
    kinds: Sequence[str],
    count: int,
    rounds: int,
    problems: list[str],
    what: str,
    clients: Sequence[Any],
) -> dict[str, Any]:
    """``write(case, kind)``, timed by the caller, for every case and kind in turn, the order rotating on each so
    drift falls on all alike: first until one pass leaves no ``problems`` (the policies loaded; 60 s at most),
    then ``count`` of each per round; the median over rounds of each round's figures (`added`, `over_rounds`).
    The ``clients`` are closed whatever happens; a write that left a problem is a SystemExit naming ``what``."""
    order = [(case, kind) for kind in kinds for case in cases]
    figures = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            problems.clear()
            for case, kind in order:
                write(case, kind)
            if not problems:
                break
            time.sleep(0.5)
        for _ in range(rounds):
            times: dict[tuple[str, str], list[float]] = {key: [] for key in order}
            for i in range(count):
                for case, kind in order[i % len(order) :] + order[: i % len(order)]:
                    times[case, kind].append(write(case, kind))
            figures.append(added(times, cases, kinds))
    finally:
        for client in clients:
            client.close()
    if problems:
        raise SystemExit(f"{what} went wrong:\n" + "\n".join(sorted(set(problems))[:10]))
    return over_rounds(figures)


def added(times: dict[tuple[str, str], list[float]], cases: Sequence[str], kinds: Sequence[str]) -> Figures:
    """For each kind of write, each case's p50 and p90 less the first case's (the reference), in ms; and the
    reference's own p50."""
    out = {}
    for kind in kinds:
        base = times[cases[0], kind]
        for case in cases[1:]:
            mine = times[case, kind]
            out[f"{case}/{kind}"] = {
                "p50": 1000 * (statistics.median(mine) - statistics.median(base)),
                "p90": 1000 * (percentile(mine, 90) - percentile(base, 90)),
                "base_p50": 1000 * statistics.median(base),
            }
    return out


def over_rounds(rounds: list[Figures]) -> dict[str, Any]:
    """The median over rounds of each figure, with each round's p50 beside it."""
    return {
        key: {
            **{stat: statistics.median(r[key][stat] for r in rounds) for stat in ("p50", "p90", "base_p50")},
            "p50_rounds": [round(r[key]["p50"], 3) for r in rounds],
        }
        for key in rounds[0]
    }


def table(title: str, figures: dict[str, Any]) -> str:
    lines = [title, f"{'case':22} {'p50':>7} {'p90':>7} {'none p50':>9}"]
    for key, stats in figures.items():
        each = " ".join(f"{p:+.2f}" for p in stats["p50_rounds"])
        lines.append(
            f"{key:22} {stats['p50']:+7.2f} {stats['p90']:+7.2f} {stats['base_p50']:9.2f}   p50 by round: {each}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
