"""One review through both webhooks, compared and counted: the step the suite and the report share."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis.strategies import SearchStrategy

from app.preview.workloads import objects, template_pod
from tests.parity import generate
from tests.parity.deviations import Outcome, compare
from tests.parity.documented import documented
from tests.parity.forms import Context, Facts
from tests.parity.harness import Answer, Pair
from tests.parity.tally import Tally


@dataclass
class Checker:
    """A set-up's pair, what its device config declares, and the running tally."""

    pair: Pair
    facts: Facts
    names: tuple[str, ...]
    accepted: dict[str, str]
    tally: Tally

    @property
    def generate(self) -> SearchStrategy[dict[str, Any]]:
        """Reviews of generated Pods over this set-up's resource names."""
        return generate.reviews(self.names)

    @classmethod
    def of(cls, pair: Pair, device_config: str) -> Checker:
        names = generate.resource_names(device_config)
        return cls(pair, Facts.of(device_config, frozenset(names)), names, documented(), Tally())

    def check(self, review: dict[str, Any], count: bool = True) -> tuple[Answer, Answer, Outcome]:
        hami, ours = self.pair.ask(review)
        context = Context(review["request"]["object"], self.facts, self.pair.ask_hami)
        outcome = compare(hami, ours, context, self.accepted)
        if count:
            self.tally.add(review, hami, ours, outcome)
        return hami, ours, outcome


def failure(setup: str, review: dict[str, Any], hami: Answer, ours: Answer, outcome: Outcome, seed: str) -> str:
    return (
        f"an undocumented difference under set-up {setup!r} ({seed}):\n"
        f"  Pod:  {json.dumps(review['request']['object'], separators=(',', ':'))}\n"
        f"  HAMi: {hami.summary()}\n        {json.dumps(hami.pod, default=str) if hami.allowed else ''}\n"
        f"  ours: {ours.summary()}\n        {json.dumps(ours.pod, default=str) if ours.allowed else ''}\n"
        f"  documented deviations applied: {', '.join(outcome.classes) or 'none'}\n"
        f"  still different (JSON Patch from HAMi's Pod to ours): {outcome.remaining}"
    )


def sweep_reviews(names: tuple[str, ...]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every resource name against every edge amount, alone in one container's limits, as a direct client sends it."""
    for name in names:
        for amount in (*generate.CANONICAL, *generate.NON_CANONICAL):
            ctr = {"name": "c0", "image": "cuda:12", "resources": {"limits": {name: amount}}}
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}}
            yield f"{name}={amount!r}", generate.review({**pod, "spec": {"containers": [ctr]}})


def example_reviews(root: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every Pod and Pod template of HAMi's examples, as kube-apiserver would send the Pod it creates."""
    import yaml

    for path in sorted(root.rglob("*.y*ml")):
        try:
            documents = list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError:
            continue
        for index, document in enumerate(documents):
            for found in objects(document):
                if found.template is None:
                    continue
                pod = generate.defaulted(template_pod(found, "default"))
                yield f"{path.relative_to(root)}#{index}{'/'.join(map(str, found.at))}", generate.review(pod)
