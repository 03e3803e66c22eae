"""Namespace device quota (docs/rules.md#d-namespace-quota), in three parts whose imports point down.

``core/`` is pure: ``amounts`` (the resource arithmetic), ``demand`` (a Pod's demand per vendor), ``limits``
(ResourceQuota keys, the fit check), ``encoding`` (the ledger's encoding), ``decision`` (the pure decision),
``standing`` (where a namespace stands). ``feed/`` is what a worker sees: ``stream`` (the list + watch
machinery), ``tables`` (what the streams keep), ``feed`` (the Feed, per process: what it knows), ``life`` (which
of its streams run, and their health), ``gauges`` (the quota gauges' publisher). The top: ``ports`` (what the
evaluator and committer need of the world: feed, ledger store, clock; and why quota could not be decided),
``evaluator`` (QuotaEvaluator, the real port: what an admission answers alone, the ticket it queues otherwise),
``committer`` (the Committer: a process's tickets decided and written per namespace, grants closed when due),
``state`` (what a process keeps per namespace), ``lease`` (the ledger Leases' compare-and-swap reads and
writes), ``contact`` (the API server probe: unready and shedding connections when it is lost), ``startup`` (the
port built from settings), ``command`` (``hami-webhook quota``). The port itself, and QuotaOff, are the admission
core's (app/admission/ports.py).
"""

from app.quota.core.demand import Demand, demands

__all__ = ["Demand", "demands"]
