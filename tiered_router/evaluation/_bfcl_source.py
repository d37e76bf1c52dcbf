"""The ``bfcl`` data source: BFCL v1 questions with every model's recorded tool calls."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections import Counter, defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tiered_router.evaluation import _bfcl, _bfcl_judge
from tiered_router.evaluation._source_files import read_jsonl, user_turn
from tiered_router.evaluation.dataset import (
    Dataset,
    EvalRow,
    Outcome,
)
from tiered_router.gate import lift_text_tool_calls
from tiered_router.policy._schema import Price
from tiered_router.turn import Usage

__all__ = ["BFCL_PAIR", "load_bfcl"]

BFCL_PAIR = ("gpt-4o-mini-2024-07-18-FC", "gpt-4o-2024-08-06-FC")
"""The default (fast, frontier) models of the source."""

logger = logging.getLogger("tiered_router.evaluation.sources")


def load_bfcl(data_dir: str | os.PathLike[str], *, models: list[str] | None = None) -> Dataset:
    """Load BFCL v1 questions with every model's recorded tool calls (``bfcl_v1_results/``).

    Function specs become OpenAI tools with JSON Schema parameters (see
    :mod:`tiered_router.evaluation._bfcl`), recorded calls become tool calls the gate checks;
    tokens and latency are recorded; cost is tokens times the list price.

    Raises:
        DatasetError: When the files are missing.

    """
    folder = Path(data_dir) / "bfcl_v1_results"
    questions = list(read_jsonl(folder / "questions.jsonl"))
    prices_file = folder / "prices_usd_per_million_tokens.json"
    table = json.loads(prices_file.read_text()) if prices_file.is_file() else {}
    ins = table.get("INPUT_PRICE_PER_MILLION_TOKEN", {})
    outs = table.get("OUTPUT_PRICE_PER_MILLION_TOKEN", {})
    names = models or sorted(p.stem for p in (folder / "results").glob("*.jsonl"))
    prices = {
        m: Price(input_per_mtok=float(ins[m]), output_per_mtok=float(outs[m]))
        for m in names
        if m in ins and m in outs
    }
    results: dict[str, dict[str, Outcome]] = defaultdict(dict)
    for model in names:
        for rec in read_jsonl(folder / "results" / f"{model}.jsonl"):
            results[str(rec["id"])][model] = _bfcl_outcome(rec, prices.get(model))
    asked = {str(q["id"]) for q in questions}
    orphans = sorted(qid for qid in results if qid not in asked)
    notes = ["every model is given the tools in function-calling form, whatever its mode"]
    if orphans:
        count = sum(len(results[qid]) for qid in orphans)
        note = (
            f"{count} recorded answers ({len(orphans)} ids, e.g. {orphans[0]}) were left out: "
            f"their question is not in {folder / 'questions.jsonl'}"
        )
        logger.warning("bfcl: %s", note)
        notes.append(note)
    rows = []
    relabelled: Counter[str] = Counter()
    for q in questions:
        qid = str(q["id"])
        if qid not in results:
            continue
        category = str(q.get("category", ""))
        tools = _bfcl.openai_tools(q["function"], category=category)
        meta = {"source": "bfcl_v1", "category": category}
        row = EvalRow.build(
            qid, _bfcl_messages(q["question"]), results[qid], tools=tools, metadata=meta
        )
        rows.append(_label_text_calls(row, q, relabelled))
    if relabelled:
        note = (
            f"{relabelled.total()} recorded answers written as calls in text, which BFCL's "
            "decoder rejected unread, are labelled by judging "
            f"the calls the gate reads in them as BFCL's checker does: {relabelled['right']} "
            f"right, {relabelled['wrong']} wrong (BFCL: all wrong)"
        )
        notes.append(note)
    fast, frontier = BFCL_PAIR
    return Dataset(
        name="bfcl",
        rows=tuple(rows),
        fast_model=fast,
        frontier_model=frontier,
        prices=prices,
        source=(
            "ShishirPatil/gorilla@de8307b4 (questions); HuanzhiMao/BFCL-Result@b4adfc9b (outputs)"
        ),
        license="questions Apache-2.0; outputs: no license file, internal evaluation only",
        notes=tuple(notes),
    )


def _label_text_calls(row: EvalRow, question: Mapping[str, Any], counts: Counter[str]) -> EvalRow:
    """Label the answers BFCL failed unread because they wrote their calls as text.

    BFCL's decoder fails some answers (``ast_decoder:decoder_failed``) before its checker
    sees them; where the gate's lifting rules read the text as calls, the router returns them
    as tool calls, so the label that describes what the router returns is the checker's
    verdict on those calls (:mod:`tiered_router.evaluation._bfcl_judge`). A call shown in a
    Markdown fence is not lifted (the rules: an example in a fence is not a call), so it
    keeps BFCL's label. The text is kept as recorded: the gate still sees what the model
    wrote.
    """
    outcomes: dict[str, Outcome] = {}
    for model, outcome in row.outcomes.items():
        if outcome.tool_calls or not outcome.text or outcome.quality >= 0.5:
            continue
        draft = outcome.completion(model=model, backend=model)
        lifted = lift_text_tool_calls(draft, row.turn)
        if lifted is draft:
            continue
        label = _bfcl_judge.label_text_calls(outcome.text, lifted.tool_calls, question)
        if label is None:
            continue
        counts["right" if label else "wrong"] += 1
        if label:
            outcomes[model] = dataclasses.replace(outcome, quality=1.0)
    if not outcomes:
        return row
    return dataclasses.replace(row, outcomes={**row.outcomes, **outcomes})


def _bfcl_messages(question: Any) -> list[dict[str, Any]]:
    if isinstance(question, str):
        return user_turn(question)
    if isinstance(question, list) and question and isinstance(question[0], list):
        question = question[0]
    if isinstance(question, list) and all(isinstance(m, Mapping) for m in question):
        return [dict(m) for m in question]
    return user_turn(json.dumps(question))


def _bfcl_outcome(rec: Mapping[str, Any], price: Price | None) -> Outcome:
    text, calls = _bfcl.parse_result(rec.get("result"), category=str(rec.get("category", "")))
    tin, tout = rec.get("input_token_count"), rec.get("output_token_count")
    usage = None
    cost = None
    if isinstance(tin, (int, float)) and isinstance(tout, (int, float)):
        usage = Usage(input_tokens=int(tin), output_tokens=int(tout))
        if price is not None:
            cost = (tin * price.input_per_mtok + tout * price.output_per_mtok) / 1_000_000
    latency = rec.get("latency_s")
    return Outcome(
        quality=1.0 if rec.get("correct") else 0.0,
        text=text,
        tool_calls=calls,
        finish_reason="tool_calls" if calls else "stop",
        usage=usage,
        latency_s=float(latency) if isinstance(latency, (int, float)) else None,
        cost=cost,
    )
