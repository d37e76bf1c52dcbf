"""``calibrate --write`` for a chosen verification: every chosen key, comments kept."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from tiered_router.evaluation.calibration import dump_checked, write_threshold

if TYPE_CHECKING:
    from tiered_router.evaluation.verification import Choice

__all__ = ["write_verification"]

_PANEL_KINDS = ("tools", "json", "answer")
"""The kinds ``drafts.when`` can name besides ``all`` (prose is "all" only)."""


def write_verification(path: str | os.PathLike[str], choice: Choice) -> str:
    """Write every key :func:`~.verification.choose_verification` chose, comments kept.

    ``scoring.threshold``; per kind of turn present in the data, ``drafts.kinds.<kind>``
    (``k``, ``min_agreement``, ``backends``) for tools, JSON and final answers, and the
    ``drafts:`` section's own ``k``, ``min_agreement`` and ``backends`` for prose (with
    ``all`` added to ``drafts.when`` when prose gets a panel; when prose gets one draft of
    the fast tier, ``all`` leaves ``drafts.when`` instead and the section's keys, the
    candidates a later ``calibrate`` chooses from, stay as they are); with ``drafts.deferral``, each
    kind's deferral threshold (``drafts.kinds.<kind>.deferral_threshold``, prose:
    ``drafts.deferral.threshold``; 1.0 where the kind's choice asks no deferral model); each
    kind's one-draft zone (``drafts.kinds.<kind>.panel_above``; where none was chosen it is
    left out, or ``0`` when the section has a zone the kind would inherit; the section's own
    zone stays for the kinds absent from the data, and is set to ``0`` when prose gets a
    panel, as prose is chosen without a zone).
    Written with ruamel.yaml
    (comments kept), loaded before the file is written.

    Returns:
        The new text of the file.

    Raises:
        PolicyError: When the file is not a valid policy, before or after the edit.
        ImportError: When ruamel.yaml (the ``cli`` extra) is not installed.
    """
    p = Path(path)
    before = p.read_text(encoding="utf-8")
    new = write_threshold(path, choice.threshold)
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    yaml = YAML()
    data = yaml.load(new)
    drafts = data.get("drafts")
    if not isinstance(drafts, dict):
        drafts = CommentedMap()
        data["drafts"] = drafts

    def flow(items: list[str]) -> CommentedSeq:
        seq = CommentedSeq(items)
        seq.fa.set_flow_style()
        return seq

    # the section's one-draft zone: kinds absent from the data keep it; a calibrated kind
    # without a zone says 0 in its entry (no zone), so that it does not inherit it
    section_zone = bool(drafts.get("panel_above"))
    tiers = data.get("tiers")
    fast = tiers.get("fast") if isinstance(tiers, dict) else None
    deferral = drafts.get("deferral")
    for kc in choice.kinds:
        v = kc.verification
        # with a deferral model, a kind chosen without it never defers (1.0)
        defer = (v.defer_above if v.defer_above is not None else 1.0) if deferral else None
        if kc.kind == "prose" and v.k == 1 and list(v.backends) == [fast]:
            # one draft of the fast tier: prose leaves ``when``; the section keeps its keys
            # (the candidate drafters a later calibrate chooses from, and its deferral)
            if "all" in (drafts.get("when") or ()):  # absent: the default leaves prose out
                drafts["when"] = flow(list(_PANEL_KINDS))
            continue
        if kc.kind == "prose":
            drafts["k"] = v.k
            drafts["min_agreement"] = v.min_agreement
            drafts["backends"] = flow(list(v.backends))
            if isinstance(deferral, dict) and defer is not None:
                deferral["threshold"] = round(defer, 6)
            when = drafts.get("when")
            if v.k > 1 and isinstance(when, list) and "all" not in when:
                when.append("all")
            if v.k > 1 and section_zone:  # prose is chosen without a zone
                drafts["panel_above"] = 0
            continue
        kinds = drafts.get("kinds")
        if not isinstance(kinds, dict):
            kinds = CommentedMap()
            drafts["kinds"] = kinds
        entry = CommentedMap(
            [("k", v.k), ("min_agreement", v.min_agreement), ("backends", flow(list(v.backends)))]
        )
        if defer is not None:
            entry["deferral_threshold"] = round(defer, 6)
        if v.panel_above:
            entry["panel_above"] = _exact(v.panel_above)
        elif section_zone:
            entry["panel_above"] = 0
        entry.fa.set_flow_style()
        kinds[kc.kind] = entry
    return dump_checked(yaml, data, p, before=before)


def _exact(value: float) -> float:
    """``value`` to six decimals when that is the same number, else as it is.

    A zone ends between two scores (:func:`~._panel_zone.zone_values`); written shorter, it
    could cross one and move a row out of the zone calibrate chose.
    """
    short = round(value, 6)
    return short if short == value else value
