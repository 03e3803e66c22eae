"""Prometheus collectors, defined once, and the hooks that feed them.

gunicorn runs several worker processes, so the collectors use prometheus_client's multiprocess mode:
each process writes its values to files in PROMETHEUS_MULTIPROC_DIR, and one plain-HTTP server in
the gunicorn master (HAMI_METRICS_BIND) merges them per scrape. prometheus_client picks in-memory or
file storage when it is first imported, so this module imports it only inside functions: in gunicorn
that happens in the master after ``prepare_multiprocess`` and in each worker after the fork.
Without the directory (tests, ``hami-webhook review``) the same collectors count in memory.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from prometheus_client import Counter, Gauge, Histogram

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
QUOTA_FILE = "quota-{pid}.json"  # a worker's quota figures in the multiprocess directory (its *.db are the rest)
WEBHOOK = "/webhook"  # controller-runtime labels requests with the webhook's path
log = logging.getLogger("hami_webhook.metrics")


@dataclass(frozen=True)
class Collectors:
    requests: Counter
    latency: Histogram
    in_flight: Gauge
    decisions: Counter
    device_matches: Counter
    quota_denials: Counter
    warnings: Counter
    certificate_expiry: Gauge
    certificate_loads: Counter
    certificate_rejections: Counter
    quota_feed_synced: Gauge
    quota_ledger_writes: Counter
    quota_ledger_full: Counter
    quota: QuotaGauges
    fits_nowhere: Counter
    inventory_nodes: Gauge
    inventory_devices: Gauge
    inventory_updated: Gauge


QuotaRow = tuple[str, str, str, int, int, int, int]
"""One quota'd namespace's resource: namespace, resource, the ResourceQuota setting its limit, limit, used, held,
and of held what gangs hold for members not created yet."""


class QuotaGauges:
    """The per-namespace quota gauges, labelled as HAMi's scheduler labels hami_resource_quota_used/_limit
    (``quota_name`` is the resource) plus ``resourcequota``, the object whose limit applies.

    A custom collector (prometheus_client's documented extension point), not Gauges: a namespace whose quota went,
    or a limit that changed (a label), must leave no series, which multiprocess gauge files cannot forget. Each
    worker publishes its whole set (``quota_standings``); a scrape reads the newest one: no API call, no lock.
    """

    NAMES: ClassVar[dict[str, str]] = {
        "hami_webhook_quota_limit": "The namespace's device quota limit for the resource: the smallest of its "
        "ResourceQuotas (label resourcequota names it).",
        "hami_webhook_quota_used": "What the namespace's Pods use of the resource, with HAMi's arithmetic.",
        "hami_webhook_quota_held": "Room the quota ledger holds for the namespace's Pods admitted but not seen yet.",
        "hami_webhook_quota_held_for_gangs": "Of the room held, what gangs hold for members not created yet.",
    }

    def __init__(self) -> None:
        self.rows: Sequence[QuotaRow] = ()  # without a multiprocess directory: this process's own

    def describe(self) -> list[Any]:
        return list(self._families([]))

    def collect(self) -> Iterator[Any]:
        directory = os.environ.get(MULTIPROC_ENV)
        rows = _newest_rows(directory) if directory else self.rows
        if rows:  # no quota'd namespace (or quota off): not even the families' HELP lines
            yield from self._families(rows)

    def _families(self, rows: Sequence[QuotaRow]) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        # as HAMi's: the limit gauge has no limit label, the others have it
        labels = ["namespace", "quota_name", "limit", "resourcequota"]
        texts = self.NAMES
        limit, used, held, gangs = (
            GaugeMetricFamily(name, texts[name], labels=labels if name != LIMIT else labels[:2] + labels[3:])
            for name in texts
        )
        for namespace, resource, quota, amount, in_use, in_ledger, for_gangs in rows:
            limit.add_metric([namespace, resource, quota], amount)
            used.add_metric([namespace, resource, str(amount), quota], in_use)
            held.add_metric([namespace, resource, str(amount), quota], in_ledger)
            gangs.add_metric([namespace, resource, str(amount), quota], for_gangs)
        yield from (limit, used, held, gangs)


LIMIT = "hami_webhook_quota_limit"


def _newest_rows(directory: str) -> list[QuotaRow]:
    """The quota figures the worker that published last published (all workers watch the same streams)."""
    newest: tuple[int, str] | None = None
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.name.startswith("quota-") and entry.name.endswith(".json"):
                stamp = entry.stat().st_mtime_ns
                if newest is None or stamp > newest[0]:
                    newest = (stamp, entry.path)
    if newest is None:
        return []
    try:
        with open(newest[1], encoding="utf-8") as file:
            return [tuple(row) for row in json.load(file)]
    except (OSError, ValueError):  # removed as its worker died, between the scan and the read
        return []


@cache
def collectors() -> Collectors:
    """The process's collectors, created on first use (after the multiprocess directory is known)."""
    from prometheus_client import Counter, Gauge, Histogram

    found = Collectors(
        # controller-runtime's names, labels and (default) buckets, so its dashboards and alerts apply.
        requests=Counter(
            "controller_runtime_webhook_requests", "Total number of admission requests by HTTP status code.",
            ["webhook", "code"],
        ),
        latency=Histogram(
            "controller_runtime_webhook_latency_seconds", "Histogram of the latency of processing admission requests",
            ["webhook"],
        ),
        in_flight=Gauge(
            "controller_runtime_webhook_requests_in_flight", "Current number of admission requests being served.",
            ["webhook"], multiprocess_mode="livesum",
        ),
        decisions=Counter(
            "hami_webhook_decisions", "Admission decisions: outcome patched | passed (allowed unchanged) | denied, "
            "and the status reason of denials.", ["outcome", "reason"],
        ),
        device_matches=Counter(
            "hami_webhook_device_matches", "Pods admitted with a device request, by device backend.", ["device"]
        ),
        quota_denials=Counter(
            "hami_webhook_quota_denials", "Pods denied for exceeding their namespace's device quota, by cause: limit "
            "(the Pod's own room) or gang (the room of its gang's members together).", ["namespace", "cause"],
        ),
        warnings=Counter(
            "hami_webhook_warnings", "Admission warnings found for admitted Pods, by kind (docs/annotations.md).",
            ["kind"],
        ),
        # livemin: the soonest expiry among live processes, so a worker still serving an old certificate shows.
        certificate_expiry=Gauge(
            "hami_webhook_certificate_expiry_timestamp_seconds",
            "Expiry (notAfter, Unix seconds) of the serving certificate; the soonest across worker processes.",
            multiprocess_mode="livemin",
        ),
        certificate_loads=Counter(
            "hami_webhook_certificate_loads", "Serving certificate loads now served (start-up and reloads)."
        ),
        certificate_rejections=Counter(
            "hami_webhook_certificate_reload_rejections", "Changed certificate/key pairs refused by the reloader."
        ),
        quota_feed_synced=Gauge(
            "hami_webhook_quota_feed_synced", "1 when the quota feed's list+watch of this resource is in sync, "
            "else 0; the minimum across worker processes.", ["resource"], multiprocess_mode="livemin",
        ),
        quota_ledger_writes=Counter(
            "hami_webhook_quota_ledger_writes", "Compare-and-swap writes of quota ledgers: written | conflict "
            "(another worker wrote first; decided again).", ["outcome"],
        ),
        quota_ledger_full=Counter(
            "hami_webhook_quota_ledger_full", "Admissions refused (HTTP 500) because the namespace's quota ledger "
            "could hold no more reservations of Pods not seen yet.", ["namespace"],
        ),
        quota=QuotaGauges(),
        fits_nowhere=Counter(
            "hami_webhook_fits_nowhere", "Device containers no registered node could hold, even on an empty cluster "
            "(warned, or denied with HAMI_FITS_NOWHERE=deny), by namespace and the device resource asked.",
            ["namespace", "resource"],
        ),
        inventory_nodes=Gauge(
            "hami_webhook_inventory_nodes", "Nodes registering devices of the vendor, as the device inventory knows "
            "them; the largest across worker processes.", ["vendor"], multiprocess_mode="livemax",
        ),
        inventory_devices=Gauge(
            "hami_webhook_inventory_devices", "Devices of the vendor registered on Nodes, as the device inventory "
            "knows them; the largest across worker processes.", ["vendor"], multiprocess_mode="livemax",
        ),
        inventory_updated=Gauge(
            "hami_webhook_inventory_updated_timestamp_seconds", "When the device inventory's Node watch was last "
            "known current (Unix seconds; its age is time() minus it); the oldest across worker processes.",
            multiprocess_mode="livemin",
        ),
    )  # fmt: skip
    from prometheus_client import REGISTRY

    REGISTRY.register(found.quota)  # in memory (no multiprocess directory); the master registers its own
    # Exported from the start (0 in flight, an empty histogram), not only after a worker's first request.
    found.in_flight.labels(WEBHOOK)
    found.latency.labels(WEBHOOK)
    return found


def expect_warnings(kinds: Iterable[str]) -> None:
    """Export a zero for each kind of warning from the start, not only after its first: the admission policy
    names its kinds (app.serving.http's install passes them), so this module depends on no concern."""
    for kind in kinds:
        collectors().warnings.labels(kind)


# --- hooks other parts call ------------------------------------------------------------------------


def certificate_loaded(not_after_unix: float) -> None:
    """The reloader's ``on_loaded``: a certificate expiring at ``not_after_unix`` is now served."""
    found = collectors()
    found.certificate_expiry.set(not_after_unix)
    found.certificate_loads.inc()


def certificate_rejected() -> None:
    """The reloader's ``on_rejected``: a changed pair was refused (the old one is still served)."""
    collectors().certificate_rejections.inc()


def quota_feed_synced(resource: str, synced: bool) -> None:
    """The quota feed's list+watch of ``resource`` (pods, resourcequotas) is (or is no longer) in sync."""
    collectors().quota_feed_synced.labels(resource).set(1 if synced else 0)


def quota_standings(rows: Sequence[QuotaRow]) -> None:
    """This process's quota figures now, replacing the ones it published before (an empty list: none)."""
    directory = os.environ.get(MULTIPROC_ENV)
    if not directory:
        collectors().quota.rows = list(rows)
        return
    path = os.path.join(directory, QUOTA_FILE.format(pid=os.getpid()))
    with tempfile.NamedTemporaryFile("w", dir=directory, prefix=".quota-", delete=False, encoding="utf-8") as file:
        json.dump(list(rows), file, separators=(",", ":"))
    os.replace(file.name, path)  # whole or not at all: a scrape never reads half a file


def quota_ledger_write(outcome: str) -> None:
    """A ledger compare-and-swap ended: ``written`` or ``conflict``."""
    collectors().quota_ledger_writes.labels(outcome).inc()


def quota_ledger_full(namespace: str) -> None:
    """An admission in ``namespace`` found its ledger full (answered HTTP 500)."""
    collectors().quota_ledger_full.labels(namespace).inc()


def inventory(nodes: Mapping[str, int], devices: Mapping[str, int], updated: float) -> None:
    """The device inventory's size per vendor and when its watch was last known current (0: never listed)."""
    found = collectors()
    for vendor, count in nodes.items():
        found.inventory_nodes.labels(vendor).set(count)
    for vendor, count in devices.items():
        found.inventory_devices.labels(vendor).set(count)
    if updated:
        found.inventory_updated.set(updated)


def policy_scheduler(policy: str, *, mismatched: bool) -> None:
    """The master's comparison at start: whether installed admission policy ``policy`` names another scheduler than
    HAMI_SCHEDULER_NAME (1) or the same (0)."""
    _policy_scheduler().labels(policy).set(1 if mismatched else 0)


@cache
def _policy_scheduler() -> Gauge:
    """Apart from ``collectors()``: only the master sets it, and the workers' collectors must not be made in the
    master (their gauges would count its process too)."""
    from prometheus_client import Gauge

    return Gauge(
        "hami_webhook_policy_scheduler_mismatch",
        "1 when the installed admission policy names another scheduler than HAMI_SCHEDULER_NAME (compared at start).",
        ["policy"],
        multiprocess_mode="max",
    )


def failure_policy_ignored_since(seconds: float) -> None:
    """The master's watch of the webhook configuration: since when its failurePolicy is Ignore (Unix seconds), 0
    while it is Fail."""
    _ignored_since().set(seconds)


@cache
def _ignored_since() -> Gauge:
    """Apart from ``collectors()``, as ``_policy_scheduler``: only the master sets it."""
    from prometheus_client import Gauge

    return Gauge(
        "hami_webhook_failure_policy_ignored_since_timestamp_seconds",
        "Since when (Unix seconds) the webhook configuration's failurePolicy is Ignore (the emergency switch left "
        "on: device Pods are admitted unrouted whenever a call fails); 0 while it is Fail. Read every 30 s.",
        multiprocess_mode="max",
    )


def master_gauges() -> tuple[Gauge, ...]:
    """The gauges only the master sets, for whoever lists what the webhook exports (the alert rules' test)."""
    return (_policy_scheduler(), _ignored_since())


# --- gunicorn master: the shared directory and the HTTP server -----------------------------------


def prepare_multiprocess(parent: str | None) -> str:
    """A fresh, empty directory for this server's per-process files (on ``parent``, a tmpfs), exported
    to every process forked from now on. Fresh per start, so files of an earlier run never count."""
    directory = tempfile.mkdtemp(prefix="hami-metrics-", dir=parent)
    os.environ[MULTIPROC_ENV] = directory
    return directory


def remove_multiprocess() -> None:
    directory = os.environ.pop(MULTIPROC_ENV, "")
    if directory:
        shutil.rmtree(directory, ignore_errors=True)


def process_dead(pid: int) -> None:
    """Drop a dead worker's live gauges (in-flight, certificate expiry, quota sync); its counters stay."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid)
    directory = os.environ.get(MULTIPROC_ENV)
    if directory:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(directory, QUOTA_FILE.format(pid=pid)))


def serve(bind: str) -> tuple[str, int]:
    """Serve /metrics over plain HTTP on ``bind`` (host:port) from a thread, merging every process's files.

    Returns the bound address (port 0 picks a free one). Raises OSError when the address is taken.
    """
    from prometheus_client import CollectorRegistry, multiprocess, start_http_server

    host, _, port = bind.rpartition(":")
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    registry.register(QuotaGauges())
    server, _thread = start_http_server(int(port), host.strip("[]") or "0.0.0.0", registry=registry)
    address = server.server_address
    return str(address[0]), int(address[1])


# --- per request (app.serving.http) -----------------------------------------------------------------------


@cache
def _child(metric: str, *labels: str) -> Any:
    """A labelled child, looked up once per label set: ``labels()`` costs more than the update itself.
    Only for label sets from a fixed, small set (codes, outcomes, reasons, devices, the path)."""
    return getattr(collectors(), metric).labels(*labels)


def request_started() -> None:
    _child("in_flight", WEBHOOK).inc()


def request_finished(code: int, seconds: float) -> None:
    _child("in_flight", WEBHOOK).dec()
    _child("requests", WEBHOOK, str(code)).inc()
    _child("latency", WEBHOOK).observe(seconds)


def decided(
    outcome: str,
    reason: str,
    *,
    devices: tuple[str, ...] = (),
    warnings: tuple[str, ...] = (),
    quota_denied: tuple[str, str] | None = None,
    unfit: tuple[str, ...] = (),
    namespace: str = "",
) -> None:
    """One admission decision; ``devices`` are the backends a patched Pod matched, ``warnings`` the kinds of
    the warnings the Pod's author was given (one entry per warning), ``quota_denied`` the namespace of a Pod
    its namespace's GPU quota refused and the denial's cause (``limit``, or ``gang``: its gang's room together),
    ``unfit`` the resource of each container that fits nowhere, in ``namespace``."""
    _child("decisions", outcome, reason).inc()
    for device in devices:
        _child("device_matches", device).inc()
    for kind in warnings:
        _child("warnings", kind).inc()
    if quota_denied is not None:  # namespaces are many: not cached
        collectors().quota_denials.labels(*quota_denied).inc()
    for resource in unfit:  # namespaces are many: not cached
        collectors().fits_nowhere.labels(namespace, resource).inc()
