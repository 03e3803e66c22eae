"""Whether this process should be sent reviews: one object, made where the app is made (``create_app``) and handed
to the parts that set or read it, so no part reaches another through a module global.

- ``stopping``: the worker sets it on SIGTERM; /readyz turns unready at once.
- ``shedding``: the quota sets it while it cannot reach the API server (app/quota/contact.py); /readyz is unready
  then, and the worker closes its kept-alive connections as it does on SIGTERM, so the API server's pooled
  connections move to a replica that can decide.
"""

from __future__ import annotations

import threading


class Readiness:
    """The two reasons a live process is not ready, each an Event its setter and its readers share."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.shedding = threading.Event()
