"""One recorded outcome of a model on a turn, with further samples of it (for panels).

Split from :mod:`tiered_router.evaluation.dataset` (which re-exports everything here): an
outcome is what a row holds per model; ``samples`` are further independent drafts of the
same model on the same turn, each an outcome of its own, read by the panel replay
(:mod:`tiered_router.evaluation.panel`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tiered_router.turn import Completion, ToolCall, Usage

__all__ = ["DatasetError", "Outcome", "estimate_tokens"]


class DatasetError(ValueError):
    """A dataset file or source could not be read; the message names the file and line."""


def estimate_tokens(text: str) -> int:
    """Estimate a token count from text length (about four characters per token)."""
    return max(1, (len(text) + 3) // 4) if text else 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What one model did on one turn, as recorded.

    Attributes:
        quality: The label in [0, 1]: 1.0 correct, 0.0 wrong, or a graded score.
        text: The recorded answer text; ``None`` when it was not recorded.
        tool_calls: The recorded tool calls; ``None`` when not recorded.
        finish_reason: ``stop``, ``length``, ``tool_calls``...
        usage: Token counts, when known.
        usage_estimated: ``True`` when ``usage`` was estimated from text length.
        latency_s: The recorded latency of the call, seconds, when known.
        cost: The recorded or list-price cost, US dollars; ``None`` computes it from
            ``usage`` and a price.
        error: A recorded failure of the call (the replay backend raises it).
        answer: The recorded final answer, for a draft whose answer its text alone cannot
            give (a program's output); a panel compares it instead of the text.
        samples: Further independent drafts of the same model on the same turn (each with
            the fields above, without samples of its own); a panel replays them.

    """

    quality: float
    text: str | None = None
    tool_calls: tuple[ToolCall, ...] | None = None
    finish_reason: str | None = "stop"
    usage: Usage | None = None
    usage_estimated: bool = False
    latency_s: float | None = None
    cost: float | None = None
    error: str | None = None
    answer: str | None = None
    samples: tuple[Outcome, ...] = ()

    @property
    def recorded(self) -> bool:
        """Whether the answer itself (text or tool calls) was recorded."""
        return self.text is not None or self.tool_calls is not None

    @property
    def correct(self) -> bool:
        """The label read as a yes/no: ``quality >= 0.5``."""
        return self.quality >= 0.5

    def output_tokens(self) -> int:
        """Output tokens: recorded, else estimated from the answer."""
        if self.usage is not None:
            return self.usage.output_tokens
        size = len(self.text or "") + sum(
            len(c.arguments) + len(c.name) for c in self.tool_calls or ()
        )
        return estimate_tokens(" " * size)

    def completion(self, *, model: str, backend: str) -> Completion:
        """Return the recorded answer as a :class:`Completion`."""
        return Completion(
            text=self.text or "",
            tool_calls=self.tool_calls or (),
            finish_reason=self.finish_reason,
            usage=self.usage or Usage(output_tokens=self.output_tokens()),
            model=model,
            backend=backend,
        )

    def to_dict(self) -> dict[str, Any]:
        """Return the outcome as written in a dataset row."""
        return {
            "quality": self.quality,
            "text": self.text,
            "tool_calls": (
                None
                if self.tool_calls is None
                else [
                    {"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls
                ]
            ),
            "finish_reason": self.finish_reason,
            "usage": (
                None
                if self.usage is None
                else {
                    "input_tokens": self.usage.input_tokens,
                    "output_tokens": self.usage.output_tokens,
                }
            ),
            "usage_estimated": self.usage_estimated,
            "latency_s": self.latency_s,
            "cost": self.cost,
            "error": self.error,
        } | self._panel_fields()

    def _panel_fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.answer is not None:
            out["answer"] = self.answer
        if self.samples:
            out["samples"] = [s.to_dict() for s in self.samples]
        return out

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, where: str = "", sample: bool = False
    ) -> Outcome:
        """Build an outcome from its row form.

        Args:
            data: The outcome object.
            where: Where it is (file, line, path), for error messages.
            sample: It is one of another outcome's ``samples`` (which have none of their own).

        Raises:
            DatasetError: When a field has the wrong type or ``quality`` is outside [0, 1].

        """
        if not isinstance(data, Mapping):
            raise DatasetError(f"{where}: an outcome must be an object")
        quality = data.get("quality")
        if isinstance(quality, bool):
            quality = float(quality)
        if not isinstance(quality, (int, float)) or not 0.0 <= float(quality) <= 1.0:
            raise DatasetError(f"{where}.quality: must be a number in [0, 1], got {quality!r}")
        calls = data.get("tool_calls")
        tool_calls = None
        if calls is not None:
            if not isinstance(calls, list):
                raise DatasetError(f"{where}.tool_calls: must be a list or null")
            tool_calls = tuple(
                _tool_call(c, f"{where}.tool_calls[{i}]") for i, c in enumerate(calls)
            )
        usage_data = data.get("usage")
        usage = None
        if usage_data is not None:
            if not isinstance(usage_data, Mapping):
                raise DatasetError(f"{where}.usage: must be an object or null")
            usage = Usage(
                input_tokens=int(usage_data.get("input_tokens") or 0),
                output_tokens=int(usage_data.get("output_tokens") or 0),
                cached_input_tokens=int(usage_data.get("cached_input_tokens") or 0),
            )
        text = data.get("text")
        if text is not None and not isinstance(text, str):
            raise DatasetError(f"{where}.text: must be a string or null")
        return cls(
            quality=float(quality),
            text=text,
            tool_calls=tool_calls,
            finish_reason=data.get("finish_reason", "stop"),
            usage=usage,
            usage_estimated=bool(data.get("usage_estimated", False)),
            latency_s=_opt_float(data.get("latency_s"), f"{where}.latency_s"),
            cost=_opt_float(data.get("cost"), f"{where}.cost"),
            error=data.get("error"),
            answer=_opt_str(data.get("answer"), f"{where}.answer"),
            samples=_samples(data.get("samples"), where, nested=sample),
        )


def _tool_call(data: Any, where: str) -> ToolCall:
    if not isinstance(data, Mapping) or not isinstance(data.get("name"), str):
        raise DatasetError(f"{where}: must be an object with a 'name'")
    args = data.get("arguments", "{}")
    if not isinstance(args, str):
        args = json.dumps(args)
    return ToolCall(id=str(data.get("id") or ""), name=data["name"], arguments=args)


def _opt_float(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise DatasetError(f"{where}: must be a non-negative number or null, got {value!r}")
    return float(value)


def _opt_str(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)  # a recorded numeric answer
    raise DatasetError(f"{where}: must be a string or null, got {type(value).__name__}")


def _samples(value: Any, where: str, *, nested: bool) -> tuple[Outcome, ...]:
    if value is None:
        return ()
    if nested:
        raise DatasetError(f"{where}.samples: a sample cannot have samples of its own")
    if not isinstance(value, list):
        raise DatasetError(f"{where}.samples: must be a list of outcomes or null")
    return tuple(
        Outcome.from_dict(item, where=f"{where}.samples[{i}]", sample=True)
        for i, item in enumerate(value)
    )
