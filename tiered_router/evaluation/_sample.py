"""Build the bundled sample (``data/routellm_sample.jsonl.gz``) from RouteLLM's evals.

Only RouteLLM's data (Apache-2.0) is bundled. The sample is a seeded random draw of
decontaminated rows, so it is reproducible::

    python -m tiered_router.evaluation._sample ../shared/data
"""

from __future__ import annotations

import random
import sys
from dataclasses import replace
from pathlib import Path

from tiered_router.evaluation.dataset import Dataset, EvalRow, write_dataset
from tiered_router.evaluation.sources import load_routellm

__all__ = ["SAMPLE_SIZES", "build_sample"]

SAMPLE_SIZES = {"mmlu": 300, "gsm8k": 200}
"""Rows drawn from each RouteLLM benchmark."""

_SEED = 20240810


def build_sample(data_dir: str | Path, out: str | Path) -> Dataset:
    """Draw the sample from the RouteLLM folder under ``data_dir`` and write it to ``out``."""
    rng = random.Random(_SEED)
    rows: list[EvalRow] = []
    for name, size in SAMPLE_SIZES.items():
        source = load_routellm(data_dir, name)
        picked = sorted(rng.sample(range(len(source.rows)), size))
        rows.extend(source.rows[i] for i in picked)
        base = source
    sample = replace(
        base,
        name="sample",
        rows=tuple(rows),
        notes=(
            f"seeded random sample of RouteLLM's MMLU ({SAMPLE_SIZES['mmlu']} rows) and "
            f"GSM8K ({SAMPLE_SIZES['gsm8k']} rows), decontaminated",
            "token counts estimated from text length (~4 characters per token)",
            "MMLU keeps no responses: the gate passes those drafts without checks",
        ),
    )
    write_dataset(sample, out)
    return sample


if __name__ == "__main__":  # pragma: no cover - a maintenance script
    target = Path(__file__).parent / "data" / "routellm_sample.jsonl.gz"
    built = build_sample(sys.argv[1] if len(sys.argv) > 1 else "../shared/data", target)
    sys.stdout.write(f"wrote {len(built)} rows to {target}\n")
