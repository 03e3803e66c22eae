"""HAMi's webhook built from its source beside the clone, and a pair of webhooks per chart set-up.

Off CI the suite skips when HAMi's webhook cannot be built here (no source beside the clone, no Go, no module
proxy), saying which; under CI=true it must build and run.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed import hami
from tests.parity import harness
from tests.parity.run import Checker
from tests.parity.setups import SETUPS, SetUp
from tests.parity.tally import Tally

CHECKERS: dict[str, Checker] = {}


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory, hami_reference: hami.Reference):
    return harness.local_tls(tmp_path_factory.mktemp("parity-tls"))


@pytest.fixture(scope="module", params=SETUPS, ids=lambda setup: setup.name)
def checker(request: pytest.FixtureRequest, hami_reference: hami.Reference, tls) -> Iterator[Checker]:
    setup: SetUp = request.param
    with harness.pair(hami_reference, setup, tls) as pair:
        checker = CHECKERS.setdefault(setup.name, Checker.of(pair, hami_reference.render(setup.values)))
        checker.pair = pair
        yield checker


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The run's Pods per class: the figures docs/rules.md#parity-with-hamis-code records."""
    if not CHECKERS:
        return
    total = Tally()
    for checker in CHECKERS.values():
        total.merge(checker.tally)
    terminalreporter.write_sep("-", "parity with HAMi's webhook: Pods per class (a Pod may fall in several)")
    terminalreporter.write_line(total.table())
