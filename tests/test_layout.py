"""docs/development.md holds against the tree: its layout map names only paths that exist and every module of
``app/`` and ``certgen/`` and every top-level entry; its suite table names every test module.

Both are read from the page as written, so renaming a module means editing its line there, and nothing here.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

from testbed import ROOT

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
    assert Path("app/serving/framing.py") in named and Path("app/admission/devices/amd.py") in named, (
        "the parser reads the map"
    )
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
    assert Path("tests/app/admission/test_edit.py") in named, "the parser reads bare names in a path's directory"
    missing = [str(m) for m in modules if not any(m == n or n in m.parents for n in named)]
    assert missing == []
    assert sorted(str(n) for n in named if not (ROOT / n).exists()) == []


ROOT_MODULES = 8
"""At most this many modules at app/'s root: what every concern shares; the concerns are its folders."""
SHARED = ("app.untrusted", "app.readiness", "app.logs", "app.metrics", "app.kube")
COMMANDS = (
    "app.admission",
    "app.check",
    "app.inventory",
    "app.preview",
    "app.quota",
)  # the concerns the CLI's commands run
LAYERS = {
    # what every concern shares
    "app.untrusted": (),
    "app.readiness": (),
    "app.kube": (),
    "app.logs": ("app.untrusted",),
    "app.metrics": ("app.logs", "app.untrusted"),
    # the concerns: the admission core at the bottom, declaring the ports the quota and the inventory implement
    "app.admission": ("app.logs", "app.metrics", "app.untrusted"),
    "app.preview": ("app.admission", "app.untrusted"),
    "app.quota": ("app.admission", *SHARED),
    "app.check": ("app.admission", "app.preview", *SHARED),  # reads the cluster; judges with the preview's readers
    "app.inventory": ("app.admission", *SHARED),
    # at start: the installed policies; then the failure policy, judged as the check judges it
    "app.serving.master": ("app.check", "app.preview", "app.serving", "app.settings", *SHARED),
    "app.serving.worker": ("app.serving", "app.settings", *SHARED),
    "app.serving": ("app.admission", *SHARED),
    # the composition: settings -> device backends -> the app, and the commands that start it
    "app.settings": ("app.admission", "app.quota", *SHARED),
    "app.cli": ("app", *COMMANDS, "app.serving.master", "app.settings", *SHARED),
    "app.__main__": ("app.cli",),
    "app": ("app.admission", "app.inventory", "app.quota", "app.serving", "app.settings", *SHARED),
}
"""What each part of app/ may import besides itself, every module in exactly one part (the longest prefix): the
shared modules import no concern, the concerns never the composition above them, and no two parts each other.
gunicorn's entries (the master's settings, the worker it forks) sit with the composition: they read the settings."""


def part_of(name: str) -> str | None:
    """The part a module of app/ (or a name imported from one) is in: the longest LAYERS key that is it or a
    package above it; ``app`` itself only for app/__init__.py and what it defines (``app.create_app``)."""
    found = [p for p in LAYERS if p != "app" and (name == p or name.startswith(p + "."))]
    if found:
        return max(found, key=len)
    rest = name.split(".")[1:]
    if not rest or (
        len(rest) == 1 and not (ROOT / "app" / f"{rest[0]}.py").exists() and not (ROOT / "app" / rest[0]).is_dir()
    ):
        return "app"
    return None


def imports(path: Path) -> set[str]:
    """Every app module ``path`` imports, at its top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {f"{node.module}.{alias.name}" for alias in node.names} | {node.module}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {name for name in found if name == "app" or name.startswith("app.")}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_app_root_holds_only_what_every_concern_shares() -> None:
    modules = sorted(p.name for p in (ROOT / "app").glob("*.py"))
    assert len(modules) <= ROOT_MODULES, modules


def test_imports_point_down() -> None:
    wrong, unplaced = [], []
    for path in sorted((ROOT / "app").rglob("*.py")):
        name = module_name(path)
        part = part_of(name)
        if part is None:
            unplaced.append(name)
            continue
        for imported in sorted(imports(path)):
            target = part_of(imported)
            if imported != "app" and target != part and target not in LAYERS[part]:
                wrong.append(f"{name} imports {imported}")
    assert unplaced == [], "every module of app/ belongs to a part"
    assert wrong == []


def test_no_two_parts_may_import_each_other() -> None:
    both = sorted((a, b) for a, allowed in LAYERS.items() for b in allowed if a < b and a in LAYERS.get(b, ()))
    assert both == []
    assert all(b in LAYERS for allowed in LAYERS.values() for b in allowed), "every part allowed is a part"


def test_no_two_classes_share_a_name() -> None:
    where: dict[str, list[str]] = {}
    for package in COMPLETE:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    where.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in where.items() if len(paths) > 1} == {}
