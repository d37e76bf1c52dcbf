"""Loaders that convert public routing-evaluation data into the dataset format, and data names.

A data argument (``tiered-router eval --data ...``) is one of:

- a dataset file in the format of :mod:`tiered_router.evaluation.dataset` (``.jsonl`` or
  ``.jsonl.gz``), optionally followed by ``:FAST->FRONTIER`` to pick the two models;
- ``sample``: the small sample of RouteLLM's MMLU and GSM8K outcomes bundled in the package;
- the name of a source in the shared data folder, ``NAME[:FAST[->FRONTIER]]``, where
  ``FAST->FRONTIER`` picks the two recorded models (default pair in brackets):

  - ``mmlu``, ``gsm8k``: RouteLLM's MMLU / GSM8K, decontaminated (GSM8K with responses)
    [Mixtral-8x7B-Instruct -> gpt-4-1106-preview];
  - ``mt_bench``: RouteLLM's MT-Bench, 2-turn tasks, GPT-4 judge score / 10 [same pair];
  - ``arc_challenge``, ``mbpp``, ``winogrande``: RouterBench rows, 11 models, recorded dollar
    cost; ``routerbench`` is the three together [gpt-3.5-turbo-1106 -> gpt-4-1106-preview];
  - ``bfcl``: BFCL v1 tool calls with tokens, latency and list prices
    [gpt-4o-mini-2024-07-18-FC -> gpt-4o-2024-08-06-FC];
  - ``alpacaeval``: AlpacaEval 2 judge preference against GPT-4-Turbo
    [gpt-3.5-turbo-1106 -> gpt4_1106_preview];

  e.g. ``bfcl:gpt-3.5-turbo-0125-FC->gpt-4-turbo-2024-04-09-FC`` or ``alpacaeval:claude-2``;
  names combine with ``+`` (``mmlu+gsm8k``).

The shared data folder is ``$TIERED_ROUTER_DATA_DIR`` when set, else ``../shared/data``
relative to the working directory or to the package's repository.
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from tiered_router.evaluation._alpacaeval import ALPACAEVAL_PAIR, load_alpacaeval
from tiered_router.evaluation._bfcl_source import BFCL_PAIR, load_bfcl
from tiered_router.evaluation._source_files import read_jsonl, user_turn
from tiered_router.evaluation.dataset import (
    Dataset,
    DatasetError,
    EvalRow,
    Outcome,
    estimate_tokens,
    read_dataset,
)
from tiered_router.policy._schema import Price
from tiered_router.turn import Usage

__all__ = [
    "DATA_DIR_ENV",
    "SOURCE_NAMES",
    "bundled_policy_path",
    "find_data_dir",
    "load_alpacaeval",
    "load_bfcl",
    "load_data",
    "load_routellm",
    "load_routerbench",
    "load_sample",
    "split_spec",
]

logger = logging.getLogger(__name__)

DATA_DIR_ENV = "TIERED_ROUTER_DATA_DIR"
"""Environment variable naming the shared data folder."""

MIXTRAL = "mistralai/Mixtral-8x7B-Instruct-v0.1"
GPT4 = "gpt-4-1106-preview"

# list prices of the time (US$ per million tokens, 2024-08), from BFCL's price table
# (bfcl_v1_results/prices_usd_per_million_tokens.json: gpt-4-1106-preview, open-mixtral-8x7b)
_ROUTELLM_PRICES = {
    GPT4: Price(input_per_mtok=10.0, output_per_mtok=30.0),
    MIXTRAL: Price(input_per_mtok=0.7, output_per_mtok=0.7),
}

_ROUTELLM_SOURCE = "lm-sys/RouteLLM@0b64fdafe049e596a3f5657c219329f24af24198 routellm/evals"
_ROUTELLM_LICENSE = "Apache-2.0 (RouteLLM); MMLU MIT, GSM8K MIT; outputs: provider terms"

_PAIRS: dict[str, tuple[str, str]] = {
    "mmlu": (MIXTRAL, GPT4),
    "gsm8k": (MIXTRAL, GPT4),
    "mt_bench": (MIXTRAL, GPT4),
    "arc_challenge": ("gpt-3.5-turbo-1106", GPT4),
    "mbpp": ("gpt-3.5-turbo-1106", GPT4),
    "winogrande": ("gpt-3.5-turbo-1106", GPT4),
    "routerbench": ("gpt-3.5-turbo-1106", GPT4),
    "bfcl": BFCL_PAIR,
    "alpacaeval": ALPACAEVAL_PAIR,
}

SOURCE_NAMES: tuple[str, ...] = ("sample", *_PAIRS)
"""Names accepted by :func:`load_data` besides file paths."""

_ROUTERBENCH_TASKS = ("arc_challenge", "mbpp", "winogrande")


def find_data_dir() -> Path | None:
    """Return the shared data folder, or ``None`` when there is none."""
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env) if Path(env).is_dir() else None
    candidates = [
        Path.cwd() / ".." / "shared" / "data",
        Path(__file__).resolve().parents[2] / ".." / "shared" / "data",
    ]
    for c in candidates:
        if c.is_dir():
            return c.resolve()
    return None


def load_routellm(
    data_dir: str | os.PathLike[str], benchmark: str, *, include_contaminated: bool = False
) -> Dataset:
    """Load RouteLLM's MMLU, GSM8K or MT-Bench outcomes (``routellm_evals/``).

    Contaminated prompts (in RouteLLM's router training data) are left out unless asked,
    as RouteLLM does. MMLU keeps no responses (the gate has nothing to check and passes);
    token counts are estimated from text length (about four characters per token; an MMLU
    answer is one token: a letter).

    Raises:
        DatasetError: When the files are missing or ``benchmark`` is unknown.

    """
    folder = Path(data_dir) / "routellm_evals"
    if benchmark == "mt_bench":
        return _load_mt_bench(folder, include_contaminated=include_contaminated)
    if benchmark not in ("mmlu", "gsm8k"):
        raise DatasetError(f"unknown RouteLLM benchmark {benchmark!r}: mmlu, gsm8k, mt_bench")
    rows = []
    for rec in read_jsonl(folder / f"{benchmark}.jsonl"):
        if rec.get("contaminated") and not include_contaminated:
            continue
        prompt = str(rec["prompt"])
        responses: Mapping[str, str] = rec.get("response") or {}
        outcomes = {}
        for model, correct in rec["correct"].items():
            text = responses.get(model)
            out_tokens = estimate_tokens(text) if text is not None else 1
            outcomes[model] = Outcome(
                quality=1.0 if correct else 0.0,
                text=text,
                usage=Usage(input_tokens=estimate_tokens(prompt), output_tokens=out_tokens),
                usage_estimated=True,
            )
        meta = {"source": f"routellm/{benchmark}"}
        if "subject" in rec:
            meta["subject"] = rec["subject"]
        rows.append(EvalRow.build(str(rec["id"]), user_turn(prompt), outcomes, metadata=meta))
    notes = ["token counts estimated from text length (~4 characters per token)"]
    if benchmark == "mmlu":
        notes.append("MMLU keeps no responses: the gate passes every draft without checks")
    return Dataset(
        name=benchmark,
        rows=tuple(rows),
        fast_model=MIXTRAL,
        frontier_model=GPT4,
        prices=dict(_ROUTELLM_PRICES),
        source=_ROUTELLM_SOURCE,
        license=_ROUTELLM_LICENSE,
        notes=tuple(notes),
    )


def _load_mt_bench(folder: Path, *, include_contaminated: bool) -> Dataset:
    questions = {q["question_id"]: q for q in read_jsonl(folder / "mt_bench_questions.jsonl")}
    scores: dict[tuple[Any, int], dict[str, float]] = defaultdict(dict)
    for j in read_jsonl(folder / "mt_bench_judgements.jsonl"):
        scores[(j["question_id"], int(j["turn"]))][str(j["model"])] = float(j["score"])
    rows = []
    for (qid, turn_no), per_model in sorted(
        scores.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])
    ):
        q = questions.get(qid)
        if q is None or (q.get("contaminated") and not include_contaminated):
            continue
        turns = [str(t) for t in q["turns"]][:turn_no]
        # the earlier answers differ per model and were not kept apart: only user turns go in
        messages = [{"role": "user", "content": t} for t in turns]
        outcomes = {
            m: Outcome(
                quality=min(max(s, 0.0), 10.0) / 10.0,
                usage=Usage(input_tokens=estimate_tokens("\n".join(turns)), output_tokens=0),
                usage_estimated=True,
            )
            for m, s in per_model.items()
        }
        meta = {
            "source": "routellm/mt_bench",
            "category": q.get("category"),
            "task_id": f"mt_bench.{qid}",
        }
        rows.append(
            EvalRow.build(
                f"mt_bench.{qid}.{turn_no}", messages, outcomes, step=turn_no - 1, metadata=meta
            )
        )
    return Dataset(
        name="mt_bench",
        rows=tuple(rows),
        fast_model=MIXTRAL,
        frontier_model=GPT4,
        prices=dict(_ROUTELLM_PRICES),
        source=_ROUTELLM_SOURCE,
        license=_ROUTELLM_LICENSE + "; MT-Bench questions Apache-2.0",
        notes=(
            "quality = GPT-4 judge score / 10; each question is a 2-step task",
            "no responses or output lengths: latency is the time to first token only",
        ),
    )


def load_routerbench(data_dir: str | os.PathLike[str], task: str = "routerbench") -> Dataset:
    """Load RouterBench rows (``routerbench_subset/``): ``arc_challenge``, ``mbpp``, ``winogrande``.

    ``routerbench`` loads all three. Costs are RouterBench's recorded per-request dollars;
    token counts are estimated from text length.

    Raises:
        DatasetError: When the files are missing or ``task`` is unknown.

    """
    tasks = _ROUTERBENCH_TASKS if task == "routerbench" else (task,)
    if any(t not in _ROUTERBENCH_TASKS for t in tasks):
        raise DatasetError(f"unknown RouterBench task {task!r}: {', '.join(_ROUTERBENCH_TASKS)}")
    rows = []
    for t in tasks:
        for rec in read_jsonl(Path(data_dir) / "routerbench_subset" / f"{t}.jsonl"):
            prompt = str(rec["prompt"])
            responses = rec.get("response") or {}
            costs = rec.get("cost_usd") or {}
            outcomes = {}
            for model, perf in rec["performance"].items():
                text = responses.get(model)
                outcomes[model] = Outcome(
                    quality=float(perf),
                    text=None if text is None else str(text),
                    usage=Usage(
                        input_tokens=estimate_tokens(prompt),
                        output_tokens=estimate_tokens(str(text or "")),
                    ),
                    usage_estimated=True,
                    cost=costs.get(model),
                )
            meta = {"source": f"routerbench/{t}", "split": rec.get("split_routerdc")}
            rows.append(
                EvalRow.build(str(rec["sample_id"]), user_turn(prompt), outcomes, metadata=meta)
            )
    fast, frontier = _PAIRS["routerbench"]
    return Dataset(
        name=task,
        rows=tuple(rows),
        fast_model=fast,
        frontier_model=frontier,
        source="shuhao02/RouterDC@0e63989c datasets/routerbench_zs (RouterBench 0-shot)",
        license="no license file upstream: internal evaluation only",
        notes=("cost: RouterBench's recorded per-request dollars; tokens estimated from text",),
    )


def load_sample() -> Dataset:
    """Load the sample of RouteLLM outcomes bundled in the package (Apache-2.0)."""
    ref = resources.files("tiered_router.evaluation") / "data" / "sample.jsonl.gz"
    with resources.as_file(ref) as path:
        return read_dataset(path, name="sample")


def bundled_policy_path() -> Path:
    """Return the path of the bundled default evaluation policy."""
    ref = resources.files("tiered_router.evaluation") / "data" / "default_policy.yaml"
    return Path(str(ref))


def _is_name(text: str) -> bool:
    return all(part.strip().lower() in SOURCE_NAMES for part in text.split("+"))


def split_spec(spec: str) -> tuple[str, str | None, str | None]:
    """Split a data argument into its base and the pair spelled after it (``None``: none)."""
    head, sep, pair = spec.rpartition(":")
    if not sep or not (_is_name(head) or "->" in pair):
        return spec, None, None
    fast, arrow, frontier = pair.partition("->")
    return head, fast.strip() or None, (frontier.strip() or None) if arrow else None


def _concat(parts: list[Dataset]) -> Dataset:
    first = parts[0]
    if len(parts) == 1:
        return first
    ids = [r.id for d in parts for r in d.rows]
    if len(set(ids)) != len(ids):
        raise DatasetError("the combined datasets share row ids; combine different sources")
    prices = {m: p for d in parts for m, p in d.prices.items()}
    return Dataset(
        name="+".join(d.name for d in parts),
        rows=tuple(r for d in parts for r in d.rows),
        fast_model=first.fast_model
        if all(d.fast_model == first.fast_model for d in parts)
        else None,
        frontier_model=(
            first.frontier_model
            if all(d.frontier_model == first.frontier_model for d in parts)
            else None
        ),
        prices=prices,
        source="; ".join(dict.fromkeys(d.source for d in parts if d.source)),
        license="; ".join(dict.fromkeys(d.license for d in parts if d.license)),
        notes=tuple(dict.fromkeys(n for d in parts for n in d.notes)),
    )


_ROUTELLM = "lm-sys/RouteLLM's evaluation data"
_ROUTERBENCH = "RouterBench rows in shuhao02/RouterDC"
_ORIGINS = {
    "mmlu": _ROUTELLM,
    "gsm8k": _ROUTELLM,
    "mt_bench": _ROUTELLM,
    "arc_challenge": _ROUTERBENCH,
    "mbpp": _ROUTERBENCH,
    "winogrande": _ROUTERBENCH,
    "routerbench": _ROUTERBENCH,
    "bfcl": "the Berkeley Function-Calling Leaderboard v1 results (ShishirPatil/gorilla)",
    "alpacaeval": "tatsu-lab/alpaca_eval's per-prompt judge preferences",
}


def _load_one(base: str, data_dir: str | os.PathLike[str] | None) -> Dataset:
    key = base.strip().lower()
    if key == "sample":
        return load_sample()
    if key in _PAIRS:
        folder = Path(data_dir) if data_dir is not None else find_data_dir()
        if folder is None or not folder.is_dir():
            raise DatasetError(
                f"--data {base}: this source is read from a data folder that is not part of "
                f"the package (converted from {_ORIGINS.get(key, 'public benchmark results')}) "
                f"and none was found: set {DATA_DIR_ENV} to it, or use --data sample (bundled: "
                "500 RouteLLM MMLU and GSM8K rows) or a dataset file of your own (tiered-router "
                "dataset from-traces builds one from your traces; format: docs/evaluation.md)"
            )
        return _load_named(key, folder)
    if Path(base).is_file():
        return read_dataset(base)
    raise DatasetError(
        f"--data {base!r}: not a file and not a known name; names: {', '.join(SOURCE_NAMES)}"
    )


def load_data(spec: str, *, data_dir: str | os.PathLike[str] | None = None) -> Dataset:
    """Load a dataset by file path or name (``NAME[+NAME...][:FAST[->FRONTIER]]``).

    Names are those of the module docs; ``mmlu+gsm8k`` concatenates two sources.

    Raises:
        DatasetError: When the name is unknown, the shared data folder is absent, the file
            is malformed, or a named model has no outcomes.

    """
    base, fast, frontier = split_spec(spec)
    if _is_name(base):
        dataset = _concat([_load_one(part, data_dir) for part in base.split("+")])
    else:
        dataset = _load_one(base, data_dir)
    if fast is not None or frontier is not None:
        dataset = dataset.with_pair(
            fast or dataset.fast_model or "", frontier or dataset.frontier_model or ""
        )
    elif dataset.fast_model and dataset.frontier_model:
        dataset = dataset.with_pair(dataset.fast_model, dataset.frontier_model)
    return dataset


def _load_named(key: str, folder: Path) -> Dataset:
    if key in ("mmlu", "gsm8k", "mt_bench"):
        return load_routellm(folder, key)
    if key in ("routerbench", *_ROUTERBENCH_TASKS):
        return load_routerbench(folder, key)
    if key == "bfcl":
        return load_bfcl(folder)
    return load_alpacaeval(folder)
