"""hami-webhook: HAMi's mutating admission policy for GPU Pods, as a Flask app.

Importing ``app`` or any module in it is cheap and has no side effect: Flask, the Kubernetes client
and the settings are loaded by ``create_app``, the factory gunicorn calls in each worker.
"""

from __future__ import annotations

import atexit
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flask import Flask

    from app.admission.fits import InventoryPort
    from app.admission.ports import QuotaPort
    from app.readiness import Readiness
    from app.settings import Settings


def create_app(
    settings: Settings | None = None, quota: QuotaPort | None = None, inventory: InventoryPort | None = None
) -> Flask:
    """The WSGI app. Without arguments (gunicorn's entry, run in each worker after the fork) the settings
    come from the environment, quota from HAMI_QUOTA_ENABLED, with a feed per worker process, and the device
    inventory from HAMI_FITS_NOWHERE, a Node watch per worker process; with settings given, both default to off."""
    from app.admission.fits import NO_INVENTORY
    from app.admission.ports import QuotaOff
    from app.readiness import Readiness
    from app.serving.http import Webhook, WebhookApp, install
    from app.settings import Settings

    readiness = Readiness()  # the worker reads it from the app; the quota, when on, sets its shedding
    if settings is None:
        settings = Settings.from_env()
        if quota is None:
            quota = _open_quota(settings, readiness)
        if inventory is None:
            inventory = _open_inventory(settings)
    app = WebhookApp(__name__)
    install(app, Webhook(settings, quota or QuotaOff(), readiness, inventory or NO_INVENTORY))
    return app


def _open_inventory(settings: Settings) -> InventoryPort:
    from app.admission.fits import FitsCheck, NoInventory

    if settings.fits_nowhere is FitsCheck.OFF:
        return NoInventory("HAMI_FITS_NOWHERE=off")
    from app.inventory.startup import open_inventory

    inventory = open_inventory(settings.devices)
    stop = getattr(inventory, "stop", None)
    if stop is not None:
        atexit.register(stop)
    return inventory


def _open_quota(settings: Settings, readiness: Readiness) -> QuotaPort:
    from app.quota.startup import QuotaStartError, open_quota

    try:
        quota = open_quota(settings, readiness)
    except QuotaStartError as exc:  # gunicorn halts when a worker fails to boot
        logging.getLogger("hami_webhook.quota").error("%s", exc)
        raise
    atexit.register(quota.stop)
    return quota
