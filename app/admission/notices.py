"""Admission warnings: short lines telling a Pod's author what the webhook did or what HAMi will ignore.

They travel in ``AdmissionResponse.warnings``; the API server hands them to the client, and kubectl prints
each as ``Warning: <text>``. Each has a kind from KINDS (the metric's only label) and a text of at most
MAX_CHARS characters (the API server's advice); an answer carries at most MAX_WARNINGS of them. Texts hold
fixed words, the webhook's own values, and of what the author wrote only names (containers, resources, env
vars, annotation keys) cut to NAME_CHARS and values cut to VALUE_CHARS, unprintable characters escaped.
docs/annotations.md says when each kind is given.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

DEFAULT = "default"
ROUNDED = "rounded"
OVERWRITTEN = "overwritten"
REQUEST_FROM_LIMIT = "request_from_limit"
POLICY_FROM_ANNOTATION = "policy_from_annotation"
UNKNOWN_ANNOTATION = "unknown_annotation"
INVALID_ANNOTATION_VALUE = "invalid_annotation_value"
GANG = "gang"
FITS_NOWHERE = "fits_nowhere"
KINDS = (
    DEFAULT,
    ROUNDED,
    OVERWRITTEN,
    REQUEST_FROM_LIMIT,
    POLICY_FROM_ANNOTATION,
    UNKNOWN_ANNOTATION,
    INVALID_ANNOTATION_VALUE,
    GANG,
    FITS_NOWHERE,
)

MAX_CHARS = 120
MAX_WARNINGS = 20
NAME_CHARS = 48
VALUE_CHARS = 16
CUT = "..."


@dataclass(frozen=True)
class Notice:
    """One warning: its kind (counted in metrics) and the line the author reads."""

    kind: str
    text: str


def name(text: str) -> str:
    """A name the author wrote, fit for a warning: unprintable characters escaped, at most NAME_CHARS."""
    if not text.isprintable():
        text = repr(text)[1:-1]
    return text if len(text) <= NAME_CHARS else text[: NAME_CHARS - len(CUT)] + CUT


def value(raw: object) -> str:
    """A value the author wrote, quoted (so an empty one shows), cut to VALUE_CHARS."""
    text = raw if isinstance(raw, str) else str(raw)
    if len(text) > VALUE_CHARS:
        return repr(text[:VALUE_CHARS]) + CUT
    return repr(text)


def fitted(text: str) -> str:
    """``text`` within MAX_CHARS characters."""
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - len(CUT)] + CUT


def texts(notices: Iterable[Notice]) -> list[str]:
    """The lines of an answer: at most MAX_WARNINGS, the last saying how many more there were."""
    lines = [fitted(n.text) for n in notices]
    if len(lines) <= MAX_WARNINGS:
        return lines
    kept = lines[: MAX_WARNINGS - 1]
    return [*kept, f"... and {len(lines) - len(kept)} more warnings"]
