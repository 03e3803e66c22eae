"""The quota says few words (docs/quota.md, "Glossary"): every class of ``app/quota`` is named in the glossary under
one of its terms, the glossary names no class that is gone, and it stays within what a newcomer can learn."""

from __future__ import annotations

import ast
import re

from testbed import ROOT

PAGE = ROOT / "docs" / "quota.md"
PACKAGE = ROOT / "app" / "quota"
TERMS = 15
"""At most this many words to learn before reading a commit of the quota."""


def glossary() -> str:
    text = PAGE.read_text()
    start = text.index("\n## Glossary\n")
    return text[start : text.index("\n## ", start + 1)]


def classes() -> set[str]:
    """Every class and type alias (``Amounts = dict[str, int]``) ``app/quota`` defines, but the private ones (a
    module's own detail)."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Subscript):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name) and t.id[:1].isupper())
    return {name for name in names if not name.startswith("_")}


def test_every_class_of_the_quota_is_named_under_a_term_of_the_glossary() -> None:
    named = set(re.findall(r"`([A-Z]\w*)`", glossary()))
    assert not classes() - named, "name each new class under the glossary term it belongs to, or use a word there"
    assert not named - classes(), "the glossary names a class that app/quota no longer has"


def test_the_glossary_holds_at_most_fifteen_terms() -> None:
    terms = re.findall(r"^- (?:\*\*\w+\*\*(?: and its )?)+", glossary(), re.M)
    assert 10 <= len(terms) <= TERMS
    assert len(re.findall(r"\*\*(\w+)\*\*", "".join(terms))) <= TERMS + 1  # a term may bring its one companion
