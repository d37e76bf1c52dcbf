"""Client authentication: bearer keys compared in constant time."""

from __future__ import annotations

import hmac
from collections.abc import Iterable

__all__ = ["KeyChecker"]


class KeyChecker:
    """Checks ``Authorization: Bearer <key>`` against the configured keys.

    Every configured key is compared with :func:`hmac.compare_digest`, with no early exit,
    so the time taken does not tell which key (or how much of one) matched. Keys are held
    as bytes and never shown by ``repr``.

    Args:
        keys: The accepted keys; none means every request is accepted.

    """

    def __init__(self, keys: Iterable[str]) -> None:
        self._keys = tuple(k.encode() for k in keys)

    @property
    def enabled(self) -> bool:
        """Whether keys are required."""
        return bool(self._keys)

    def __repr__(self) -> str:
        return f"KeyChecker(keys={len(self._keys)})"

    def allows(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header value carries an accepted key."""
        if not self._keys:
            return True
        if not authorization:
            return False
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return False
        presented = token.strip().encode()
        matched = False
        for key in self._keys:
            matched |= hmac.compare_digest(key, presented)
        return matched
