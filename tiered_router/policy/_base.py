"""What every policy model shares: the pydantic base and the error helpers of validation."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

__all__ = ["FieldErrors", "Loc", "Model", "did_you_mean", "dotted", "unknown"]

Loc = tuple[str | int, ...]


class FieldErrors(ValueError):
    """Problems found by a validator, each at a location relative to the validated value.

    Pydantic reports a validator's error at the validated value; this carries finer locations
    (and several problems at once) so that :func:`load_policy` can point at the right line.
    """

    def __init__(self, problems: Sequence[tuple[Loc, str]]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(f"{dotted(p)}: {m}" if p else m for p, m in self.problems))


def dotted(path: Loc) -> str:
    out = ""
    for el in path:
        out += f"[{el}]" if isinstance(el, int) else (f".{el}" if out else str(el))
    return out


def did_you_mean(word: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, known, n=1)
    return f"; did you mean {close[0]!r}?" if close else f"; expected one of: {', '.join(known)}"


def unknown(what: str, word: str, known: Sequence[str]) -> str:
    """``unknown <what> 'wrod'; did you mean 'word'? (known: a, word)``: names every known one."""
    close = difflib.get_close_matches(word, known, n=1)
    hint = f"; did you mean {close[0]!r}? (known: " if close else "; known: "
    return f"unknown {what} {word!r}{hint}{', '.join(known)}{')' if close else ''}"


class Model(BaseModel):
    # defer_build: the validators are built when a policy is first validated, not when this
    # module is imported (``from tiered_router import Router`` stays fast)
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, defer_build=True)
