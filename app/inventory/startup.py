"""The inventory opened: a paged list and a watch of the Nodes' metadata (PartialObjectMetadata: annotations, never
status), on one daemon thread per process, filling a Store (app/inventory/store.py).

Without a Kubernetes API, the check is off and says so once; without RBAC to list Nodes, the stream retries with
back-off (app/kube/stream.py logs that once) and the check stays quiet until a list succeeds. Never a readiness
condition: a missing inventory only means no fits-nowhere warning.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from app import metrics
from app.admission.fits import Fitting, Inventory, InventoryPort, NoInventory, fitting
from app.inventory.store import Store
from app.kube.stream import Stream, Streams

if TYPE_CHECKING:
    from kubernetes import client

log = logging.getLogger("hami_webhook.inventory")
LIST_ACCEPT = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
WATCH_ACCEPT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
GAUGE_SECONDS = 15.0


class NodeInventory:
    """The InventoryPort of a process: its Store, fed by one Node metadata stream, and the gauges' thread."""

    def __init__(self, api_client: client.ApiClient, vendors: Sequence[Fitting]) -> None:
        from kubernetes import client

        self.store = Store(vendors)
        nodes = client.CoreV1Api(api_client).list_node

        def list_call(**kwargs: Any) -> Any:
            accept = WATCH_ACCEPT if kwargs.get("watch") else LIST_ACCEPT
            return nodes(_headers={"Accept": accept}, **kwargs)

        self._streams = Streams(self._health, feed="device inventory", logger=log.name)
        self._stream = Stream("nodes", "nodes", list_call, self.store.listed, self.store.event)
        self._said_empty = False
        self._gauges = threading.Thread(target=self._publish, name="inventory gauges", daemon=True)

    def start(self) -> None:
        self._streams.start(self._stream)
        self._gauges.start()

    def stop(self) -> None:
        self._streams.stop(timeout=5)

    def current(self) -> Inventory | None:
        return self.store.current()

    def status(self) -> dict[str, Any]:
        figures = self.store.figures()
        broken = self._stream.broken_since
        return {
            "inventory": "listed" if figures.updated else "not listed yet",
            "nodes": dict(figures.nodes),
            "broken_seconds": 0.0 if broken is None else round(time.monotonic() - broken, 1),
        }

    def _health(self, stream: Stream) -> None:
        """After each list or watch answer: say once when no node registers any device (the check is idle)."""
        if stream.broken_since is None and self.store.figures().updated and self.store.current() is None:
            if not self._said_empty:
                self._said_empty = True
                log.info("device inventory: no node registers a device; the fits-nowhere check waits for one")
        else:
            self._said_empty = False

    def _publish(self) -> None:
        while not self._streams.stopping.wait(GAUGE_SECONDS if self.store.figures().updated else 1.0):
            figures = self.store.figures()
            metrics.inventory(figures.nodes, figures.devices, figures.updated)


def open_inventory(vendors: Sequence[object]) -> InventoryPort:
    """The inventory of the vendors that can tell where a container fits, started; off without a Kubernetes API."""
    found = fitting(vendors)
    if not found:
        return NoInventory("no device vendor registers devices on Nodes")
    from kubernetes import client

    from app.kube.config import LOAD_ERRORS, load_configuration

    try:
        configuration = load_configuration()
    except LOAD_ERRORS as exc:
        log.info("device inventory is off: no in-cluster config or kubeconfig (%s)", exc)
        return NoInventory(f"no Kubernetes API: {exc}")
    inventory = NodeInventory(client.ApiClient(configuration), found)
    inventory.start()
    log.info("device inventory: watching Nodes' register annotations at %s", configuration.host)
    return inventory
