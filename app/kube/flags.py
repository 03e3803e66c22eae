"""What the commands take from kubectl's flags, as kubectl reads them: the namespace -n defaults to (the context's),
and --request-timeout's durations. Cheap to import: argparse builds the commands from it before any client loads."""

from __future__ import annotations

import argparse
import os
import re


def context_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace the kubeconfig's context names (kubectl's default for -n), else "default"; in a Pod without
    a kubeconfig or context named, the Pod's own namespace."""
    from kubernetes import config

    if os.environ.get("KUBERNETES_SERVICE_HOST") and not (kubeconfig or context):
        try:
            with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace", encoding="utf-8") as file:
                return file.read().strip() or "default"
        except OSError:
            return "default"
    contexts, active = config.list_kube_config_contexts(config_file=kubeconfig or os.environ.get("KUBECONFIG"))
    if context:
        active = next((c for c in contexts if c.get("name") == context), active)
    return str((active.get("context") or {}).get("namespace") or "default")


def add_kubeconfig_flags(parser: argparse.ArgumentParser, timeout: float | None = None) -> None:
    """kubectl's --context and --kubeconfig, and (with a default ``timeout``) --request-timeout, as every command
    that reads the cluster takes them."""
    parser.add_argument("--context", help="the kubeconfig context to use")
    parser.add_argument("--kubeconfig", help="path to the kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    if timeout is not None:
        parser.add_argument(
            "--request-timeout",
            type=request_timeout,
            default=timeout,
            metavar="DURATION",
            help="how long to wait for each API request (1s, 2m; 0: no limit; default %(default)ss)",
        )


def request_timeout(text: str) -> float | None:
    """kubectl's --request-timeout: seconds, or a number with a unit (500ms, 1s, 2m, 1h); 0 waits for ever."""
    found = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)?", text.strip())
    if not found:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: a number with a unit, such as 1s, 2m, 500ms")
    seconds = float(found.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[found.group(2) or "s"]
    return seconds or None
