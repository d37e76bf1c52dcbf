"""Command line of the learned scorer: ``python -m tiered_router.scoring.learned train``."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from tiered_router.scoring.learned._model import TARGETS
from tiered_router.scoring.learned._train import (
    STRONG_MODEL,
    WEAK_MODEL,
    fit_model,
    load_routellm_examples,
)

__all__ = ["DEFAULT_L2", "main"]

DEFAULT_L2 = 0.01
"""L2 strength of the shipped weights (on standardised features)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tiered_router.scoring.learned",
        description="Train the learned scorer on RouteLLM's recorded outcomes.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train weights and write them as JSON")
    train.add_argument("--data", required=True, help="shared data folder (holding routellm_evals/)")
    train.add_argument("--out", required=True, help="weights file to write")
    train.add_argument(
        "--benchmarks", default="mmlu,gsm8k", help="RouteLLM files to train on (mmlu,gsm8k)"
    )
    train.add_argument("--target", choices=sorted(TARGETS), default="gain")
    train.add_argument("--l2", type=float, default=DEFAULT_L2)
    train.add_argument("--hash-buckets", type=int, default=0)
    train.add_argument("--word-pairs", action="store_true", help="also hash word pairs")
    train.add_argument("--strong-model", default=STRONG_MODEL)
    train.add_argument("--weak-model", default=WEAK_MODEL)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).

    Returns:
        The exit code: 0 on success, 1 on an error (one ``error: ...`` line on stderr).
    """
    args = _parser().parse_args(argv)
    started = time.perf_counter()
    benchmarks = tuple(b.strip() for b in args.benchmarks.split(",") if b.strip())
    try:
        rows = load_routellm_examples(
            args.data,
            benchmarks=benchmarks,
            strong_model=args.strong_model,
            weak_model=args.weak_model,
        )
        model = fit_model(
            [r.turn for r in rows],
            strong=[r.strong for r in rows],
            weak=[r.weak for r in rows],
            target=args.target,
            l2=args.l2,
            hash_buckets=args.hash_buckets,
            word_pairs=args.word_pairs,
            meta={
                "trained_on": "lm-sys/RouteLLM@0b64fdafe049e596a3f5657c219329f24af24198 "
                "routellm/evals " + "+".join(benchmarks) + " (decontaminated)",
                "strong_model": args.strong_model,
                "weak_model": args.weak_model,
                "command": "python -m tiered_router.scoring.learned "
                + " ".join(argv if argv is not None else sys.argv[1:]),
            },
        )
        model.save(args.out)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    seconds = time.perf_counter() - started
    blocks = model.meta.get("rows_per_block", {})
    print(
        f"trained on {len(rows)} rows ({', '.join(f'{k}: {v}' for k, v in blocks.items())}), "
        f"target {args.target}, {seconds:.1f} s -> {args.out}"
    )
    return 0
