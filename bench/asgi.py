"""The webhook's own Flask app as an ASGI app, for gunicorn 27's ``asgi`` worker (bench/serving.py ``--asgi``).

The app is WSGI; a2wsgi's adapter runs each call in a pool of as many threads as our worker's, so the two
workers serve the same app with the same parallelism. Bench-only: the image ships neither a2wsgi nor uvloop.
"""

from __future__ import annotations

import os

from a2wsgi import WSGIMiddleware

from app import create_app

app = WSGIMiddleware(create_app(), workers=int(os.environ.get("HAMI_WEBHOOK_THREADS", "8")))
