"""hami-webhook: HAMi's mutating admission policy for GPU Pods, as a Flask app."""

from __future__ import annotations

import atexit
import logging

from flask import Flask

from app.http import Webhook, install
from app.quota import QuotaOff, QuotaPort
from app.quota.kube import QuotaStartError, open_quota
from app.settings import Settings


def create_app(settings: Settings | None = None, quota: QuotaPort | None = None) -> Flask:
    """The WSGI app. Without arguments (gunicorn's entry, run in each worker after the fork) the settings
    come from the environment and quota from HAMI_QUOTA_ENABLED, with a feed per worker process; with
    settings given, quota defaults to off."""
    if settings is None:
        settings = Settings.from_env()
        if quota is None:
            quota = _open_quota(settings)
    app = Flask(__name__)
    install(app, Webhook(settings, quota or QuotaOff()))
    return app


def _open_quota(settings: Settings) -> QuotaPort:
    try:
        quota = open_quota(settings)
    except QuotaStartError as exc:  # gunicorn halts when a worker fails to boot
        logging.getLogger("hami_webhook.quota").error("%s", exc)
        raise
    atexit.register(quota.stop)
    return quota
