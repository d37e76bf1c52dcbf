"""What the scripted server saw: :class:`RecordedRequest`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RecordedRequest"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordedRequest:
    """A request the server received.

    Attributes:
        path: The path, without the query string.
        method: ``GET``, ``POST``, ...
        headers: Header names lower-cased.
        body: The JSON body (``{}`` when the body was empty or not a JSON object).
        raw_body: The body bytes as received.

    """

    path: str
    method: str
    headers: Mapping[str, str]
    body: dict[str, Any] = field(default_factory=dict)
    raw_body: bytes = b""

    @property
    def model(self) -> str | None:
        """The body's ``model``, if it is a string."""
        model = self.body.get("model")
        return model if isinstance(model, str) else None

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The body's ``messages`` (``[]`` when absent)."""
        messages = self.body.get("messages")
        return messages if isinstance(messages, list) else []
