"""``calibrate`` chooses the verification on one half of the rows; scored on the other half.

    PYTHONPATH=. TIERED_ROUTER_DATA_DIR=../shared/data python benchmarks/bench_verify.py

For each configuration the candidate drafters are listed in ``drafts.backends``; the
library's own chooser (:func:`tiered_router.evaluation.verification.choose_verification`, the
code of ``tiered-router calibrate --holdout 0.5``) picks threshold, drafters, ``k`` and
``min_agreement`` per kind of turn on the calibration half so that the one-sided 95 % lower
bound of the quality retained meets 99 % (tool calls) or 97 % (RouterBench), and the
chosen policy is scored on the held-out half beside random and prompt length at the same
cost and all-fast. Targets (issue 27): tool calls >= 99 % of the strong model's accuracy at
<= 35 % of its cost (drafters each <= 10 % of it) or <= 55 % (cheapest capable drafters
10-35 %); RouterBench ARC-Challenge / Winogrande / MBPP >= 97 % at <= 50 %.

``--splits N [--case TEXT]`` instead calibrates each case (those whose name holds TEXT) on N
other halves of its rows (the row ids salted with the split's number before the hash), with
and without the one-draft zone (``choose_verification(..., zones=False)``), and prints the
held-out figures of each: how much a headline depends on one split, and what the zone adds.

Skips (exit 0, a message) when the shared data folder is absent.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys

from tiered_router.evaluation import find_data_dir
from tiered_router.evaluation.calibration import Target
from tiered_router.evaluation.dataset import Dataset
from tiered_router.evaluation.sources import load_data
from tiered_router.evaluation.sweep import CalibrationError
from tiered_router.evaluation.verification import choose_verification
from tiered_router.policy import load_policy
from tiered_router.policy._schema import Policy

BFCL_DRAFTERS = {
    "mini": "gpt-4o-mini-2024-07-18-FC",
    "mini-text": "gpt-4o-mini-2024-07-18",
    "gpt35": "gpt-3.5-turbo-0125-FC",
}
RB_DRAFTERS = {
    "gpt35": "gpt-3.5-turbo-1106",
    "mixtral": "mistralai/mixtral-8x7b-chat",
    "instant": "claude-instant-v1",
}

CASES = [
    # (name, data, drafters, strong, target retained, cost target, drafter class)
    ("tools: gpt-4o-mini x2 + gpt-3.5 -> gpt-4-turbo", "bfcl", BFCL_DRAFTERS,
     "gpt-4-turbo-2024-04-09-FC", 0.99, 0.35, "drafters <= 10 %"),
    ("tools: gpt-4o-mini x2 + gpt-3.5 -> gpt-4o-2024-08-06", "bfcl", BFCL_DRAFTERS,
     "gpt-4o-2024-08-06-FC", 0.99, 0.35, "drafters <= 10 % (gpt-3.5: ~17 %)"),
    ("tools: gpt-4o-mini x2 + gpt-3.5 -> gpt-4o-2024-05-13", "bfcl", BFCL_DRAFTERS,
     "gpt-4o-2024-05-13-FC", 0.99, 0.35, "drafters <= 10 %"),
    ("tools: gpt-3.5 alone -> gpt-4o-2024-08-06", "bfcl", {"gpt35": BFCL_DRAFTERS["gpt35"]},
     "gpt-4o-2024-08-06-FC", 0.99, 0.55, "drafter 10-35 %"),
    ("answers: gpt-3.5 + mixtral + claude-instant -> gpt-4 (ARC-C, Winogrande, MBPP)",
     "routerbench", RB_DRAFTERS, "gpt-4-1106-preview", 0.97, 0.50, "drafters <= 10 %"),
]  # fmt: skip


def panel_policy(
    data: str,
    drafters: dict[str, str],
    strong: str,
    drafts: str = "min_agreement: 1.0",
    scoring: str = "{type: transfer, threshold: 1.0}",
) -> Policy:
    """Replayed drafters (the first is the fast tier) and a strong model; every drafter in
    ``drafts:``, with ``drafts`` added to that section (bench_deferral.py builds its own on it).
    """
    names = list(drafters)
    lines = [
        f'  {n}: {{type: replay, model: "{m}", kind: diffusion, options: {{data: {data}}}}}'
        for n, m in drafters.items()
    ]
    return load_policy(
        "version: 1\nbackends:\n"
        + "\n".join(lines)
        + f'\n  big: {{type: replay, model: "{strong}", options: {{data: {data}}}}}\n'
        + f"tiers: {{fast: {names[0]}, frontier: big}}\n"
        + f"scoring: {scoring}\n"
        + f"drafts: {{k: {len(names)}, backends: [{', '.join(names)}], {drafts}}}\n"
    )


def salted(dataset: Dataset, salt: int) -> Dataset:
    """The same rows under other ids, so that ``--holdout``'s hash halves them another way."""
    rows = tuple(dataclasses.replace(r, id=f"{salt}:{r.id}") for r in dataset.rows)
    return dataclasses.replace(dataset, rows=rows)


def splits(n: int, case: str) -> None:
    """Each case on ``n`` other halves, with and without the one-draft zone (held-out figures)."""
    for name, data, drafters, strong, retained, cost, _ in CASES:
        if case not in name:
            continue
        first = next(iter(drafters.values()))
        dataset = load_data(f"{data}:{first}->{strong}")
        policy = panel_policy(data, drafters, strong)
        print(f"## {name} (target >= {retained:.0%} at <= {cost:.0%})")
        print("| split | with zones: held-out retained (bound), cost | zone chosen | without |")
        print("| --- | --- | --- | --- |")
        costs: dict[bool, list[float]] = {True: [], False: []}
        for salt in range(1, n + 1):
            cells = []
            chosen_zone = False
            for zones in (True, False):
                try:
                    c = choose_verification(
                        policy, salted(dataset, salt), Target(quality_retained=retained),
                        holdout=0.5, zones=zones,
                    )  # fmt: skip
                except CalibrationError:
                    cells.append("none meets the bound")
                    continue
                h = c.holdout
                assert h is not None
                costs[zones].append(h.cost_share)
                cells.append(f"{h.retained:.1%} ({h.retained_low:.1%}), {h.cost_share:.1%}")
                if zones:
                    chosen_zone = any(k.verification.panel_above for k in c.kinds)
            print(f"| {salt} | {cells[0]} | {'yes' if chosen_zone else 'no'} | {cells[1]} |")
            sys.stdout.flush()
        for zones, label in ((True, "with zones"), (False, "without")):
            if costs[zones]:
                print(
                    f"{label}: held-out cost {min(costs[zones]):.1%}-{max(costs[zones]):.1%}, "
                    f"median {statistics.median(costs[zones]):.1%}, "
                    f"at or below {cost:.0%} in {sum(x <= cost for x in costs[zones])} of {n}"
                )
        print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--splits", type=int, default=0, help="other halves to try per case")
    parser.add_argument("--case", default="", help="only the cases whose name holds this")
    args = parser.parse_args()
    if find_data_dir() is None:
        print("skipped: ../shared/data not found (set TIERED_ROUTER_DATA_DIR)")
        return
    if args.splits:
        splits(args.splits, args.case)
        return
    print(
        "| drafters -> strong | chosen (per kind) | calibration half: retained (bound), cost "
        "| held-out half: retained, cost, fast | random, same cost | prompt length, same cost "
        "| all-fast | target |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, data, drafters, strong, retained, cost, klass in CASES:
        first = next(iter(drafters.values()))
        dataset = load_data(f"{data}:{first}->{strong}")
        policy = panel_policy(data, drafters, strong)
        try:
            c = choose_verification(policy, dataset, Target(quality_retained=retained), holdout=0.5)
        except CalibrationError as exc:
            print(f"| {name} | none: {exc} | | | | | | MISSED |")
            continue
        h = c.holdout
        assert h is not None
        chosen = (
            "; ".join(f"{k.kind}: {k.verification.describe()}" for k in c.kinds)
            + f"; threshold {c.threshold:g}"
        )
        b = c.baselines
        met = h.retained >= retained and h.cost_share <= cost
        print(
            f"| {name} ({klass}) | {chosen} | {c.calibration.retained:.1%} "
            f"({c.calibration.retained_low:.1%}), {c.calibration.cost_share:.1%} "
            f"| {h.retained:.1%}, {h.cost_share:.1%}, {h.fast_share:.1%} "
            f"| {b['random (same cost)'][0]:.1%} | {b['prompt length (same cost)'][0]:.1%} "
            f"| {b['all-fast'][0]:.1%} at {b['all-fast'][1]:.1%} "
            f"| >= {retained:.0%} at <= {cost:.0%}: {'met' if met else 'MISSED'} |"
        )
        sys.stdout.flush()


if __name__ == "__main__":
    main()
