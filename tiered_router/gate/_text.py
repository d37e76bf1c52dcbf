"""Built-in checks on a draft's text: emptiness, truncation, refusals, regex, size.

Every check here is a frozen dataclass built from the policy's options, returning
``None`` on pass and a reason string on failure. They are tuned to catch what goes wrong
with diffusion drafts (fixed-length canvases padded with EOS tokens, early EOS) while
passing ordinary prose, code and JSON. Loops are :mod:`tiered_router.gate._repetition`'s.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from tiered_router.turn import Completion, Turn

__all__ = [
    "EOS_TOKENS",
    "MaxCharsCheck",
    "NoRefusalCheck",
    "NonEmptyCheck",
    "NotTruncatedCheck",
    "RegexCheck",
]

EOS_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|end_of_text|>",
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|eos|>",
    "</s>",
    "<eos>",
    "<pad>",
    "<|pad|>",
    "[PAD]",
    "<|mdm_mask|>",
    "<|mask|>",
    "<\uff5cend\u2581of\u2581sentence\uff5c>",
)
"""End-of-sequence, padding and unfilled-mask tokens that leak into the text of local
servers (GPT/Qwen/Llama/Mistral/Gemma/DeepSeek families; LLaDA and Dream mask tokens)."""


def _tokens(value: object, where: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(f"{where}: must be a list of strings")
    tokens = tuple(value)
    if not tokens or not all(isinstance(t, str) and t for t in tokens):
        raise ValueError(f"{where}: must be a non-empty list of non-empty strings")
    return tokens


def _int(value: object, where: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{where}: must be an integer >= {minimum}, got {value!r}")
    return value


def _tool_calls_only(completion: Completion) -> bool:
    return bool(completion.tool_calls) and not completion.text.strip()


@dataclass(frozen=True, slots=True, kw_only=True)
class NonEmptyCheck:
    """``non_empty``: the draft has content.

    Fails when there is no text and no tool call, or when the text is only whitespace and
    end-of-sequence / padding tokens (``<|endoftext|>``, ``</s>``, ``<eos>``, ...).

    Attributes:
        eos_tokens: The tokens that count as padding.
    """

    name: ClassVar[str] = "non_empty"

    def needs_whole_draft(self, turn: Turn) -> bool:
        """False: judged on a streamed-through draft without holding the caller back."""
        return False

    eos_tokens: Sequence[str] = EOS_TOKENS
    _padding: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        tokens = _tokens(self.eos_tokens, "non_empty.eos_tokens")
        object.__setattr__(self, "eos_tokens", tokens)
        padding = re.compile("(?:\\s|" + "|".join(map(re.escape, tokens)) + ")*")
        object.__setattr__(self, "_padding", padding)

    def __call__(self, completion: Completion, turn: Turn, /) -> str | None:
        """Return a reason when the draft is empty."""
        if completion.tool_calls:
            return None
        text = completion.text.strip()
        if not text:
            if completion.text:
                return "output is only whitespace"
            return "empty output: no text and no tool calls"
        if text.startswith(tuple(self.eos_tokens)) and self._padding.fullmatch(text):
            return "output is only end-of-sequence / padding tokens"
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class NotTruncatedCheck:
    """``not_truncated``: the draft was not cut off or padded out to a fixed length.

    Fails on ``finish_reason == "length"`` (the token limit was hit), and on text whose end
    is padding: more than ``max_eos_run`` end-of-sequence tokens or more than
    ``max_trailing_newlines`` newlines after the last real character (a diffusion model
    filling a fixed-length canvas).

    Attributes:
        max_eos_run: Most EOS tokens allowed at the end of the text.
        max_trailing_newlines: Most newlines allowed at the end of the text.
        eos_tokens: The tokens that count as padding.
    """

    name: ClassVar[str] = "not_truncated"

    def needs_whole_draft(self, turn: Turn) -> bool:
        """False: judged on a streamed-through draft without holding the caller back."""
        return False

    max_eos_run: int = 2
    max_trailing_newlines: int = 8
    eos_tokens: Sequence[str] = EOS_TOKENS

    def __post_init__(self) -> None:
        _int(self.max_eos_run, "not_truncated.max_eos_run")
        _int(self.max_trailing_newlines, "not_truncated.max_trailing_newlines")
        tokens = _tokens(self.eos_tokens, "not_truncated.eos_tokens")
        object.__setattr__(self, "eos_tokens", tokens)

    def __call__(self, completion: Completion, turn: Turn, /) -> str | None:
        """Return a reason when the draft was truncated or padded."""
        if completion.finish_reason == "length":
            return "finish_reason is 'length': the output hit the token limit"
        text = completion.text
        tokens = tuple(self.eos_tokens)
        end = len(text)
        eos = newlines = 0
        # walk back over the padding without copying the text; stop once the verdict is known
        while end and eos <= self.max_eos_run:
            while end and text[end - 1].isspace():
                end -= 1
                newlines += text[end] == "\n"
            if not text.endswith(tokens, 0, end):
                break
            end -= next(len(t) for t in tokens if text.endswith(t, 0, end))
            eos += 1
        if eos > self.max_eos_run:
            return f"output is padded with end-of-sequence tokens (more than {self.max_eos_run})"
        if newlines > self.max_trailing_newlines:
            return (
                f"output is padded with {newlines} trailing newlines "
                f"(max {self.max_trailing_newlines})"
            )
        return None


_VERBS = (
    r"(?:help(?!\s+but\b)(?!\s+\w+ing\b)|assist|provide|comply|fulfill?|create|generate|produce"
    r"|share|write|engage|support|answer\s+that|do\s+(?:that|this)|continue|participate"
    r"|be\s+of\s+(?:any\s+)?(?:help|assistance)|accommodate|offer|give|discuss|complete\s+(?:that"
    r"|this)|process\s+(?:that|this)|respond\s+to\s+(?:that|this))"
)
_CANT = (
    r"(?:can(?:not|'t|\s+not)|won't|will\s+not"
    r"|am\s+(?:unable|not\s+able)|'m\s+(?:unable|not\s+able))"
)
_REFUSAL = re.compile(
    rf"""
    [\s"'*_>#]*                                     # quotes / markdown before the words
    (?:
        (?:i'm|i\s+am)\s+(?:really\s+|very\s+|so\s+|truly\s+)?sorry\b.{{0,60}}?\bi\s*{_CANT}
      | (?:sorry|unfortunately|regrettably)\b[,.!]?\s*(?:but\s+)?i\s*{_CANT}
      | i\s+(?:apologi[sz]e|regret)\b.{{0,60}}?\bi\s*{_CANT}
      | (?:i'm|i\s+am)\s+afraid\s+i\s*{_CANT}
      | i\s*{_CANT}\s+(?:to\s+)?{_VERBS}
      | i\s+(?:must|have\s+to)\s+(?:respectfully\s+|politely\s+)?decline
      | (?:i'm|i\s+am)\s+not\s+(?:allowed|permitted|comfortable)\b
      | as\s+an\s+ai\b
    )
    """,
    re.IGNORECASE | re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class NoRefusalCheck:
    """``no_refusal``: the model did not refuse.

    Fails when the completion carries OpenAI's structured ``refusal``, when
    ``finish_reason`` is ``content_filter``, or when a short text (at most ``max_chars``
    characters, where the refusal is the answer) *starts* with a refusal phrase: "I'm
    sorry, but I can't ...", "I cannot help with ...", "As an AI ...". A longer answer that
    opens with an apology, or mentions "I can't" in passing, passes: the phrase must lead
    and dominate. A draft that called tools is not checked for phrases.

    Attributes:
        max_chars: Longest text still judged by its opening phrase.
    """

    name: ClassVar[str] = "no_refusal"

    def needs_whole_draft(self, turn: Turn) -> bool:
        """False: judged on a streamed-through draft without holding the caller back."""
        return False

    max_chars: int = 400

    def __post_init__(self) -> None:
        _int(self.max_chars, "no_refusal.max_chars")

    def __call__(self, completion: Completion, turn: Turn, /) -> str | None:
        """Return a reason when the draft is a refusal."""
        if completion.refusal:
            return f"model refused: {completion.refusal[:120]!r}"
        if completion.finish_reason == "content_filter":
            return "finish_reason is 'content_filter': the output was filtered"
        text = completion.text
        if completion.tool_calls or len(text) > self.max_chars or not text:
            return None
        match = _REFUSAL.match(text.replace("\u2019", "'"))
        if match is None:
            return None
        return f"output is a refusal: {text.strip()[:120]!r}"


_FLAGS = {
    "a": "",  # RE2's \d, \w and \s are ASCII already
    "i": "i",
    "m": "m",
    "s": "s",
    "ascii": "",
    "ignorecase": "i",
    "multiline": "m",
    "dotall": "s",
}


def _flags(value: object) -> str:
    """Return the inline-flag letters (``"im"``) for the policy's ``flags`` option."""
    names = list(value) if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)):
        raise ValueError(
            f"regex.flags: must be letters like 'im' or a list of names, got {value!r}"
        )
    letters = ""
    for name in names:
        flag = _FLAGS.get(str(name).lower())
        if flag is None:
            raise ValueError(
                f"regex.flags: unknown flag {name!r}; known: a, i, m, s or their names "
                "(ASCII, IGNORECASE, MULTILINE, DOTALL)"
            )
        letters += flag if flag not in letters else ""
    return letters


class _Match(Protocol):
    def start(self) -> int: ...

    def group(self) -> str: ...


class _Pattern(Protocol):
    def search(self, text: str) -> _Match | None: ...


def _compile(pattern: str, letters: str) -> _Pattern:
    """Compile ``pattern`` with RE2: matching takes time linear in the draft's length.

    Python's ``re`` backtracks, so a pattern such as ``^(a+)+$`` can take seconds or more
    on one draft. RE2 never backtracks; in exchange it has no backreferences and no
    lookaround, which are refused here, when the policy is loaded.
    """
    import re2  # google-re2: imported when a policy first uses a regex check

    options = re2.Options()
    options.log_errors = False  # the error is raised below; RE2 would also print it
    try:
        compiled: _Pattern = re2.compile(
            f"(?{letters}){pattern}" if letters else pattern, options=options
        )
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        raise ValueError(
            f"regex.pattern: invalid regular expression: {reason} (patterns run on RE2, "
            "in linear time: no backreferences, no lookaround)"
        ) from None
    return compiled


@dataclass(frozen=True, slots=True, kw_only=True)
class RegexCheck:
    r"""``regex``: the text must (or must not) contain a match of a pattern.

    Searches like ``re.search``: anchor with ``^``/``$`` (and the ``m`` flag) to match whole
    lines. Patterns run on RE2 (``google-re2``), in time linear in the draft's length, so no
    pattern can stall the gate; RE2 has no backreferences (``\1``) or lookaround
    (``(?=...)``), and its ``\d``, ``\w``, ``\b`` are ASCII-only (``\pL``, ``\pN`` match
    any letter or digit). A draft that only called tools is not checked.

    Example:
        ```yaml
        gate:
          checks:
            - regex: {pattern: "^ANSWER: ", flags: m}
            - regex: {pattern: "(?i)lorem ipsum", must_match: false}
        ```

    Attributes:
        pattern: A regular expression in RE2 syntax (Python's, less backreferences and
            lookaround).
        must_match: ``True``: fail when nothing matches; ``False``: fail when something does.
        flags: Letters (``"im"``) or names (``[IGNORECASE, MULTILINE]``): ``i``, ``m``,
            ``s`` (DOTALL), ``a`` (ASCII; RE2 classes are ASCII already).
    """

    name: ClassVar[str] = "regex"
    pattern: str
    must_match: bool = True
    flags: str | Sequence[str] = ""
    _compiled: _Pattern = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.pattern, str) or not self.pattern:
            raise ValueError(f"regex.pattern: must be a non-empty string, got {self.pattern!r}")
        if not isinstance(self.must_match, bool):
            raise ValueError(f"regex.must_match: must be true or false, got {self.must_match!r}")
        object.__setattr__(self, "_compiled", _compile(self.pattern, _flags(self.flags)))

    def __call__(self, completion: Completion, turn: Turn, /) -> str | None:
        """Return a reason when the text breaks the pattern rule."""
        if _tool_calls_only(completion):
            return None
        found = self._compiled.search(completion.text)
        if self.must_match and found is None:
            return f"text does not match /{self.pattern}/"
        if not self.must_match and found is not None:
            return (
                f"text matches forbidden /{self.pattern}/ at char {found.start()}: "
                f"{found.group()[:60]!r}"
            )
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class MaxCharsCheck:
    """``max_chars``: the text is at most ``limit`` characters long.

    Attributes:
        limit: Most characters allowed.
    """

    name: ClassVar[str] = "max_chars"

    def needs_whole_draft(self, turn: Turn) -> bool:
        """False: judged on a streamed-through draft without holding the caller back."""
        return False

    limit: int

    def __post_init__(self) -> None:
        _int(self.limit, "max_chars.limit")

    def __call__(self, completion: Completion, turn: Turn, /) -> str | None:
        """Return a reason when the text is too long."""
        size = len(completion.text)
        if size > self.limit:
            return f"text is {size} characters (max {self.limit})"
        return None
