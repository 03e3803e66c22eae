#!/usr/bin/env python3
"""The commit-msg hook: a subject of at most 72 characters naming its area ("quota: ..."), a blank line before
any body, so that `git log --oneline` reads as the project's history and the reason and figures go in the body.

Git runs it with the message file (scripts/install-hooks.sh installs it; `git commit --no-verify` skips it).
Merge commits and `fixup!`/`squash!` commits pass: git writes or removes those subjects itself.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

SUBJECT_LIMIT = 72
AREA = re.compile(r"[\w.+/*-]+(?:, ?[\w.+/*-]+)*: \S")
"""An area (a word, a path, a few of them after commas), a colon, a space, then the change."""
EXEMPT = ("Merge ", "fixup! ", "squash! ", "amend! ")
SCISSORS = "# ------------------------ >8 ------------------------"


def lines_of(message: str) -> list[str]:
    """The message as git will record it: without comment lines, nor anything below `commit -v`'s scissors."""
    kept: list[str] = []
    for line in message.splitlines():
        if line == SCISSORS:
            break
        if not line.startswith("#"):
            kept.append(line.rstrip())
    while kept and not kept[0]:
        kept.pop(0)
    return kept


def problems(message: str) -> list[str]:
    """What is wrong with a commit message, each said so a contributor knows what to change; [] if nothing."""
    lines = lines_of(message)
    if not lines:
        return []  # git aborts an empty message itself
    subject = lines[0]
    if subject.startswith(EXEMPT):
        return []
    found = []
    if len(subject) > SUBJECT_LIMIT:
        found.append(
            f"the subject has {len(subject)} characters, at most {SUBJECT_LIMIT}: "
            "say the change in it, the reason and the figures in the body"
        )
    if not AREA.match(subject):
        found.append('the subject names no area: "area: change", e.g. "quota: refuse a full ledger at once"')
    if len(lines) > 1 and lines[1]:
        found.append("a blank line must separate the subject from the body")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: commit_msg.py MESSAGE_FILE", file=sys.stderr)
        return 2
    found = problems(Path(argv[1]).read_text(errors="replace"))
    for problem in found:
        print(f"commit-msg: {problem}", file=sys.stderr)
    if found:
        print(f"commit-msg: the message is kept: `git commit -e -F {argv[1]}` to mend it", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
