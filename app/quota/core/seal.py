"""The reservation a Pod carries, sealed: ``hami.io/quota-reservation`` names the ledger entry whose room the Pod
was admitted into, and the feed counts what the Pod takes against that entry's room (the entry's room then holds
only for the Pods still to come). Whoever could write that annotation could free an entry's room for their own Pod,
so the webhook seals what it writes and the feed credits an entry only with a seal it can verify. Pure.

The value is ``<entry>.<nonce>.<bound>.<demand>.<mac>``:

- ``nonce``: random, one per admission; the feed credits a nonce once, so a seal copied onto a second Pod frees
  nothing (the second Pod counts as used, and the entry still holds its room: counted twice, never free).
- ``bound``: what the admission was (its namespace, requester and Pod name, or generateName when the API server
  names the Pod): a review of the same Pod again (reinvoked after another webhook changed it) presents it, and
  is known as the same admission only when its requester and name agree; the feed cannot read who created a
  Pod, so it checks only ``mac``.
- ``demand``: what the Pod was charged (its amounts, base64url), so a Pod reviewed again whose demand another
  webhook changed is charged the difference only (app/quota/evaluator.py).
- ``mac``: HMAC-SHA256 over the namespace, entry, nonce, bound and demand, keyed by the namespace's ledger key, a
  random secret the first write of the ledger Lease stores beside the entries (app/quota/core/encoding.py's
  KEY_ANNOTATION), readable only where the ledger is: the webhook's own namespace. A Pod whose demand differs from
  the one sealed (a container added later) is not vouched for.

docs/rules.md#only-the-webhook-writes-a-reservation says why a MAC and not a list of admitted Pods in the entry.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from app.quota.core.amounts import Amounts

SEPARATOR = "."
MAC_BYTES = 16  # 128 bits: a forger's chance per try is 2**-128
BOUND_BYTES = 12
MAX_TEXT = 512  # a seal's text at most: an entry id, a nonce, two digests and a few resources' amounts


@dataclass(frozen=True, slots=True)
class Seal:
    """A reservation as a Pod carries it, parsed (not yet verified)."""

    entry: str
    nonce: str
    bound: str
    demand: str
    mac: str

    def text(self) -> str:
        return SEPARATOR.join((self.entry, self.nonce, self.bound, self.demand, self.mac))

    def amounts(self) -> Amounts | None:
        """The demand sealed (None: not one this module wrote; read only once the MAC verifies)."""
        try:
            text = base64.urlsafe_b64decode(self.demand + "=" * (-len(self.demand) % 4)).decode()
            pairs = [part.rpartition("=") for part in text.split(",")] if text else []
            return {name: int(amount) for name, _, amount in pairs}
        except ValueError:
            return None


def seal(key: str, namespace: str, entry: str, nonce: str, who: str, amounts: Mapping[str, int]) -> Seal:
    """The seal of an admission into ``entry`` of a Pod asking ``amounts``; ``who``: what the admission is on each
    review of it (app/admission/review.py's ``admission_of``: its requester and Pod name)."""
    bound = _text(_digest(key, "bound", namespace, who, nonce)[:BOUND_BYTES])
    demand = _text(_canonical(amounts).encode())
    return Seal(entry, nonce, bound, demand, _text(_digest(key, "mac", namespace, entry, nonce, bound, demand)))


def parse(value: str) -> Seal | None:
    """The seal in an annotation's value (None: not one of ours, such as a bare entry id or a forgery's text)."""
    parts = value.split(SEPARATOR)
    if len(parts) != 5 or not all(parts) or len(value) > MAX_TEXT:
        return None
    return Seal(*parts)


def vouched(key: str, namespace: str, found: Seal, amounts: Mapping[str, int]) -> bool:
    """The webhook sealed ``found`` for a Pod of ``namespace`` asking ``amounts`` (the feed's check)."""
    return found.demand == _text(_canonical(amounts).encode()) and _genuine(key, namespace, found)


def charged(key: str, namespace: str, found: Seal, who: str) -> Amounts | None:
    """What an admission of this very Pod by this requester charged, when ``found`` is its seal (the review's
    check, stricter than the feed's: the Pod is being reviewed again, not copied); None when it is not."""
    bound = _text(_digest(key, "bound", namespace, who, found.nonce)[:BOUND_BYTES])
    if not (hmac.compare_digest(bound, found.bound) and _genuine(key, namespace, found)):
        return None
    return found.amounts()


def _genuine(key: str, namespace: str, found: Seal) -> bool:
    mac = _digest(key, "mac", namespace, found.entry, found.nonce, found.bound, found.demand)
    return hmac.compare_digest(_text(mac), found.mac)


def _canonical(amounts: Mapping[str, int]) -> str:
    return ",".join(f"{name}={amounts[name]}" for name in sorted(amounts))


def _digest(key: str, *parts: str) -> bytes:
    message = "\x00".join(parts).encode()
    return hmac.new(key.encode(), message, hashlib.sha256).digest()[:MAC_BYTES]


def _text(raw: bytes) -> str:
    """base64url without padding: no separator, and an annotation value as it is."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
