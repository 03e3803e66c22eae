"""The documentation holds together: every relative link and anchor resolves, every rule the tree names exists in
docs/rules.md, nothing cites a document a reader of the repository cannot open (a numbered decision, a
checklist item, a section of a spec, an issue number), and the README stays a short page for installers that
holds no measured figure (those live in docs/performance.md and docs/quota.md, so a new measurement edits one
page)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testbed import ROOT

PAGES = [
    ROOT / "README.md",
    ROOT / "CHANGELOG.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "tests" / "realkube" / "README.md",
]
RULES = ROOT / "docs" / "rules.md"
SOURCE_DIRS = ("app", "certgen", "tests", "manifests", "scripts", "bench", ".github", ".ci", "docs")
SOURCE_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".cfg", ".toml", ".txt"}
TOP_FILES = (
    "README.md",
    "CHANGELOG.md",
    "Dockerfile",
    "setup.cfg",
    "pyproject.toml",
    "ruff.toml",
    "wsgi.py",
    "gunicorn.conf.py",
)

FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.+?) *#*$", re.M)
EXPLICIT_ANCHOR = re.compile(r"<a (?:id|name)=\"([^\"]+)\"")
RULE_MENTION = re.compile(r"rules\.md#[a-z0-9-]+(?:[^.\n]|\.(?!\s)|\n(?!\s*\n))*")
ANCHOR_IN_MENTION = re.compile(r"(?:rules\.md|[\s,(])#([a-z0-9][a-z0-9-]*[a-z0-9])")
README_WORDS = 3500
DESIGN_PAGES = ("quota.md", "performance.md")
"""Pages that hold a design and its current measured table; how the figures got there goes in a history page."""
DESIGN_LINES = 240
"""About 200 lines (quota.md: 240 with its gangs): a design page holds the design and the current measured table."""
# What a benchmark prints: a latency or ratio (`1.2 ms`, `0.80×`, `3x`), a percentile or median, a decimal time
# or size (`1.01 s`, `85.7 MiB`), an approximate one (`about 84 MiB`), a rate. Settings, limits and units are
# whole numbers (`30`, `90 s`, `128Mi`, a `7 MiB` body, `256 MiB` units), which these leave alone.
FIGURE = re.compile(
    r"\b\d+(?:\.\d+)? ?(?:ms|µs|us|x|×)(?![\w-])"
    r"|\bp(?:50|90|95|99|999)\b|\bmedians?\b"
    r"|\b\d+\.\d+ ?(?:s|KiB|MiB|GiB|kB|MB|GB)\b"
    r"|\babout \d+(?:\.\d+)? ?(?:s|seconds?|minutes?|KiB|MiB|GiB|kB|MB|GB)\b"
    r"|\b\d[\d,.]* ?(?:\w+ )?(?:reviews|requests|Pods|admissions)/s\b",
    re.I,
)
CITATION = re.compile(
    r"§"
    r"|\bdecisions? [A-Z][0-9]"
    r"|\bchecklist\b"
    r"|\bissues? #?[0-9]+\b"
    r"|\((?:\w+ )?[A-Z][0-9]{1,2}(?:[-–/, ]+[A-Z]?[0-9]{1,2})*\)",
    re.I,
)


def prose(text: str) -> str:
    """Markdown without fenced blocks and inline code, where links and headings are not links and headings."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    text = FENCE.sub("", page.read_text())
    for heading in HEADING.findall(text):
        base = slug(heading)
        name, n = base, 0
        while name in found:
            n += 1
            name = f"{base}-{n}"
        found.add(name)
    return found | set(EXPLICIT_ANCHOR.findall(text))


def sources() -> list[Path]:
    files = [ROOT / name for name in TOP_FILES]
    for directory in SOURCE_DIRS:
        files += [p for p in (ROOT / directory).rglob("*") if p.is_file() and p.suffix in SOURCE_SUFFIXES]
    here = Path(__file__).resolve()
    return [p for p in files if p.exists() and "__pycache__" not in p.parts and p.resolve() != here]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_anchors_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no such heading")
    assert not broken, broken


def test_every_rule_named_in_the_tree_exists() -> None:
    known = anchors(RULES)
    missing = []
    for path in sources():
        text = path.read_text(errors="replace")
        for mention in RULE_MENTION.findall(text):
            missing += [f"{path.relative_to(ROOT)}: #{a}" for a in ANCHOR_IN_MENTION.findall(mention) if a not in known]
    assert not missing, missing


def test_rules_have_unique_anchors() -> None:
    headings = [slug(h) for h in HEADING.findall(FENCE.sub("", RULES.read_text()))]
    assert len(headings) == len(set(headings)), sorted({h for h in headings if headings.count(h) > 1})


def test_nothing_cites_a_document_outside_the_tree() -> None:
    cited = []
    for path in sources():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if CITATION.search(line):
                cited.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not cited, cited


def test_readme_stays_short() -> None:
    words = len((ROOT / "README.md").read_text().split())
    assert words <= README_WORDS, f"README.md has {words} words (at most {README_WORDS}): move depth to docs/"


@pytest.mark.parametrize("name", DESIGN_PAGES)
def test_design_pages_stay_about_200_lines(name: str) -> None:
    lines = len((ROOT / "docs" / name).read_text().splitlines())
    assert lines <= DESIGN_LINES, (
        f"docs/{name} has {lines} lines (at most {DESIGN_LINES}): the design and the current figures stay "
        "there, how they were reached goes to the history page"
    )


def test_readme_holds_no_measured_figure() -> None:
    found = [
        f"README.md:{number}: {match.group(0)!r} in {line.strip()[:80]}"
        for number, line in enumerate((ROOT / "README.md").read_text().splitlines(), 1)
        for match in FIGURE.finditer(line)
    ]
    assert not found, f"figures live in docs/performance.md and docs/quota.md; link them instead: {found}"


@pytest.mark.parametrize(
    "figure",
    [
        "a review takes 1.2 ms",
        "0.80× the no-quota rate",
        "3x faster",
        "p99 1.20",
        "the median of 6 rounds",
        "1.01 s and 85.7 MiB",
        "use about 84 MiB",
        "medians of 6 rounds",
        "1,800 reviews/s",
        "300 Pods/s",
    ],
)
def test_the_figure_pattern_catches_what_benchmarks_print(figure: str) -> None:
    assert FIGURE.search(figure)


@pytest.mark.parametrize(
    "value",
    [
        "| `HAMI_WEBHOOK_TIMEOUT` | `30` |",
        "above the API server's 90 s",
        "200m CPU and 128Mi memory",
        "5 minutes",
        "rbac.authorization.k8s.io/v1",
        "a body over 7 MiB",
        "256 MiB units",
        "linux/amd64,linux/arm64",
        "hami-webhook:0.1.0",
        "exit 2",
        "matchConditions",
    ],
)
def test_the_figure_pattern_leaves_settings_alone(value: str) -> None:
    assert not FIGURE.search(value)
