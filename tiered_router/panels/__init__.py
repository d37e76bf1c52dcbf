"""The panels wing: whether several fast drafts of one turn give the same answer.

A panel sends a turn to several fast drafts and accepts an answer only when enough of them
agree. This wing holds the pure part: the answer key of one draft (:func:`answer_key`,
what "the same answer" means, see docs/panels.md) and the count of a panel's keys
(:func:`tally`: agreement, majority, and when the outcome is decided so that the engine can
cancel the drafts still running), the exact form of a draft (:func:`exact_form`: what the
caller would receive), which the majority must share for the panel to return it, the
other parts of a draft (:func:`draft_parts`: text beside calls, before an answer, thinking,
reasoning), which it returns only when its majority gave them too (:func:`unshared_parts`,
:func:`without_parts`, :func:`majority_only`), and what the drafts say beyond their majority
(:func:`draft_signals`, the draft half of a deferral model's features). No I/O, no clock,
no randomness; it imports only the root's values (``turn``, ``_limits``) and the calls
wing's readers.

Example:
    ```python
    from tiered_router.panels import answer_key, tally

    keys = [answer_key(draft, turn) for draft in drafts]
    result = tally(keys, k=3, min_agreement=0.67)
    if result.decided and result.agreed:
        accepted = drafts[result.members[0]]
    ```
"""

from __future__ import annotations

from tiered_router.panels._exact import (
    PARTS,
    draft_parts,
    exact_form,
    majority_only,
    unshared_parts,
    without_parts,
)
from tiered_router.panels._final import final_answer, normalise_answer
from tiered_router.panels._keys import AnswerKey, AnswerKind, answer_key
from tiered_router.panels._kinds import TURN_KINDS, panel_kinds, turn_kind
from tiered_router.panels._signals import SIGNAL_NAMES, DraftView, draft_signals, draft_text
from tiered_router.panels._tally import Tally, needed_votes, tally
from tiered_router.panels._values import canonical

__all__ = [
    "AnswerKey",
    "AnswerKind",
    "DraftView",
    "Tally",
    "answer_key",
    "canonical",
    "draft_signals",
    "draft_parts",
    "draft_text",
    "exact_form",
    "final_answer",
    "majority_only",
    "needed_votes",
    "normalise_answer",
    "panel_kinds",
    "tally",
    "turn_kind",
    "unshared_parts",
    "without_parts",
    "PARTS",
    "SIGNAL_NAMES",
    "TURN_KINDS",
]
