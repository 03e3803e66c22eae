"""Process lifecycle the views need to see: the worker sets ``stopping`` on SIGTERM, /readyz turns unready."""

from __future__ import annotations

import threading

stopping = threading.Event()
