"""The suite's three tiers, each test's read from what it uses, and the guard that keeps `unit` honest.

- ``unit``: no process, no socket; the one-minute loop (``pytest -m unit``).
- ``server``: processes and sockets on loopback (a real gunicorn, a script, a stand-in server), and the long
  property runs (the fuzz, the quota simulation); no control plane.
- ``cluster``: a Kubernetes control plane (tests/realkube) or HAMi's own binaries (built from Go).

A test's tier is the highest of what its code reaches: its own function, the fixtures it requests (with their
own fixtures) and, transitively, every helper of this repository they call. Reaching a module below (or
anything defined in it) puts a test in that module's tier; everything else is ``unit``. Nothing is listed per
test: a test that starts using a server helper moves to ``server`` by itself, and one that opens a socket
some other way fails under the guard (`guard`) instead of slowing the unit loop down. A pytest plugin:
tests/conftest.py takes its hook and fixture.
"""

from __future__ import annotations

import os
import sys
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

UNIT, SERVER, CLUSTER = "unit", "server", "cluster"
ORDER = (UNIT, SERVER, CLUSTER)

REACHES = {
    CLUSTER: (
        "tests.realkube.fixtures",  # the control planes, shared by every suite
        "testbed.cluster.RealKube",
        "testbed.cluster.build_binaries",
        "testbed.hami.build",  # HAMi's webhook, built from Go
    ),
    SERVER: (
        "subprocess",
        "socket",
        "socketserver",
        "http.server",
        "http.client",
        "urllib.request",
        "requests",
        "multiprocessing",
        "concurrent.futures.process",
        "testbed.servers",
        "testbed.ports",
        "tests.app.quota.simulation",  # a long run: thousands of seeded schedules
    ),
}
"""What puts a test in a tier: a module (and all in it) or one thing in a module, by qualified name (each must
exist: tests/test_tiers.py)."""

PROCESS_CALLS = frozenset(
    {"fork", "forkpty", "system", "posix_spawn", "posix_spawnp", "popen"}
    | {f"exec{v}" for v in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe")}
    | {f"spawn{v}" for v in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe")}
)
"""What of ``os`` starts a process: a test naming ``os`` and one of these is a server test."""

LONG_RUN = 1000
"""A property test drawing more examples than this (a fuzz of thousands of bodies) is a long run: like the
simulation's schedules, it goes with the server tier, the minutes one, so that `unit` stays the minute loop."""

OURS = ("tests", "testbed")
"""Helpers followed into: the tests and their harness, testbed/ (app/ and certgen/ are what they exercise)."""

AUDITED = frozenset(
    {
        "socket.__new__",
        "socket.bind",
        "socket.connect",
        "socket.sendto",
        "subprocess.Popen",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
    }
)
"""The audit events (CPython's ``sys.audit``) of opening a socket or starting a process."""


def named_tier(name: str) -> str | None:
    """The tier REACHES gives a module or a qualified name (``module.Class``), if any."""
    for tier in (CLUSTER, SERVER):
        if any(name == root or name.startswith(root + ".") for root in REACHES[tier]):
            return tier
    return None


class Reach:
    """What a callable reaches, memoised per object: the tier of a helper is found once for the whole suite."""

    def __init__(self) -> None:
        self._seen: dict[int, str] = {}

    def tier(self, obj: Any) -> str:
        key = id(obj)
        if key in self._seen:
            return self._seen[key]
        self._seen[key] = UNIT  # a cycle (a helper calling itself, a class naming itself) adds nothing
        found = self._tier(obj)
        self._seen[key] = found
        return found

    def _tier(self, obj: Any) -> str:
        module = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", None)
        if not isinstance(module, str):
            return UNIT
        named = named_tier(qualified(obj))
        if named is not None:
            return named
        if not any(module == ours or module.startswith(ours + ".") for ours in OURS):
            return UNIT
        return self.within(obj)

    def within(self, obj: Any) -> str:
        """The tier of what ``obj`` (a test, a fixture, a helper) reaches, wherever it is defined."""
        if isinstance(obj, type):
            members = [m for m in vars(obj).values() if callable(m) or isinstance(m, staticmethod | classmethod)]
            return highest(self.tier(getattr(m, "__func__", m)) for m in members)
        function = inner(obj)
        if not isinstance(function, types.FunctionType):
            return UNIT
        if starts_a_process(function):
            return SERVER
        return highest(self.tier(used) for used in referenced(function))


def qualified(obj: Any) -> str:
    """``module.Qualname`` of a function or class, a module's name, or the module of anything else."""
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    module = getattr(obj, "__module__", None) or ""
    qualname = getattr(obj, "__qualname__", None)
    return f"{module}.{qualname}" if isinstance(qualname, str) else module


def inner(obj: Any) -> Any:
    """The function a test's decorators wrap (hypothesis' ``@given``, functools.wraps, a bound method)."""
    given = getattr(obj, "hypothesis", None)
    if given is not None and hasattr(given, "inner_test"):
        obj = given.inner_test
    obj = getattr(obj, "__func__", obj)
    while hasattr(obj, "__wrapped__"):
        obj = obj.__wrapped__
    return obj


def names_in(function: types.FunctionType) -> set[str]:
    """The names a function's code uses, nested functions and lambdas included."""
    names: set[str] = set()
    codes = [function.__code__]
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return names


def starts_a_process(function: types.FunctionType) -> bool:
    """``os.fork()`` and the like: the ``os`` module is everywhere, so its process calls are looked for by name."""
    names = names_in(function)
    return function.__globals__.get("os") is os and "os" in names and not PROCESS_CALLS.isdisjoint(names)


def referenced(function: types.FunctionType) -> Iterator[Any]:
    """The globals a function's code names (nested functions and lambdas included), and for a module of ours,
    the attributes of it the code names (``servers.gunicorn`` reaches ``gunicorn``, not the whole module)."""
    names = names_in(function)
    scope = function.__globals__
    for name in names:
        value = scope.get(name, sys.modules.get(name))  # a module imported inside the function is named whole
        if value is None:
            continue
        yield value
        if isinstance(value, types.ModuleType) and value.__name__.startswith(tuple(ours + "." for ours in OURS)):
            yield from (getattr(value, attr) for attr in names if hasattr(value, attr))
    for cell in function.__closure__ or ():
        try:
            yield cell.cell_contents
        except ValueError:  # a cell not yet filled
            continue


def highest(tiers: Iterator[str] | list[str]) -> str:
    return max(tiers, key=ORDER.index, default=UNIT)


def tier_of_item(item: pytest.Function, reach: Reach) -> str:
    """The highest tier among the test's function and every fixture in its closure."""
    used: list[Any] = [item.obj]
    defs = item._fixtureinfo.name2fixturedefs
    for name in item.fixturenames:
        overrides = list(defs.get(name, ()))
        while overrides:  # the nearest definition, and the one it overrides only if it requests it
            fixturedef = overrides.pop()
            used.append(fixturedef.func)
            if name not in fixturedef.argnames:
                break
    found = [named_tier(qualified(obj)) or reach.within(obj) for obj in used]
    drawn = getattr(item.obj, "_hypothesis_internal_use_settings", None)
    if drawn is not None and drawn.max_examples > LONG_RUN:
        found.append(SERVER)
    return highest(found)


def mark(items: list[pytest.Item]) -> None:
    """Check each module's declared tier against what its tests use, and mark a module's tests with no
    declaration ``unit``. A module whose tests reach beyond ``unit`` declares its highest tier at its top
    (``pytestmark = pytest.mark.server``), so a reader sees it; one declared higher or lower than its tests reach
    stops the run, naming the module and the declaration it needs."""
    reach = Reach()
    highest_of: dict[str, str] = {}
    reached_by: dict[str, str] = {}
    for item in items:
        if not isinstance(item, pytest.Function):
            continue
        module = item.nodeid.split("::", 1)[0]
        tier = tier_of_item(item, reach)
        if ORDER.index(tier) > ORDER.index(highest_of.get(module, UNIT)):
            highest_of[module], reached_by[module] = tier, item.name
        else:
            highest_of.setdefault(module, UNIT)
    wrong = []
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        if module not in highest_of:
            continue
        declared = declared_tier(item)
        if declared != highest_of[module]:
            wrong.append(f"{module}: declares {declared}, its tests reach {highest_of[module]}"
                         f"{f' ({reached_by[module]})' if module in reached_by else ''}: "
                         + (f"put `pytestmark = pytest.mark.{highest_of[module]}` at its top"
                            if highest_of[module] != UNIT else "drop its pytestmark"))  # fmt: skip
            highest_of.pop(module)
        elif declared == UNIT:
            item.add_marker(pytest.mark.unit)
    if wrong:
        raise pytest.UsageError("tiers (tests/tiers.py):\n  " + "\n  ".join(wrong))


def declared_tier(item: pytest.Item) -> str:
    """The tier a test's module declares with its ``pytestmark`` (``unit`` when it declares none)."""
    marks = getattr(getattr(item, "module", None), "pytestmark", [])
    named = [m.name for m in (marks if isinstance(marks, list) else [marks]) if m.name in ORDER]
    return named[0] if named else UNIT


class Guard:
    """Sees a unit test open a socket or start a process, through CPython's audit hooks, so it fails at its end
    whatever its code caught. Threads running before the test began (a server test's leftovers in a whole-suite
    run) are not the test's doing and are ignored."""

    def __init__(self) -> None:
        self.active = False
        self.before: set[int] = set()
        self.seen: list[str] = []
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if self.active and event in AUDITED and threading.get_ident() not in self.before:
            self.seen.append(event)

    @contextmanager
    def watching(self) -> Iterator[list[str]]:
        self.before = {t.ident for t in threading.enumerate() if t is not threading.current_thread() and t.ident}
        self.seen = []
        self.active = True
        try:
            yield self.seen
        finally:
            self.active = False


_GUARD: list[Guard] = []
"""The one guard of the session, made at the first unit test (an audit hook cannot be removed)."""


def guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """An autouse fixture's body: under the unit marker the test runs watched; a socket or a process fails it."""
    if request.node.get_closest_marker(UNIT) is None:
        yield
        return
    if not _GUARD:
        _GUARD.append(Guard())
    with _GUARD[0].watching() as seen:
        yield
    if seen:
        pytest.fail(
            "this test is marked unit (tests/tiers.py found no server or cluster helper in what it uses) but "
            f"opened a socket or started a process ({', '.join(sorted(set(seen)))}); use the helper that says so "
            "(testbed/servers.py, ports.py), or name the module in tests/tiers.py's REACHES",
            pytrace=False,
        )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark(items)
    heaviest_first(items)


def heaviest_first(items: list[pytest.Item]) -> None:
    """Modules with a cluster test first, then those with a server test, then the rest, each module's tests in
    their own order: pytest-xdist (scripts/test.sh) hands out whole modules in this order, and a long module
    handed out last leaves one worker running alone at the end (longest first, the short ones fill the gaps)."""
    rank: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        found = next((ORDER.index(t) for t in reversed(ORDER) if item.get_closest_marker(t)), 0)
        rank[module] = max(rank.get(module, 0), found)
    items.sort(key=lambda item: -rank[item.nodeid.split("::", 1)[0]])  # stable: modules keep their order


@pytest.fixture(autouse=True)
def tier_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """A unit test that opens a socket or starts a process fails."""
    yield from guard(request)
