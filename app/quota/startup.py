"""How the quota port is built from the settings: off, or QuotaEvaluator with its Committer and Contact, on a Feed
filled by its FeedStreams, the gauges' thread publishing from it, and the ledger Leases of the API server.

The settings are read through QuotaSettings, declared here: the composition at the top (app/settings.py) supplies
them, and nothing here imports it. The Kubernetes client and the feed are imported when quota is opened, so the
settings (and the commands that only read them, such as ``hami-webhook review``) stay cheap to import."""

from __future__ import annotations

import logging
import threading
import uuid
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from app.admission.devices.base import Device
from app.admission.ports import QuotaOff, QuotaPort
from app.readiness import Readiness

if TYPE_CHECKING:
    from kubernetes import client

log = logging.getLogger("hami_webhook.quota")


class QuotaMode(StrEnum):
    """What HAMI_QUOTA_ENABLED asks of the namespace device quota at start-up; the values are the variable's."""

    AUTO = "auto"
    """On when an in-cluster configuration or a kubeconfig loads, else off."""
    REQUIRED = "true"
    """On; start-up fails without a usable Kubernetes API."""
    OFF = "false"


class QuotaSettings(Protocol):
    """The knobs and device backends the quota reads (app/settings.py's Settings is one)."""

    @property
    def quota_mode(self) -> QuotaMode: ...
    @property
    def home_namespace(self) -> str: ...
    @property
    def quota_reservation_ttl(self) -> int: ...
    @property
    def quota_gang_hold(self) -> int: ...
    @property
    def quota_stale_after(self) -> int: ...
    @property
    def devices(self) -> tuple[Device, ...]: ...


class QuotaStartError(RuntimeError):
    """HAMI_QUOTA_ENABLED=true but the Kubernetes API cannot be used."""


def open_quota(settings: QuotaSettings, readiness: Readiness) -> QuotaPort:
    """The port HAMI_QUOTA_ENABLED asks for, started (call once per process, after any fork).

    Raises QuotaStartError when quota is required and the API cannot be used.
    """
    if settings.quota_mode is QuotaMode.OFF:
        return QuotaOff("HAMI_QUOTA_ENABLED=false")
    from kubernetes import client

    from app.kube.config import LOAD_ERRORS, load_configuration
    from app.quota.committer import Committer
    from app.quota.contact import Contact
    from app.quota.evaluator import QuotaEvaluator
    from app.quota.feed import gauges
    from app.quota.feed.feed import Feed
    from app.quota.feed.life import FeedStreams
    from app.quota.lease import KubeLeases
    from app.quota.ports import SYSTEM_CLOCK

    try:
        configuration = load_configuration()
    except LOAD_ERRORS as exc:
        if settings.quota_mode is QuotaMode.REQUIRED:
            raise QuotaStartError(f"HAMI_QUOTA_ENABLED=true but no Kubernetes API configuration: {exc}") from exc
        log.warning("namespace device quota is off: no in-cluster config or kubeconfig (%s)", exc)
        return QuotaOff(f"no in-cluster config or kubeconfig: {exc}")
    # urllib3's pool retries a request that got no answer three more times, each with a fresh timeout: a ledger
    # read or compare-and-swap write would outlive the admission's budget, and a write must never be re-sent
    # blindly. Every quota request is tried once, within its own timeout; its caller decides what comes next.
    configuration.retries = False
    if settings.quota_mode is QuotaMode.REQUIRED:
        _probe(configuration)
    ttl = settings.quota_reservation_ttl
    home, hold = settings.home_namespace, settings.quota_gang_hold
    feed = Feed(settings.devices, forget_after=ttl, monotonic=SYSTEM_CLOCK.monotonic)
    streams = FeedStreams(client.ApiClient(configuration), feed, home=home, gangs=hold > 0)
    published = (feed.standings, feed.wait_synced, streams.stopping)
    publisher = threading.Thread(target=gauges.publish, args=published, name="quota gauges", daemon=True)
    leases = KubeLeases.of(client.ApiClient(configuration), settings.home_namespace)
    committer = Committer(feed, leases, ttl=ttl, clock=SYSTEM_CLOCK, new_id=lambda: uuid.uuid4().hex, hold_ttl=hold)
    contact = Contact(leases.probe, streams.quota_in_play, streams.nudge, SYSTEM_CLOCK, readiness.shedding)
    port = QuotaEvaluator(
        feed,
        streams,
        committer,
        contact,
        settings.devices,
        stale_after=settings.quota_stale_after,
        groups=feed,
        gang_hold=hold,
        gauges=publisher,
    )
    port.start()
    log.info(
        "namespace device quota is on: API %s, ledger in namespace %s", configuration.host, settings.home_namespace
    )
    return port


def _probe(configuration: client.Configuration) -> None:
    from kubernetes import client

    from app.kube.errors import describe

    with client.ApiClient(configuration) as api_client:
        try:
            client.CoreV1Api(api_client).list_resource_quota_for_all_namespaces(limit=1, _request_timeout=5)
        except Exception as exc:
            where = configuration.host
            raise QuotaStartError(
                f"HAMI_QUOTA_ENABLED=true but the Kubernetes API at {where} cannot be used: {describe(exc)}"
            ) from exc
