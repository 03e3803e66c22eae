"""Process lifecycle the views and the worker need to see: the worker sets ``stopping`` on SIGTERM, /readyz turns
unready; the quota sets ``shedding`` while it cannot reach the API server (app/quota/contact.py): /readyz is
unready then, and the worker closes its kept-alive connections as it does on SIGTERM."""

from __future__ import annotations

import threading

stopping = threading.Event()
shedding = threading.Event()
