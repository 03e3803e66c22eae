"""``hami-webhook``: serve over TLS, run locally with a throwaway PKI, or preview a Pod offline.

Exit codes: 0 ok (review: allowed), 1 failure (review: denied by policy), 2 usage or configuration error
(review: an unreadable file or an invalid Pod, which the webhook answers with a 400 denial).
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

from app.quota import QuotaOff
from app.review import review
from app.settings import Settings, SettingsError
from app.untrusted import MAX_YAML_BYTES, UntrustedError, json_document, shown, yaml_documents

LOCAL_HOSTS = ("localhost", "127.0.0.1")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    return int(args.run(args))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hami-webhook", description=__doc__)
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    serve = commands.add_parser(
        "serve",
        help="serve POST /webhook over HTTPS with gunicorn (HAMI_* env vars)",
        description="Run gunicorn with the webhook's settings: the same as "
        "`gunicorn -c gunicorn.conf.py wsgi:app`. Configure with HAMI_* variables.",
    )
    serve.set_defaults(run=_serve)

    local = commands.add_parser(
        "local",
        help="serve on 127.0.0.1 with a self-signed CA made on the spot",
        description="Generate (or reuse) a local CA and serving certificate for "
        "localhost and 127.0.0.1, print a ready curl command, and serve.",
    )
    local.add_argument(
        "--dir", default=".local-tls", help="where the PKI and the sample review go (default %(default)s)"
    )
    local.add_argument("--bind", default="127.0.0.1:9443", help="address to listen on (default %(default)s)")
    local.set_defaults(run=_local)

    preview = commands.add_parser(
        "review",
        help="show what the webhook would do to a Pod manifest, offline",
        description="Review the Pod(s) in a YAML or JSON file as the API server would "
        "send them (schedulerName and requests defaulted) and print the decision to stderr "
        "and the patched Pod (or the JSON Patch) to stdout. "
        "Exit 0 allowed, 1 denied, 2 unreadable file or invalid Pod.",
    )
    preview.add_argument("pod", type=Path, help="Pod manifest (YAML or JSON, several documents allowed)")
    preview.add_argument("--config", help="HAMi device-config YAML (default: HAMI_DEVICE_CONFIG or the chart's)")
    preview.add_argument("--namespace", default="default", help="namespace when the manifest names none")
    preview.add_argument("--patch", action="store_true", help="print the JSON Patch instead of the patched Pod")
    preview.set_defaults(run=_review)
    return parser


def _serve(args: argparse.Namespace) -> int:
    from gunicorn.app.wsgiapp import WSGIApplication

    sys.argv = ["hami-webhook serve", "-c", "python:app.serving", "app:create_app()"]
    WSGIApplication("%(prog)s").run()
    return 0


def _local(args: argparse.Namespace) -> int:
    from certgen.pki import write_local

    files = write_local(args.dir, LOCAL_HOSTS)
    sample = Path(args.dir) / "sample-review.json"
    sample.write_text(json.dumps(sample_review(), indent=2) + "\n")
    host, _, port = args.bind.rpartition(":")
    url = f"https://{'localhost' if host in ('127.0.0.1', '0.0.0.0', '') else host}:{port}/webhook"
    print(f"hami-webhook: serving {url} with a local CA ({files.ca_cert})", file=sys.stderr)
    print("try:", file=sys.stderr)
    print(
        f"  curl --cacert {files.ca_cert} -H 'Content-Type: application/json' --data @{sample} {url}", file=sys.stderr
    )
    os.environ.setdefault("HAMI_METRICS_BIND", "127.0.0.1:9090")  # local: metrics on loopback only
    os.environ.update(
        HAMI_WEBHOOK_BIND=args.bind, HAMI_WEBHOOK_TLS_CERT=str(files.cert), HAMI_WEBHOOK_TLS_KEY=str(files.key)
    )
    return _serve(args)


def sample_review() -> dict[str, Any]:
    """An AdmissionReview for a one-GPU Pod, as kube-apiserver would send it."""
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cuda-sample", "namespace": "default"},
        "spec": {
            "schedulerName": "default-scheduler",
            "containers": [
                {
                    "name": "cuda",
                    "image": "nvidia/cuda:12.4.1-base-ubuntu22.04",
                    "resources": {"limits": limits, "requests": dict(limits)},
                }
            ],
        },
    }
    return admission_review(pod, uid="705ab4f5-6393-11e8-b7cc-42010a800002")


def admission_review(pod: dict[str, Any], *, uid: str, dry_run: bool = False) -> dict[str, Any]:
    """Wrap a Pod in a v1 AdmissionReview CREATE request."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": (pod.get("metadata") or {}).get("namespace", "default"),
            "operation": "CREATE",
            "userInfo": {"username": "admin"},
            "object": pod,
            "oldObject": None,
            "dryRun": dry_run,
        },
    }


def _review(args: argparse.Namespace) -> int:
    env = dict(os.environ)
    if args.config:
        env["HAMI_DEVICE_CONFIG"] = args.config
    try:
        settings = Settings.from_env(env)
    except SettingsError as exc:
        print(f"hami-webhook: invalid setting: {exc}", file=sys.stderr)
        return 2
    try:
        with args.pod.open("rb") as file:
            documents = [d for d in yaml_documents(file.read(MAX_YAML_BYTES + 1)) if d is not None]
    except (OSError, UntrustedError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        print(f"hami-webhook: cannot read {args.pod}: {reason}", file=sys.stderr)
        return 2
    pods = [d for d in documents if isinstance(d, dict) and d.get("kind") == "Pod"]
    if not pods:
        print(f"hami-webhook: {args.pod} holds no Pod", file=sys.stderr)
        return 2
    outcomes = {_preview(api_server_defaults(pod, args.namespace), settings, args.patch) for pod in pods}
    return max(outcomes)


def api_server_defaults(pod: dict[str, Any], namespace: str) -> dict[str, Any]:
    """What kube-apiserver fills in before webhooks see a Pod: namespace, schedulerName, requests from limits."""
    pod = copy.deepcopy(pod)
    if not isinstance(pod.get("metadata"), dict):
        pod["metadata"] = {}
    pod["metadata"].setdefault("namespace", namespace)
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return pod
    spec.setdefault("schedulerName", "default-scheduler")
    for field in ("initContainers", "containers"):
        containers = spec.get(field)
        for ctr in containers if isinstance(containers, list) else []:
            resources = ctr.get("resources") if isinstance(ctr, dict) else None
            if not isinstance(resources, dict):
                continue
            limits = resources.get("limits")
            if isinstance(limits, dict) and limits:
                if not isinstance(resources.get("requests"), dict):
                    resources["requests"] = {}
                for name, amount in limits.items():
                    resources["requests"].setdefault(name, amount)
    return pod


def _preview(pod: dict[str, Any], settings: Settings, as_patch: bool) -> int:
    """Print one Pod's decision to stderr and its patched form to stdout; the exit code it earns.

    0 allowed, 1 denied by policy, 2 denied as invalid (the webhook's 400 answers).
    """
    meta = pod["metadata"]
    written = shown(meta.get("name"), quoted=False) if meta.get("name") else None
    written = written or shown(meta.get("generateName") or "", quoted=False) + "*"
    name = f"{shown(meta.get('namespace'), quoted=False)}/{written}"
    answer = review(admission_review(pod, uid="preview", dry_run=True), settings, QuotaOff())["response"]
    status = answer["status"]
    if not answer["allowed"]:
        print(
            f"{name}: denied ({status['code']} {status.get('reason', '')}): {status.get('message', '')}",
            file=sys.stderr,
        )
        return 2 if status["code"] == 400 else 1
    ops = json_document(base64.b64decode(answer["patch"])) if "patch" in answer else []
    summary = f"{len(ops)} patch operation(s)" if ops else "no change"
    note = f" ({status['message']})" if status.get("message") else ""
    print(f"{name}: allowed, {summary}{note}", file=sys.stderr)
    for warning in answer.get("warnings", ()):
        print(f"warning: {warning}", file=sys.stderr)
    if as_patch:
        print(json.dumps(ops, indent=2))
    else:
        print("---")
        print(yaml.safe_dump(jsonpatch.apply_patch(pod, ops), sort_keys=False), end="")
    return 0
