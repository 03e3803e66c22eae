"""The quota gauges of a real port against the real kube-apiserver (``bare_kube``): the figures per namespace and
resource, the ResourceQuota that sets the limit in a label, no series once the quota goes, and no API call per
scrape."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY, generate_latest

from testbed.pods import container, pod
from testbed.polling import eventually
from tests.app.quota.conftest import GPU, MEM, Cluster

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)


def test_a_scrape_makes_no_api_call(cluster: Cluster, start_quota) -> None:
    """The gauges come from the feed's tables, published apart: scraping costs the API server nothing."""
    cluster.quota({f"limits.{MEM}": "8000"})
    start_quota()
    obj = pod(container(limits={GPU: "2", MEM: "1000"}))
    obj["metadata"] = {"name": "a"}
    cluster.create_pod(obj)
    labels = {"namespace": cluster.ns, "quota_name": MEM, "limit": "8000", "resourcequota": "gpu"}
    eventually(lambda: REGISTRY.get_sample_value("hami_webhook_quota_used", labels) == 2000, 20, what="gauge")
    assert REGISTRY.get_sample_value("hami_webhook_quota_held", labels) == 0
    # asides: the contact probe, and the lists of PodGroup APIs not served here (retried on their own timer)
    before = [r for r in cluster.proxy.requests if "fieldSelector" not in r.query and "podgroups" not in r.path]
    for _ in range(50):
        generate_latest(REGISTRY)
    after = [r for r in cluster.proxy.requests if "fieldSelector" not in r.query and "podgroups" not in r.path]
    assert after == before
    cluster.quota({f"limits.{MEM}": "6000"}, name="tighter")
    tighter = labels | {"limit": "6000", "resourcequota": "tighter"}
    eventually(lambda: REGISTRY.get_sample_value("hami_webhook_quota_used", tighter) == 2000, 20, what="new limit")
    assert REGISTRY.get_sample_value("hami_webhook_quota_used", labels) is None  # the old label set went
    cluster.core.delete_namespaced_resource_quota("gpu", cluster.ns)
    cluster.core.delete_namespaced_resource_quota("tighter", cluster.ns)
    eventually(
        lambda: (
            REGISTRY.get_sample_value(
                "hami_webhook_quota_limit", {k: tighter[k] for k in ("namespace", "quota_name", "resourcequota")}
            )
            is None
        ),
        20,
        what="series gone",
    )
