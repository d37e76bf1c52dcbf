"""From your own traffic to an evaluation dataset: recorded traces -> dataset rows.

A router built with ``record=True`` (or a redaction hook) writes, in each trace, the turn's
request and every attempt's output. :func:`dataset_from_traces` turns a JSONL file of such
traces (``JSONLSink``, ``tiered-router serve --trace-file ... --record``) into the dataset
format of :mod:`tiered_router.evaluation.dataset`, which ``eval`` and ``calibrate`` replay.

What a row holds:

- the turn: messages, tools, response format, ``final`` and ``step`` as recorded;
- one outcome per model that answered: its text or tool calls, finish reason, usage,
  latency and cost as the trace measured them. Traces with the same turn id are merged into
  one row, so running a sample of turns again on the other tier (the same ``turn_id``)
  labels both tiers on them. A model whose every attempt failed gets an
  outcome with the error, so a replay fails the same way. A model that was not called on
  the turn (the fast model on a turn sent straight to the frontier) has no outcome: a
  replay that sends the turn there counts a failed call and escalates.

The label (``quality``) of each outcome is, by default, its gate verdict: 1.0 when the draft
passed (or was not gated), 0.0 when it failed. That is a proxy. Give real labels with a
labels file: JSON Lines of ``{"turn_id": "...", "quality": 0.0-1.0}`` (the answer that was
returned) or ``{"turn_id": "...", "model": "...", "quality": ...}`` (one model's outcome).

Example:
    ```python
    from tiered_router.evaluation.traces import dataset_from_traces, write_dataset

    dataset, stats = dataset_from_traces(["traces.jsonl"], labels="labels.jsonl")
    write_dataset(dataset, "my_traffic.jsonl")
    ```

"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiered_router.evaluation.dataset import (
    Dataset,
    DatasetError,
    EvalRow,
    Outcome,
    write_dataset,
)
from tiered_router.turn import ToolCall, Usage

__all__ = ["TraceStats", "dataset_from_traces", "read_labels", "write_dataset"]

_Labels = Mapping[tuple[str, str | None], float]


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceStats:
    """What :func:`dataset_from_traces` found.

    Attributes:
        traces: Trace lines read.
        rows: Rows written.
        unrecorded: Traces without a ``record`` (the router did not record them).
        merged: Traces of a turn id already seen, merged into its row (outcomes of models
            the row lacked are added: run a turn again on the other tier to label both).
        both: Rows with an outcome of both the fast and the frontier model.
        labelled: Outcomes whose label came from the labels file.

    """

    traces: int
    rows: int
    unrecorded: int
    merged: int
    both: int
    labelled: int


def read_labels(path: str | os.PathLike[str]) -> dict[tuple[str, str | None], float]:
    """Read a labels file: ``{"turn_id", "quality"[, "model"]}`` per line.

    Raises:
        DatasetError: When the file is missing or a line is malformed (file and line named).

    """
    p = Path(path)
    if not p.is_file():
        raise DatasetError(f"{p}: no such labels file")
    labels: dict[tuple[str, str | None], float] = {}
    for number, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{p}:{number}: not JSON ({exc.msg})") from None
        quality = item.get("quality") if isinstance(item, dict) else None
        turn_id = item.get("turn_id") if isinstance(item, dict) else None
        if not isinstance(turn_id, str) or isinstance(quality, bool):
            raise DatasetError(f'{p}:{number}: expected {{"turn_id": "...", "quality": 0-1}}')
        if not isinstance(quality, (int, float)) or not 0 <= quality <= 1:
            raise DatasetError(f"{p}:{number}: quality must be a number in [0, 1]")
        model = item.get("model")
        labels[(turn_id, model if isinstance(model, str) else None)] = float(quality)
    return labels


def _tool_calls(output: Mapping[str, Any]) -> tuple[ToolCall, ...] | None:
    calls = output.get("tool_calls")
    if not calls:
        return None
    out = []
    for call in calls:
        fn = call.get("function") or {}
        out.append(
            ToolCall(
                id=str(call.get("id") or ""),
                name=fn.get("name", ""),
                arguments=fn.get("arguments", ""),
            )
        )
    return tuple(out)


def _usage(attempt: Mapping[str, Any]) -> Usage:
    u = attempt.get("usage") or {}
    return Usage(
        input_tokens=int(u.get("input_tokens") or 0),
        output_tokens=int(u.get("output_tokens") or 0),
        cached_input_tokens=int(u.get("cached_input_tokens") or 0),
    )


def _outcomes(trace: Mapping[str, Any], labels: _Labels) -> tuple[dict[str, Outcome], int]:
    turn_id = str(trace.get("turn_id"))
    attempts = trace.get("attempts") or []
    outputs = (trace.get("record") or {}).get("outputs") or []
    answered = next(
        (
            a.get("model")
            for a, o in reversed(list(zip(attempts, outputs, strict=False)))
            if o is not None and a.get("tier") == trace.get("tier")
        ),
        None,
    )
    outcomes: dict[str, Outcome] = {}
    labelled = 0
    for index, attempt in enumerate(attempts):
        model = str(attempt.get("model"))
        output = outputs[index] if index < len(outputs) else None
        common = {
            "latency_s": attempt.get("latency_s"),
            "cost": attempt.get("cost"),
            "usage": _usage(attempt),
        }
        if output is None:
            if model not in outcomes:  # a later success of the same model replaces it
                error = attempt.get("error") or {}
                outcomes[model] = Outcome(
                    quality=0.0,
                    error=str(error.get("type") or "error"),
                    finish_reason=None,
                    **common,
                )
            continue
        verdict = attempt.get("verdict")
        label = labels.get((turn_id, model))
        if label is None and model == answered:
            label = labels.get((turn_id, None))
        if label is not None:
            labelled += 1
        quality = label if label is not None else (1.0 if not verdict or verdict["passed"] else 0.0)
        outcomes[model] = Outcome(
            quality=quality,
            text=output.get("text") or "",
            tool_calls=_tool_calls(output),
            finish_reason=output.get("finish_reason"),
            **common,
        )
    return outcomes, labelled


def _read_traces(paths: Iterable[str | os.PathLike[str]]) -> Iterable[tuple[str, Any]]:
    for path in paths:
        p = Path(path)
        if not p.is_file():
            raise DatasetError(f"{p}: no such trace file")
        with p.open(encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    yield f"{p}:{number}", json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DatasetError(f"{p}:{number}: not JSON ({exc.msg})") from None


def _most_common(models: Counter[str]) -> str | None:
    return models.most_common(1)[0][0] if models else None


def dataset_from_traces(
    paths: Sequence[str | os.PathLike[str]],
    *,
    labels: str | os.PathLike[str] | _Labels | None = None,
    name: str | None = None,
) -> tuple[Dataset, TraceStats]:
    """Build an evaluation dataset from JSONL trace files written with recording on.

    Args:
        paths: Trace files (one JSON trace per line, as ``JSONLSink`` writes them).
        labels: A labels file (or a mapping ``(turn_id, model or None) -> quality``) whose
            labels replace the gate verdicts.
        name: The dataset's name (default: the first file's stem).

    Returns:
        The dataset (fast and frontier models: those most often called on each tier) and
        counts of what was read.

    Raises:
        DatasetError: A missing or malformed file, or no recorded trace at all (the message
            says how to turn recording on).

    """
    table: _Labels = (
        read_labels(labels) if isinstance(labels, (str, os.PathLike)) else (labels or {})
    )
    turns: dict[str, tuple[str, Mapping[str, Any], Mapping[str, Any], dict[str, Outcome]]] = {}
    tiers: dict[str, set[str]] = {}
    fast: Counter[str] = Counter()
    frontier: Counter[str] = Counter()
    traces = unrecorded = merged = labelled = 0
    for where, trace in _read_traces(paths):
        traces += 1
        if not isinstance(trace, dict) or not isinstance(trace.get("record"), dict):
            unrecorded += 1
            continue
        turn_id = str(trace.get("turn_id"))
        outcomes, n = _outcomes(trace, table)
        labelled += n
        attempts = trace.get("attempts") or []
        tiers.setdefault(turn_id, set()).update(str(a.get("tier")) for a in attempts)
        for attempt in attempts:
            (fast if attempt.get("tier") == "fast" else frontier)[str(attempt.get("model"))] += 1
        if turn_id in turns:  # the same turn run again (on the other tier): add its outcomes
            merged += 1
            known = turns[turn_id][3]
            for model, outcome in outcomes.items():
                if model not in known or (known[model].error and not outcome.error):
                    known[model] = outcome
            continue
        request = trace["record"].get("request") or {}
        turns[turn_id] = (where, request, trace.get("metadata") or {}, outcomes)
    rows: list[EvalRow] = []
    for turn_id, (where, request, metadata, outcomes) in turns.items():
        try:
            rows.append(
                EvalRow.build(
                    turn_id,
                    request.get("messages") or [],
                    outcomes,
                    tools=request.get("tools"),
                    response_format=request.get("response_format"),
                    final=bool(request.get("final")),
                    step=request.get("step"),
                    metadata={"task_id": metadata.get("task_id")},
                )
            )
        except (TypeError, ValueError) as exc:
            raise DatasetError(f"{where}: cannot build a row: {exc}") from None
    both = sum(1 for seen in tiers.values() if seen >= {"fast", "frontier"})
    if not rows:
        raise DatasetError(
            f"no recorded traces in {', '.join(map(str, paths))} ({traces} read): build the "
            "router with record=True (or a redaction hook), or serve with --record"
        )
    stats = TraceStats(
        traces=traces,
        rows=len(rows),
        unrecorded=unrecorded,
        merged=merged,
        both=both,
        labelled=labelled,
    )
    label_note = (
        f"labels: {labelled} from a labels file, the rest are gate verdicts"
        if labelled
        else "labels: gate verdicts (passed 1.0, failed 0.0), a proxy for quality"
    )
    dataset = Dataset(
        name=name or Path(paths[0]).name.split(".")[0],
        rows=tuple(rows),
        fast_model=_most_common(fast),
        frontier_model=_most_common(frontier),
        source="recorded traces: " + ", ".join(map(str, paths)),
        notes=(
            label_note,
            f"{both} of {len(rows)} turns have outcomes of both tiers; a model not called on "
            "a turn has no outcome there, and replaying it counts as a failed call",
            "latency and cost: as measured in the traces",
        ),
    )
    return dataset, stats
