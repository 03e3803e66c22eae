"""Every file of the checkout written from the code, and what each should hold now: the shipped admission policies
and the webhooks' matchConditions, from the chart's device config and the settings' defaults, and the annotation
tables of docs/annotations.md, from app/admission/annotations.py's table.

``hami-webhook generate`` rewrites them, ``--check`` names the stale ones: a vendor added (its module, its registry
line, its chart defaults) reaches every list the API server reads through that one command
(docs/rules.md#one-source-for-every-list). The chart's device config itself has one copy, in manifests/base; the
package's chart-defaults.yaml is a link to it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from app.admission.annotations import CHIP, TABLE, Annotation
from app.preview.policies import dump

ROOT = Path(__file__).resolve().parents[2]
"""The checkout this package was imported from (an installed wheel has no manifests beside it)."""
POLICIES = {
    "allocation-guard.yaml": "manifests/base/policies/allocation-guard.yaml",
    "routed.yaml": "manifests/base/policies/routed.yaml",
    "floor.yaml": "manifests/components/floor/floor.yaml",
}
"""Each policy file ``render`` writes, and where the manifests keep it whole."""
CONFIGURATIONS = (
    "manifests/base/mutatingwebhookconfiguration.yaml",
    "manifests/base/validatingwebhookconfiguration.yaml",
)
"""The webhook configurations whose matchConditions blocks are written, in match-conditions.yaml's order; the rest
of each (comments, layout) is written by hand."""
ANNOTATIONS = "docs/annotations.md"
"""The page whose two tables (what an author may set, what HAMi writes) are written from the annotations' table."""
GENERATED = (*POLICIES.values(), *CONFIGURATIONS, ANNOTATIONS)


class GeneratedError(ValueError):
    """The checkout is not one this command can write: no manifests, or a configuration of another shape."""


def expected(root: Path, rendered: Mapping[str, str]) -> dict[str, str]:
    """What each generated file should hold, by its path under ``root``, from ``render``'s files."""
    if not (root / CONFIGURATIONS[0]).is_file():
        raise GeneratedError(f"{root} holds no {CONFIGURATIONS[0]}: run it from a checkout")
    files = {path: rendered[name] for name, path in POLICIES.items()}
    patches = list(yaml.safe_load_all(rendered["match-conditions.yaml"]))
    for path, patch in zip(CONFIGURATIONS, patches, strict=True):
        files[path] = spliced((root / path).read_text(), patch["webhooks"], path)
    files[ANNOTATIONS] = tabled((root / ANNOTATIONS).read_text(), annotation_tables(), ANNOTATIONS)
    return files


def annotation_tables() -> list[list[str]]:
    """The page's two tables, as lines: every row an author may set, in order; then what HAMi writes, by writer."""
    user = ["| annotation | accepted values | read in |", "|---|---|---|"] + [
        f"| {shown_key(row)} | {row.accepts.described} | {', '.join(f'`{f}`' for f in row.read_in) or '-'} |"
        for row in TABLE
        if not row.written_by
    ]
    writers: dict[str, list[str]] = {}
    for row in TABLE:
        if row.written_by:
            writers.setdefault(row.written_by, []).append(shown_key(row))
    written = ["| written by | annotations |", "|---|---|"]
    return [user, written + [f"| {writer} | {', '.join(keys)} |" for writer, keys in writers.items()]]


def shown_key(row: Annotation) -> str:
    """A row's key as the docs show it: ``<chip>`` for each configured chip, and whose chips."""
    where = f" (each {row.chips.__name__} chip)" if row.chips else ""
    return f"`{row.key.replace(CHIP, '<chip>')}`{where}"


def tabled(text: str, tables: Sequence[Sequence[str]], source: str) -> str:
    """``text`` with each Markdown table whose header is a table's first line replaced by that table."""
    lines = text.splitlines()
    for table in tables:
        if table[0] not in lines:
            raise GeneratedError(f"{source} has no table headed {table[0]}")
        start = lines.index(table[0])
        end = start + 1
        while end < len(lines) and lines[end].startswith("|"):
            end += 1
        lines[start:end] = table
    return "\n".join(lines) + "\n"


def spliced(text: str, webhooks: Sequence[Mapping[str, Any]], source: str) -> str:
    """``text`` with its n-th ``matchConditions:`` block replaced by the n-th webhook's, everything else kept."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.strip() == "matchConditions:"]
    if len(starts) != len(webhooks):
        raise GeneratedError(f"{source} has {len(starts)} matchConditions blocks, {len(webhooks)} webhooks to write")
    out: list[str] = []
    done = 0
    for start, webhook in zip(starts, webhooks, strict=True):
        indent = len(lines[start]) - len(lines[start].lstrip())
        end = start + 1
        while end < len(lines) and _inside(lines[end], indent):
            end += 1
        while not lines[end - 1].strip():  # a blank line after the block stays the file's
            end -= 1
        block = dump({"matchConditions": webhook["matchConditions"]})
        out += [*lines[done:start], *(" " * indent + line for line in block.splitlines(keepends=True))]
        done = end
    return "".join(out + lines[done:])


def _inside(line: str, indent: int) -> bool:
    """Whether a line continues a block whose key is at ``indent`` (its items may sit at the key's own indent)."""
    if not line.strip():
        return True
    own = len(line) - len(line.lstrip())
    return own > indent or (own == indent and line.lstrip().startswith("- "))


def stale(root: Path, files: Mapping[str, str]) -> list[str]:
    """The generated files whose text differs from what they should hold."""
    return [path for path, text in files.items() if (root / path).read_text() != text]


def write(root: Path, files: Mapping[str, str]) -> list[str]:
    """Write the stale files; return their paths."""
    written = stale(root, files)
    for path in written:
        (root / path).write_text(files[path])
    return written
