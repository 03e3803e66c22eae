"""Counting outcomes per class and keeping the smallest Pod of each: the suite's summary and the script's report."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tests.parity.deviations import Outcome
from tests.parity.harness import Answer

IDENTICAL = "identical"
UNDOCUMENTED = "undocumented"


@dataclass(frozen=True)
class Sample:
    pod: str
    hami: str
    ours: str
    classes: tuple[str, ...]

    def show(self) -> str:
        classes = ", ".join(self.classes) or "-"
        return f"    Pod:  {self.pod}\n    HAMi: {self.hami}\n    ours: {self.ours}\n    via:  {classes}"


@dataclass
class Tally:
    counts: Counter[str] = field(default_factory=Counter)
    reviews: int = 0
    smallest: dict[str, Sample] = field(default_factory=dict)

    def add(self, review: dict[str, Any], hami: Answer, ours: Answer, outcome: Outcome) -> list[str]:
        """Count one review under each class it falls in; returns those classes."""
        self.reviews += 1
        if outcome.identical:
            keys = [IDENTICAL]
        else:
            keys = list(outcome.classes) if outcome.explained else [UNDOCUMENTED]
        pod = json.dumps(review["request"]["object"], separators=(",", ":"))
        for key in keys:
            self.counts[key] += 1
            if key not in self.smallest or len(pod) < len(self.smallest[key].pod):
                self.smallest[key] = Sample(pod, _shown(hami), _shown(ours), outcome.classes)
        return keys

    def merge(self, other: Tally) -> None:
        self.counts.update(other.counts)
        self.reviews += other.reviews
        for key, sample in other.smallest.items():
            if key not in self.smallest or len(sample.pod) < len(self.smallest[key].pod):
                self.smallest[key] = sample

    def table(self) -> str:
        lines = [f"{'class':36} {'Pods':>7}", f"{'(reviews)':36} {self.reviews:>7}"]
        for key, count in sorted(self.counts.items(), key=lambda item: (item[0] != IDENTICAL, -item[1])):
            lines.append(f"{key:36} {count:>7}")
        return "\n".join(lines)

    def samples(self) -> str:
        return "\n".join(f"  {key}:\n{sample.show()}" for key, sample in sorted(self.smallest.items()))


def _shown(answer: Answer) -> str:
    text = answer.summary()
    if answer.allowed:
        text += " -> " + json.dumps(answer.pod, separators=(",", ":"), default=str)
    return text
