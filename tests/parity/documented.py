"""The deviations docs/rules.md documents, read as data: the suite accepts a difference only through these."""

from __future__ import annotations

import re

from testbed import ROOT

RULES = ROOT / "docs" / "rules.md"
HEADING = "### Parity with HAMi's code"
ROW = re.compile(r"^\| `([a-z0-9-]+)` \| (.+?) \| ([0-9,]+) \|$")


def documented() -> dict[str, str]:
    """Class name -> the rule it links, from the table under HEADING in docs/rules.md."""
    text = RULES.read_text()
    start = text.index(HEADING)
    end = text.find("\n#", start + len(HEADING))
    rows = (ROW.match(line) for line in text[start : end if end > 0 else None].splitlines())
    return {row.group(1): row.group(2) for row in rows if row}
