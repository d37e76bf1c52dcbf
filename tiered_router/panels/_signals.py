"""What a panel's drafts say beyond their majority: the draft signals of a deferral model.

Agreement alone is blind where cheap models fail together (multiple choice, code): three
drafts can give the same wrong option. The drafts carry more than their majority, and
:func:`draft_signals` reads it into a fixed vector (:data:`SIGNAL_NAMES`, each in [0, 1]):

- ``answers``: distinct checkable answers over ``k`` (1/k: all agree; 1: all differ);
- ``majority_share`` and ``runner_up_share``: the largest and second largest group of
  equal checkable answers, over ``k``;
- ``not_comparable_share``, ``failed_share``: drafts with no checkable answer, drafts that
  failed (no answer at all);
- ``gate_failed_share``: drafts the quality gate refused (of those it judged);
- ``length_mean`` (log scale, 1.0 at 4,000 characters) and ``length_spread`` (the
  coefficient of variation of the answers' lengths, capped at 1);
- ``hedging``: share of drafts with a hedging phrase ("I think", "probably", "not sure",
  "it depends", ...);
- ``text_overlap``: mean word-set overlap (Jaccard) over pairs of drafts, the agreement of
  drafts whose answers cannot be compared (code, prose);
- ``in_majority_0`` .. ``in_majority_3``: whether draft ``i`` (its position in the panel,
  so its backend) gave the majority answer.

Drafts are given in **draft order** (draft ``i`` at index ``i``), never arrival order, so the
engine's live panel and the offline replay of the same drafts give the same vector. Pure: no
I/O, no clock, no randomness.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from tiered_router.panels._keys import AnswerKey
from tiered_router.turn import Completion

__all__ = ["POSITIONS", "SIGNAL_NAMES", "DraftView", "draft_signals", "draft_text"]

POSITIONS = 4
"""Panel positions with their own ``in_majority_<i>`` signal."""

SIGNAL_NAMES: tuple[str, ...] = (
    "answers",
    "majority_share",
    "runner_up_share",
    "not_comparable_share",
    "failed_share",
    "gate_failed_share",
    "length_mean",
    "length_spread",
    "hedging",
    "text_overlap",
    *(f"in_majority_{i}" for i in range(POSITIONS)),
)
"""The draft signals, in the order of :func:`draft_signals`'s vector."""

_LENGTH_FULL = 4000.0
_SCAN = 4000  # characters of a draft read for hedging and overlap
_HEDGES = re.compile(
    r"\b(?:i think|i believe|i'm not sure|i am not sure|not sure|probably|possibly|perhaps|"
    r"maybe|might be|may be|it seems|seems to|it appears|it depends|unclear|ambiguous|"
    r"difficult to (?:say|determine)|hard to (?:say|tell)|cannot (?:be )?determine|"
    r"can't (?:be )?determine|without more (?:context|information)|likely)\b",
    re.IGNORECASE,
)
_WORD = re.compile(r"\w+")


@dataclass(frozen=True, slots=True, kw_only=True)
class DraftView:
    """One draft as the signals see it.

    Attributes:
        key: Its answer key (:func:`~tiered_router.panels.answer_key`); ``None`` when the
            draft failed and gave no answer.
        text: What it wrote (:func:`draft_text`).
        passed: The quality gate's verdict on it (``None``: not judged).
    """

    key: AnswerKey | None
    text: str = ""
    passed: bool | None = None


def draft_text(completion: Completion) -> str:
    """The text a draft's signals read: its text, then each tool call's name and arguments."""
    if not completion.tool_calls:
        return completion.text
    calls = " ".join(f"{c.name} {c.arguments}" for c in completion.tool_calls)
    return f"{completion.text} {calls}" if completion.text else calls


def _overlap(texts: Sequence[str]) -> float:
    sets = [frozenset(_WORD.findall(t[:_SCAN].lower())) for t in texts]
    pairs = list(combinations(sets, 2))
    if not pairs:
        return 1.0
    total = 0.0
    for a, b in pairs:
        union = len(a | b)
        total += len(a & b) / union if union else 1.0
    return total / len(pairs)


def draft_signals(drafts: Sequence[DraftView]) -> tuple[float, ...]:
    """The signals of a panel's drafts, in :data:`SIGNAL_NAMES` order (see the module docs).

    Args:
        drafts: Every draft of the panel, in draft order (``k = len(drafts)``).

    Returns:
        One value per signal name, each in [0, 1].

    Raises:
        ValueError: When ``drafts`` is empty.
    """
    k = len(drafts)
    if k == 0:
        raise ValueError("draft_signals: a panel has at least one draft")
    groups: dict[AnswerKey, list[int]] = {}
    not_comparable = failed = 0
    for i, d in enumerate(drafts):
        if d.key is None:
            failed += 1
        elif d.key.comparable:
            groups.setdefault(d.key, []).append(i)
        else:
            not_comparable += 1
    ranked = sorted(groups.values(), key=lambda members: (-len(members), members[0]))
    top = len(ranked[0]) if ranked else 0
    second = len(ranked[1]) if len(ranked) > 1 else 0
    members = set(ranked[0]) if ranked else set()
    judged = [d.passed for d in drafts if d.passed is not None]
    answered = [d.text for d in drafts if d.key is not None]
    lengths = [len(t) for t in answered]
    mean = sum(lengths) / len(lengths) if lengths else 0.0
    spread = 0.0
    if len(lengths) > 1 and mean > 0:
        var = sum((x - mean) ** 2 for x in lengths) / len(lengths)
        spread = min(1.0, math.sqrt(var) / mean)
    hedging = (
        sum(1 for t in answered if _HEDGES.search(t[:_SCAN])) / len(answered) if answered else 0.0
    )
    return (
        len(ranked) / k,
        top / k,
        second / k,
        not_comparable / k,
        failed / k,
        (sum(1 for p in judged if not p) / len(judged)) if judged else 0.0,
        min(1.0, math.log1p(mean) / math.log1p(_LENGTH_FULL)),
        spread,
        hedging,
        _overlap(answered) if answered else 0.0,
        *(1.0 if i in members else 0.0 for i in range(POSITIONS)),
    )
