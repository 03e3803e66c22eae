"""The parity report for any HAMi tree: `python -m tests.parity.report [--source HAMI_SOURCE]`.

What scripts/hami-parity.sh runs: builds HAMi's webhook from the tree, asks it and this webhook the suite's
generated Pods and HAMi's examples under every chart set-up, and prints the Pods per class (identical, each
documented deviation, undocumented) with the smallest Pod of each. Exit 1 when a difference is undocumented.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, seed, settings

from testbed import HAMI_EXAMPLES, hami
from tests.parity import harness
from tests.parity.run import Checker, example_reviews, sweep_reviews
from tests.parity.setups import SETUPS
from tests.parity.tally import UNDOCUMENTED, Tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hami-parity", description=__doc__.splitlines()[0])
    parser.add_argument("--source", help="a HAMi checkout or git-archive tarball (default: ../shared/hami-src)")
    parser.add_argument("--pods", type=int, default=1100, help="generated Pods per chart set-up (default 1100)")
    parser.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: a fresh one, printed)")
    args = parser.parse_args(argv)
    value = args.seed if args.seed is not None else random.SystemRandom().getrandbits(32)
    reference = hami.build(args.source)
    print(f"HAMi source: {reference.source}\nseed: {value}  Pods per set-up: {args.pods}", flush=True)
    total = Tally()
    with tempfile.TemporaryDirectory(prefix="hami-parity-") as workdir:
        tls = harness.local_tls(Path(workdir))
        for setup in SETUPS:
            with harness.pair(reference, setup, tls) as pair:
                checker = Checker.of(pair, reference.render(setup.values))
                _generated(checker, args.pods, value)
                for _, review in sweep_reviews(checker.names):
                    checker.check(review)
                if (HAMI_EXAMPLES / "examples").is_dir():
                    for _, review in example_reviews(HAMI_EXAMPLES):
                        checker.check(review)
                print(f"  {setup.name}: {checker.tally.reviews} reviews", flush=True)
                total.merge(checker.tally)
    print(total.table())
    print("\nthe smallest Pod of each class:")
    print(total.samples())
    return 1 if total.counts[UNDOCUMENTED] else 0


def _generated(checker: Checker, pods: int, value: int) -> None:
    @seed(value)
    @settings(
        max_examples=pods,
        database=None,
        deadline=None,
        phases=(Phase.generate,),
        suppress_health_check=list(HealthCheck),
    )
    @given(checker.generate)
    def one(review: dict) -> None:
        checker.check(review)

    one()


if __name__ == "__main__":
    sys.exit(main())
