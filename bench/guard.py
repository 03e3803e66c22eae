"""What the allocation guard costs a Pod write: the shipped one beside another revision's, through one real
kube-apiserver of each pinned version.

    python -m bench.guard [--writes 300] [--rounds 3] [--versions 1.37.2,1.30.14] [--baseline REV]

One control plane per version (tests/realkube), no webhook. Both guards are applied side by side, each bound to
namespaces labelled for it: ``before`` is manifests/base/policies/allocation-guard.yaml as of git revision
``--baseline`` (by default the last one whose guard looked each of its 80 owned keys up in the Pod, and did not own
the quota reservation), renamed; ``after`` is the shipped one; ``none`` binds no guard. Writes,
by one client each, the cases rotating on every write so drift falls on all alike:

- ``create``: a device Pod as the webhook leaves it (hami-scheduler, ``hami.io/gpu-type``, a label of its
  workload), by the admin: the common create, which passes the guard with no owned key written (the authorizer
  is not asked);
- ``reserved``: the same Pod as the webhook leaves it in a namespace with a device quota, carrying
  ``hami.io/quota-reservation``: the shipped guard also checks where it may be created (scheduler, scope, device);
- ``allocate``: a merge patch by HAMi's scheduler's ServiceAccount (kube-system:hami-scheduler, allowed to patch
  Pods and Nodes) writing ``hami.io/vgpu-node`` and ``hami.io/bind-phase``: both guards ask the authorizer;
- ``annotate``: a merge patch by the admin of an annotation of the user's own, which both turn away before the
  authorizer.

Printed: per version, write and guard, the median and p90 of each round's client-timed write, less ``none``'s in
the same round, then the median over rounds. Every write is checked (201 or 200).
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from app.admission.annotations import QUOTA_RESERVATION_ANNOTATION
from app.preview.policies import GUARD
from bench.policies import each_version, measured
from testbed import ROOT
from testbed.api import IMAGE, Api
from testbed.cluster import RealKube, pinned_versions

SHIPPED = Path("manifests/base/policies/allocation-guard.yaml")
BASELINE = "984f5a3"
"""The last revision whose guard filtered its list of 80 owned annotations on every write and left the quota
reservation alone."""
LABEL = "hami-bench/guard"
GUARDS = ("none", "before", "after")
WRITES = ("create", "reserved", "allocate", "annotate")
SCHEDULER = ("kube-system", "hami-scheduler")
GPU = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "30"}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writes", type=int, default=300, help="writes per guard, kind and round (%(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (%(default)s)")
    parser.add_argument("--versions", default=",".join(reversed(pinned_versions())), help="(%(default)s)")
    parser.add_argument("--baseline", default=BASELINE, help="git revision of the guard before (%(default)s)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    guards = {"before": _git_show(args.baseline, SHIPPED), "after": (ROOT / SHIPPED).read_text()}
    return each_version(
        args, lambda kube: measure(kube, guards, args), "added per write (ms) by each guard, median over rounds"
    )


def _git_show(revision: str, path: Path) -> str:
    done = subprocess.run(["git", "-C", str(ROOT), "show", f"{revision}:{path}"], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"--baseline {revision}: {done.stderr.strip()}")
    return done.stdout


def install(kube: RealKube, guards: dict[str, str]) -> str:
    """Each guard renamed for its case and bound to its namespace; the scheduler's account with what HAMi's
    chart lets it do to Pods and Nodes; a token of it."""
    for case in GUARDS:
        kube.namespace(f"bench-{case}", {LABEL: case})
    documents = []
    for case, text in guards.items():
        for obj in (d for d in yaml.safe_load_all(text) if d):
            obj["metadata"]["name"] = f"{GUARD}-{case}"
            if obj["kind"].endswith("Binding"):
                obj["spec"]["policyName"] = f"{GUARD}-{case}"
                selector = {"matchLabels": {LABEL: case}}
                obj["spec"]["matchResources"] = {"namespaceSelector": selector}
            documents.append(obj)
    kube.kubectl("apply", "-f", "-", stdin="\n---\n".join(json.dumps(o) for o in documents))
    ns, name = SCHEDULER
    kube.kubectl("create", "serviceaccount", name, "-n", ns)
    kube.kubectl("create", "clusterrole", name, "--verb=get,list,watch,patch", "--resource=pods,nodes")
    kube.kubectl("create", "clusterrolebinding", name, f"--clusterrole={name}", f"--serviceaccount={ns}:{name}")
    return kube.kubectl("create", "token", name, "-n", ns).stdout.strip()


def device_pod(name: str, reservation: str = "") -> bytes:
    ctr = {"name": "c", "image": IMAGE, "resources": {"limits": GPU}}
    annotations = {"hami.io/gpu-type": "NVIDIA"}
    if reservation:
        annotations[QUOTA_RESERVATION_ANNOTATION] = reservation
    meta = {"name": name, "labels": {"app": "bench"}, "annotations": annotations}
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"schedulerName": "hami-scheduler", "containers": [ctr]},
    }
    return json.dumps(obj).encode()


def measure(kube: RealKube, guards: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    scheduler = Api(kube, install(kube, guards))
    admin = Api(kube)
    for case in GUARDS:
        status, data = admin.call("POST", f"/api/v1/namespaces/bench-{case}/pods", device_pod("patched"))
        assert status == 201, data
    problems: list[str] = []
    made = itertools.count()

    def timed(case: str, write: str) -> float:
        n = next(made)
        pods = f"/api/v1/namespaces/bench-{case}/pods"
        if write in ("create", "reserved"):
            reservation = f"{n:08x}-0000-4000-8000-000000000000" if write == "reserved" else ""
            api, call = admin, ("POST", pods, device_pod(f"device-{n}", reservation))
        else:
            written = {"hami.io/vgpu-node": f"node-{n}", "hami.io/bind-phase": "allocating"}
            if write == "annotate":
                api, written = admin, {"team": f"t-{n}"}
            else:
                api = scheduler
            call = ("PATCH", f"{pods}/patched", json.dumps({"metadata": {"annotations": written}}).encode())
        started = time.perf_counter()
        status, data = api.call(*call, merge=call[0] == "PATCH")
        took = time.perf_counter() - started
        if status not in (200, 201):
            problems.append(f"{write} {case}: HTTP {status}: {data[:300]!r}")
        return took

    # Until both guards are loaded, a write may pass unguarded; measured warms up until every write is answered.
    return measured(timed, GUARDS, WRITES, args.writes, args.rounds, problems, "writes", [scheduler, admin])


if __name__ == "__main__":
    raise SystemExit(main())
