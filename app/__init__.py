"""hami-webhook: HAMi's mutating admission policy for GPU Pods, as a Flask app."""

from __future__ import annotations

from flask import Flask

from app.http import Webhook, install
from app.quota import QuotaOff, QuotaPort
from app.settings import Settings


def create_app(settings: Settings | None = None, quota: QuotaPort | None = None) -> Flask:
    """The WSGI app; settings default to the environment, quota to off (no cluster)."""
    app = Flask(__name__)
    install(app, Webhook(settings or Settings.from_env(), quota or QuotaOff()))
    return app
