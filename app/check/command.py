"""``hami-webhook check`` (also ``kubectl hami check``): one line per check, ok / warning / failure, each failure
with the one thing to do; ``-o json`` for tools. Reads with the caller's kubeconfig (RBAC: hami-webhook-checker)
and writes nothing: its two Pod creates are server-side dry runs.

Exit codes: 0 device Pods go through the webhook (warnings allowed), 1 they do not (or the check could not run:
the API server unreachable, the kubeconfig unreadable), 2 usage (an unknown namespace included).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from app.kube.flags import add_kubeconfig_flags, context_namespace

if TYPE_CHECKING:
    from app.check.core import Finding

FAILED, USAGE = 1, 2
TIMEOUT = 15.0  # seconds per request: above the webhook's timeoutSeconds (10), which a hanging webhook costs
MARKS = {"ok": "ok", "warning": "warning", "failure": "FAILURE"}


def add_check_command(commands: Any, default_scheduler: Callable[[], str]) -> None:
    """Register ``check`` on the CLI's subcommands; ``default_scheduler`` is the webhook's HAMI_SCHEDULER_NAME
    when its Deployment sets none (the settings' default, read only when the check runs)."""
    check = commands.add_parser(
        "check",
        help="say whether device Pods really go through the webhook, and what to fix (reads only)",
        description="Dry-run a one-GPU Pod and a CPU Pod through the API server (server-side, nothing stored) and "
        "check what decides their fate: the webhook configuration and its failurePolicy, the Service's "
        "endpoints, the caBundle against the served certificate, the namespace's labels, other HAMi webhooks, "
        "one scheduler name, the admission policies, the nodes HAMi's device plugins registered, the quota's "
        "RBAC. One line per check, each failure with its fix. Exit 0 device Pods go through (warnings "
        "allowed), 1 they do not, 2 usage.",
    )
    check.add_argument("-n", "--namespace", help="where the dry runs go (default: the kubeconfig context's)")
    check.add_argument("-o", "--output", choices=("json",), help="print the results as JSON (default: lines)")
    add_kubeconfig_flags(check, TIMEOUT)
    check.set_defaults(run=lambda args: run(args, default_scheduler))


def run(args: argparse.Namespace, default_scheduler: Callable[[], str]) -> int:
    from kubernetes import client

    from app.check.core import passes
    from app.check.core import run as judge
    from app.check.reading import CheckError, read
    from app.kube.config import load_configuration

    try:
        configuration = load_configuration(args.kubeconfig, context=args.context)
        namespace = args.namespace or context_namespace(args.kubeconfig, args.context)
    except Exception as exc:  # the loader's own errors: a missing, unreadable or malformed kubeconfig
        where = args.kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        print(f"error: cannot load the kubeconfig ({where}): {_one_line(exc)}", file=sys.stderr)
        return FAILED
    configuration.retries = False  # one try per request: an operator waits for an answer, not for retries
    try:
        with client.ApiClient(configuration) as api:
            snapshot = read(api, namespace, default_scheduler(), args.request_timeout)
    except CheckError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USAGE if str(exc).endswith("not found") else FAILED
    results = judge(snapshot)
    ok = passes(results)
    print(_json(results, namespace, ok) if args.output == "json" else _lines(results, namespace, ok), end="")
    return 0 if ok else FAILED


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _lines(results: Sequence[Finding], namespace: str, ok: bool) -> str:
    """One line per check, its fix below it; then the verdict."""
    width = max(len(r.check) for r in results)
    out = []
    for result in results:
        out.append(f"{MARKS[result.level.value]:<8} {result.check:<{width}}  {result.message}\n")
        if result.fix:
            out.append(f"{'':<8} {'':<{width}}  fix: {result.fix}\n")
    counts = {level: sum(r.level.value == level for r in results) for level in MARKS}
    said = ", ".join(f"{n} {level}{'s' if n != 1 and level != 'ok' else ''}" for level, n in counts.items() if n)
    verdict = "go through" if ok else "do NOT go through"
    out.append(f"device Pods in {namespace} {verdict} hami-webhook ({said})\n")
    return "".join(out)


def _json(results: Sequence[Finding], namespace: str, ok: bool) -> str:
    checks = [
        {"name": r.check, "status": r.level.value, "message": r.message, **({"fix": r.fix} if r.fix else {})}
        for r in results
    ]
    return json.dumps({"namespace": namespace, "passed": ok, "checks": checks}, indent=4) + "\n"
