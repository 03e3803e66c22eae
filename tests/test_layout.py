"""docs/development.md holds against the tree: its layout map names only paths that exist and every module of
``app/`` and ``certgen/`` and every top-level entry; its suite table names every test module.

Both are read from the page as written, so renaming a module means editing its line there, and nothing here.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

from tests.support import ROOT

PAGE = ROOT / "docs" / "development.md"
COMPLETE = ("app", "certgen")
"""Packages whose every module the layout names."""
NAME_COLUMN = 28
"""Where a line's description starts: a line indented this far continues the description above it."""


def section(heading: str) -> str:
    text = PAGE.read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def layout() -> set[Path]:
    """The paths the layout map names: a name is under the nearest less indented directory line above it, and a
    line may name several (``nvidia.py, cambricon.py,``, the list going on in the line below)."""
    (block,) = re.findall(r"```\n(.*?)```", section("Layout"), re.S)
    named: set[Path] = set()
    parents: list[tuple[int, Path]] = []
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip(" "))
        if not line.strip() or indent >= NAME_COLUMN:
            continue
        names = re.split(r" {2,}", line.strip(), maxsplit=1)[0]
        while parents and parents[-1][0] >= indent:
            parents.pop()
        base = parents[-1][1] if parents else Path()
        for name in filter(None, (n.strip() for n in names.split(","))):
            named.add(base / name)
            if name.endswith("/"):
                parents.append((indent, base / name))
    return named


def suites() -> set[Path]:
    """The test modules and directories the suite table names: bare names after a path are in its directory."""
    named: set[Path] = set()
    for row in re.findall(r"^\| (`[^|]*) \|", section("The test suites, and what each proves"), re.M):
        directory = Path()
        for name in re.findall(r"`([^`]+)`", row):
            path = Path(name) if "/" in name else directory / name
            directory = path if name.endswith("/") else path.parent
            named.add(path)
    return named


def bare_package(init: Path) -> bool:
    """An ``__init__.py`` that is only a docstring: its directory's line says all there is."""
    body = ast.parse(init.read_text()).body
    return all(isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) for node in body)


def ignored(name: str) -> bool:
    patterns = [p.strip().rstrip("/") for p in (ROOT / ".gitignore").read_text().splitlines() if p.strip()]
    return any(fnmatch.fnmatch(name, pattern) for pattern in patterns)


def test_every_path_the_layout_names_exists() -> None:
    named = layout()
    assert Path("app/framing.py") in named and Path("app/devices/amd.py") in named, "the parser reads the map"
    assert sorted(str(p) for p in named if not (ROOT / p).exists()) == []


def test_every_module_of_the_packages_is_in_the_layout() -> None:
    named = layout()
    modules = [
        path.relative_to(ROOT)
        for package in COMPLETE
        for path in sorted((ROOT / package).rglob("*.py"))
        if not (path.name == "__init__.py" and path.parent.name not in COMPLETE and bare_package(path))
    ]
    assert len(modules) > 50
    assert [str(m) for m in modules if m not in named] == []


def test_every_top_level_entry_is_in_the_layout() -> None:
    named = {path.parts[0] for path in layout()}
    entries = [p.name for p in ROOT.iterdir() if not p.name.startswith(".") and not ignored(p.name)]
    assert "app" in entries and "README.md" in entries
    assert sorted(e for e in entries if e not in named) == []


def test_every_test_module_is_in_the_suite_table() -> None:
    named = suites()
    modules = sorted(p.relative_to(ROOT) for p in (ROOT / "tests").rglob("test_*.py"))
    assert Path("tests/app/test_edit.py") in named, "the parser reads bare names in a path's directory"
    missing = [str(m) for m in modules if not any(m == n or n in m.parents for n in named)]
    assert missing == []
    assert sorted(str(n) for n in named if not (ROOT / n).exists()) == []
