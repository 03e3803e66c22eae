"""``hami-webhook quota`` (also ``kubectl hami quota``): where quota'd namespaces stand, read with the caller's
kubeconfig: their ResourceQuotas, Pods and ledger Leases, counted by app/quota/core/standing.py on the same tables the
admission decides on. It only reads (get, list); the RBAC it needs ships as hami-webhook-quota-viewer.

Exit codes, as kubectl's: 0 the figures printed, 1 anything that stopped them (each a one-line ``error:``).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.kube.flags import add_kubeconfig_flags, context_namespace
from app.kube.printing import LIST_FORMATS

if TYPE_CHECKING:
    from kubernetes import client

    from app.quota.core.standing import Standing
    from app.quota.startup import QuotaSettings

FAILED = 1
TIMEOUT = 10.0  # seconds per API request
LEASES = "leases.coordination.k8s.io"
VIEWER = "hami-webhook-quota-viewer"
RBAC_PAGE = 'docs/operations.md, "Looking at quota"'  # where binding the viewer's roles is shown


class QuotaCommandError(Exception):
    """What stops the command, in one line."""


def add_quota_command(commands: Any, settings: Callable[[argparse.Namespace], QuotaSettings]) -> None:
    """Register ``quota`` on the CLI's subcommands (argparse only: the Kubernetes client loads when it runs);
    ``settings`` reads them for the parsed arguments (the CLI's own loader, --config included)."""
    quota = commands.add_parser(
        "quota",
        help="show each quota'd namespace's device quota: limit, used, held, free (reads only)",
        description="Print, per namespace and resource, the device quota's LIMIT (the smallest ResourceQuota), "
        "what its Pods USE, what the quota ledger HOLDs for Pods admitted but not seen yet, what is FREE for "
        "certain (LIMIT - USED - HELD: what the next Pods can have at once), and the PODS counted, with the "
        "admission's own arithmetic. Reads ResourceQuotas, Pods and the ledger Leases with your kubeconfig "
        "(RBAC: hami-webhook-quota-viewer). Exit 0 printed (or nothing found), 1 error.",
    )
    scope = quota.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", help="the namespace (default: the kubeconfig context's)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace with a device quota")
    quota.add_argument(
        "-l", "--selector", help="with -A: only namespaces with these labels (kubectl's syntax: team=a,tier!=dev)"
    )
    quota.add_argument(
        "-o", "--output", choices=("wide", "json", "yaml", "name"), help="output format (default: a table)"
    )
    quota.add_argument("--no-headers", action="store_true", help="print the table without its header line")
    add_kubeconfig_flags(quota, TIMEOUT)
    quota.add_argument(
        "--webhook-namespace",
        help="where the webhook keeps its ledger Leases (default: HAMI_NAMESPACE, else hami-system)",
    )
    quota.add_argument(
        "--config", help="HAMi device config YAML, or its ConfigMap (default: HAMI_DEVICE_CONFIG or the chart's)"
    )
    quota.set_defaults(run=functools.partial(run, settings=settings))


def run(args: argparse.Namespace, settings: Callable[[argparse.Namespace], QuotaSettings]) -> int:
    if args.selector is not None and not args.all_namespaces:
        args.parser.error("-l/--selector picks namespaces: use it with -A")
    try:
        found = collect(args, settings)
    except QuotaCommandError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return FAILED
    if not found.standings and args.output not in LIST_FORMATS:
        from app.kube.printing import nothing_found

        print(nothing_found(found.namespace), file=sys.stderr)
        return 0
    print(
        render(found.standings, args.output, wide_scope=bool(args.all_namespaces), headers=not args.no_headers), end=""
    )
    return 0


@dataclass(frozen=True)
class Shown:
    namespace: str | None  # the one asked for, which "No resources found" names; None: every namespace
    standings: list[Standing]


@dataclass(frozen=True)
class Target:
    namespace: str | None  # None: every namespace
    home: str  # the webhook's namespace: its ledger Leases


def collect(args: argparse.Namespace, load: Callable[[argparse.Namespace], QuotaSettings]) -> Shown:
    """The standings asked for (none: no device quota there); QuotaCommandError for anything that stops them."""
    from app.kube.config import load_configuration
    from app.quota.core.standing import standing
    from app.quota.feed.tables import PodTable, QuotaTable, say_uncounted, view

    try:
        settings = load(args)
    except ValueError as exc:  # the settings' own error (SettingsError) names the variable
        raise QuotaCommandError(f"invalid setting: {exc}") from exc
    try:
        configuration = load_configuration(args.kubeconfig, context=args.context)
        namespace = None if args.all_namespaces else args.namespace or context_namespace(args.kubeconfig, args.context)
    except Exception as exc:  # LOAD_ERRORS, and a file that is not YAML or not a kubeconfig: the loader's own errors
        where = args.kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise QuotaCommandError(f"cannot load the kubeconfig ({where}): {_one_line(exc)}") from exc
    target = Target(namespace, args.webhook_namespace or settings.home_namespace)
    api = _api(configuration)
    try:
        reads = Reads(api, target, args.request_timeout)
        quotas = QuotaTable(settings.devices)
        quotas.replace(reads.resource_quotas())
        namespaces = sorted(quotas.namespaces())
        if args.selector is not None:
            labelled = reads.namespaces(args.selector)
            namespaces = [ns for ns in namespaces if ns in labelled]
        pods = PodTable(settings.devices, forget_after=0)
        for name in namespaces:
            say_uncounted(pods.replace(name, reads.pods(name)))
        ledgers = reads.ledgers(namespaces)
        for name, ledger in ledgers.items():  # the Pods' seals are checked with their namespace's key
            pods.key(name, ledger.key)
        # A reader that just started: every entry is new to it, and holds its room for its whole life from now.
        now, ttl = time.monotonic(), settings.quota_reservation_ttl
        found = [
            standing(view(ns, quotas, pods, ledgers.get(ns)), quotas.objects(ns), pods.count(ns), now=now, ttl=ttl)
            for ns in namespaces
        ]
        return Shown(target.namespace, found)
    finally:
        api.close()


def _api(configuration: client.Configuration) -> client.ApiClient:
    from kubernetes import client

    configuration.retries = False  # one try per request: a user waits for an answer, not for urllib3's retries
    return client.ApiClient(configuration)


class Reads:
    """The GETs and LISTs the command makes, each failure turned into one line naming what was refused."""

    def __init__(self, api: client.ApiClient, target: Target, timeout: float | None) -> None:
        self._api = api
        self._target = target
        self._timeout = timeout

    def resource_quotas(self) -> list[dict[str, Any]]:
        ns = self._target.namespace
        if ns is None:
            return self._list("/api/v1/resourcequotas", "list resourcequotas in all namespaces")
        self._namespace_exists(ns)
        return self._list(f"/api/v1/namespaces/{ns}/resourcequotas", f"list resourcequotas in namespace {ns}")

    def pods(self, namespace: str) -> list[dict[str, Any]]:
        return self._list(f"/api/v1/namespaces/{namespace}/pods", f"list pods in namespace {namespace}")

    def namespaces(self, selector: str) -> set[str]:
        """The names of the namespaces ``selector`` picks (-l)."""
        listed = self._list("/api/v1/namespaces", "list namespaces", {"labelSelector": selector})
        return {ns["metadata"]["name"] for ns in listed}

    def ledgers(self, namespaces: Sequence[str]) -> dict[str, Any]:
        """Each namespace's ledger as stored (absent: nothing held); a ledger that does not parse is an error."""
        from app.quota.core.encoding import LEDGER_PREFIX, MANAGED_BY, decode

        home = self._target.home
        base = f"/apis/coordination.k8s.io/v1/namespaces/{home}/leases"
        leases: dict[str, dict[str, Any]] = {}
        if self._target.namespace is None:
            query = {"labelSelector": MANAGED_BY}
            listed = self._list(base, f"list {LEASES} in namespace {home}", query)
            leases = {lease["metadata"]["name"][len(LEDGER_PREFIX) :]: lease for lease in listed}
        for ns in namespaces:
            if self._target.namespace is not None:
                name = f"{LEDGER_PREFIX}{ns}"
                found = self._get(f"{base}/{name}", f"get {LEASES} {name} in namespace {home}")
                if found is not None:
                    leases[ns] = found
            if ns in leases:
                malformed(leases[ns], home)
        return {ns: decode(ns, lease) for ns, lease in leases.items() if ns in namespaces}

    def _namespace_exists(self, ns: str) -> None:
        from app.kube.errors import ApiError

        try:
            self._get(f"/api/v1/namespaces/{ns}", f"get namespace {ns}", missing_ok=False)
        except QuotaCommandError as exc:
            if isinstance(exc.__cause__, ApiError) and exc.__cause__.code == 404:
                raise QuotaCommandError(f'namespaces "{ns}" not found') from exc
            if isinstance(exc.__cause__, ApiError) and exc.__cause__.code == 403:
                return  # no right to look at namespaces: its ResourceQuotas will tell
            raise

    def _list(self, path: str, action: str, query: dict[str, str] | None = None) -> list[dict[str, Any]]:
        found = self._request(path, action, query)
        assert found is not None
        return list(found.get("items") or [])

    def _get(self, path: str, action: str, missing_ok: bool = True) -> dict[str, Any] | None:
        from app.kube.errors import NOT_FOUND, ApiError

        try:
            return self._request(path, action, None)
        except QuotaCommandError as exc:
            if missing_ok and isinstance(exc.__cause__, ApiError) and exc.__cause__.code == NOT_FOUND:
                return None
            raise

    def _request(self, path: str, action: str, query: dict[str, str] | None) -> dict[str, Any] | None:
        from app.kube.errors import ApiError
        from app.kube.transport import request

        try:
            return request(self._api, "GET", path, timeout=self._timeout, query=query, action=action)
        except ApiError as exc:
            if exc.code == 403:
                hint = f"; bind the {VIEWER} ClusterRole, and its Role in {self._target.home} ({RBAC_PAGE})"
                raise QuotaCommandError(f"forbidden: cannot {action}: {exc.message}{hint}") from exc
            raise QuotaCommandError(f"cannot {action}: {exc.http_line()}") from exc
        except Exception as exc:  # no answer: TLS, DNS, refused, timed out
            host = self._api.configuration.host
            raise QuotaCommandError(
                f"cannot {action}: the API server at {host} did not answer: {_one_line(exc)}"
            ) from exc


def malformed(lease: Mapping[str, Any], home: str) -> None:
    """QuotaCommandError when the ledger annotation is not what the webhook writes (a hand edit): the webhook
    drops what it cannot read, so the figures would hide it."""
    from app.quota.core.encoding import LEDGER_ANNOTATION, decode

    name = (lease.get("metadata") or {}).get("name") or ""
    text = ((lease.get("metadata") or {}).get("annotations") or {}).get(LEDGER_ANNOTATION)
    if text is None:
        return
    where = f"quota ledger {home}/{name} is malformed: annotation {LEDGER_ANNOTATION}"
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise QuotaCommandError(f"{where} is not JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise QuotaCommandError(f"{where} is not a JSON object")
    parsed = decode(name, lease).entries
    bad = sorted(str(k) for k in raw if str(k) not in parsed)
    if bad:
        raise QuotaCommandError(f"{where}: entry {bad[0]!r} lacks a numeric expires or amounts")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


# --- output --------------------------------------------------------------------------------------------------


def rows(found: Sequence[Standing]) -> list[dict[str, Any]]:
    """One item per namespace and resource (the JSON/YAML output)."""
    out = []
    for one in found:
        for figure in one.figures:
            hold = one.oldest
            out.append(
                {
                    "namespace": one.namespace,
                    "resource": figure.resource,
                    "limit": figure.limit,
                    "used": figure.used,
                    "held": figure.held,
                    "free": figure.free,
                    "pods": one.pods,
                    "resourceQuota": figure.quota,
                    "oldestHold": None if hold is None else {"id": hold.id, "expiresIn": f"{hold.left:.0f}s"},
                    "heldForGangs": figure.gangs,
                    "gangs": [{"group": g.group, "members": g.members, "size": g.size} for g in one.gangs],
                }
            )
    return out


# The table's columns: (header, the item's field); wide adds its own after them. A figure added to the standing
# is one more pair here (and in WIDE, when it is only for -o wide).
COLUMNS = (("RESOURCE", "resource"), ("LIMIT", "limit"), ("USED", "used"), ("HELD", "held"), ("FREE", "free"))
WIDE = (("RESOURCEQUOTA", "resourceQuota"),)
WIDE_AFTER = ("OLDEST-HOLD", "EXPIRES-IN", "HELD-FOR-GANGS", "GANGS")
"""-o wide's columns made from more than one field, after WIDE's."""


def render(found: Sequence[Standing], output: str | None, *, wide_scope: bool, headers: bool = True) -> str:
    from app.kube.printing import as_list, dump, table

    items = rows(found)
    if output in LIST_FORMATS:
        return dump(as_list(items), output)
    if output == "name":
        return "".join(f"namespace/{one.namespace}\n" for one in found)
    columns = (*COLUMNS, ("PODS", "pods"), *(WIDE if output == "wide" else ()))
    header = [name for name, _ in columns] + (list(WIDE_AFTER) if output == "wide" else [])
    if wide_scope:
        header.insert(0, "NAMESPACE")
    lines = []
    for item in items:
        line = [str(item[field]) for _, field in columns]
        if output == "wide":
            hold = item["oldestHold"] or {"id": "<none>", "expiresIn": "<none>"}
            gangs = ",".join(f"{g['group']}={g['members']}/{g['size']}" for g in item["gangs"]) or "<none>"
            line += [hold["id"], hold["expiresIn"], str(item["heldForGangs"]), gangs]
        lines.append([item["namespace"], *line] if wide_scope else line)
    return table(header, lines, headers=headers)
