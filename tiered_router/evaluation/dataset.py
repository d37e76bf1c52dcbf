"""The evaluation dataset format: one JSON object per turn, with recorded outcomes per model.

A file is JSON Lines (optionally gzip-compressed, ``.jsonl.gz``). An optional first line
is a header, recognised by its ``"format"`` key; every other line is a row::

    {"format": "tiered-router-eval", "version": 1, "name": "mmlu",
     "fast_model": "mixtral", "frontier_model": "gpt-4",
     "prices": {"gpt-4": {"input_per_mtok": 10, "output_per_mtok": 30}},
     "source": "...", "license": "..."}
    {"id": "mmlu.anatomy.0",
     "messages": [{"role": "user", "content": "..."}],
     "tools": null, "response_format": null, "final": false, "step": null,
     "metadata": {"subject": "anatomy", "task_id": null},
     "outcomes": {
       "gpt-4": {"quality": 1.0, "text": null, "tool_calls": null, "finish_reason": "stop",
                 "usage": {"input_tokens": 80, "output_tokens": 1}, "usage_estimated": true,
                 "latency_s": null, "cost": null, "error": null}}}

``quality`` is the label in [0, 1] (1/0 for correct/wrong, or a graded score). ``text`` and
``tool_calls`` are the recorded answer; both ``null`` means the answer itself was not
recorded (only its label), and the quality gate then passes it without running checks.
``cost`` is the recorded (or list-price) cost in US dollars; ``null`` means "compute it
from ``usage`` and a price". ``latency_s`` is the recorded latency; ``null`` means
"simulate it from the backend's latency model". ``error`` records a failed call.

An outcome may carry ``samples``: further independent drafts of that model on that turn,
each with the same fields (and an optional ``answer``: the recorded final answer, for a
draft whose text alone cannot give it, such as a program's output). ``eval`` replays a
policy's ``drafts:`` panel from them (:mod:`tiered_router.evaluation.panel`)::

    "outcomes": {"gpt-3.5": {"quality": 1.0, "text": "... A: 05/01/2021", "answer": "05/01/2021",
                             "samples": [{"quality": 0.0, "text": "...", "answer": "04/30/2021"}]}}
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import IO, Any

from tiered_router.evaluation._outcome import DatasetError, Outcome, estimate_tokens
from tiered_router.policy._schema import Price
from tiered_router.turn import Turn, message_text

__all__ = [
    "FORMAT",
    "Dataset",
    "DatasetError",
    "EvalRow",
    "Outcome",
    "estimate_tokens",
    "read_dataset",
    "turn_fingerprint",
    "write_dataset",
]

FORMAT = "tiered-router-eval"
"""Value of the header's ``format`` key."""

_VERSION = 1


def turn_fingerprint(messages: Sequence[Mapping[str, Any]]) -> str:
    """Return a short hash of a conversation's roles and texts (to find a row by content)."""
    h = hashlib.sha256()
    for m in messages:
        h.update(str(m.get("role")).encode())
        h.update(b"\x00")
        h.update(message_text(dict(m)).encode())
        h.update(b"\x01")
    return h.hexdigest()[:24]


@dataclass(frozen=True, kw_only=True)
class EvalRow:
    """One turn with the outcome of each model on it.

    Attributes:
        id: The row's id (also the turn's id; the turn's ``metadata["row_id"]``).
        turn: The turn as the router sees it.
        outcomes: Recorded outcome per model name.

    """

    id: str
    turn: Turn
    outcomes: Mapping[str, Outcome]

    @property
    def task_id(self) -> str | None:
        """The multi-step task the turn belongs to (``metadata["task_id"]``), if any."""
        value = self.turn.metadata.get("task_id")
        return None if value is None else str(value)

    def to_dict(self) -> dict[str, Any]:
        """Return the row as written in a dataset file."""
        metadata = {k: v for k, v in self.turn.metadata.items() if k != "row_id"}
        return {
            "id": self.id,
            "messages": [dict(m) for m in self.turn.messages],
            "tools": self.turn.openai_tools(),
            "response_format": (
                dict(self.turn.response_format) if self.turn.response_format else None
            ),
            "final": self.turn.final,
            "step": self.turn.step,
            "metadata": metadata,
            "outcomes": {name: o.to_dict() for name, o in self.outcomes.items()},
        }

    @classmethod
    def build(
        cls,
        id: str,
        messages: Iterable[Mapping[str, Any]],
        outcomes: Mapping[str, Outcome],
        *,
        tools: Iterable[Mapping[str, Any]] | None = None,
        response_format: Mapping[str, Any] | None = None,
        final: bool = False,
        step: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> EvalRow:
        """Build a row; the turn gets ``id`` as its id and ``metadata["row_id"]``."""
        meta = dict(metadata or {})
        meta["row_id"] = id
        turn = Turn(
            [dict(m) for m in messages],
            tools=list(tools) if tools else None,
            response_format=response_format,
            final=final,
            step=step,
            metadata=meta,
            id=id,
        )
        return cls(id=id, turn=turn, outcomes=dict(outcomes))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "") -> EvalRow:
        """Build a row from its file form.

        Raises:
            DatasetError: When a field is missing or has the wrong type.

        """
        rid = data.get("id")
        if not isinstance(rid, (str, int)):
            raise DatasetError(f"{where}: 'id' is required (string)")
        outcomes = data.get("outcomes")
        if not isinstance(outcomes, Mapping) or not outcomes:
            raise DatasetError(f"{where}: 'outcomes' must be a non-empty object")
        parsed = {
            str(name): Outcome.from_dict(o, where=f"{where}: outcomes.{name}")
            for name, o in outcomes.items()
        }
        try:
            return cls.build(
                str(rid),
                data.get("messages") or (),
                parsed,
                tools=data.get("tools"),
                response_format=data.get("response_format"),
                final=bool(data.get("final", False)),
                step=data.get("step"),
                metadata=data.get("metadata"),
            )
        except (ValueError, TypeError) as exc:
            raise DatasetError(f"{where}: {exc}") from exc


@dataclass(frozen=True, kw_only=True)
class Dataset:
    """Rows of recorded outcomes, and which two models play the fast and frontier tier.

    Attributes:
        name: A short name for reports (``mmlu``, ``bfcl``, a file name...).
        rows: The rows, in file order.
        fast_model: Outcome key replayed by the fast tier by default.
        frontier_model: Outcome key replayed by the frontier tier by default.
        prices: List prices per model, used when an outcome has no ``cost``.
        source: Where the data comes from (repository, commit).
        license: The data's license.
        notes: Caveats shown in reports (estimated tokens, dropped rows...).

    """

    name: str
    rows: tuple[EvalRow, ...]
    fast_model: str | None = None
    frontier_model: str | None = None
    prices: Mapping[str, Price] = field(default_factory=dict)
    source: str = ""
    license: str = ""
    notes: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.rows)

    @cached_property
    def models(self) -> tuple[str, ...]:
        """Every model with at least one outcome, sorted."""
        return tuple(sorted({m for r in self.rows for m in r.outcomes}))

    @cached_property
    def _by_id(self) -> dict[str, EvalRow]:
        return {r.id: r for r in self.rows}

    @cached_property
    def _by_fingerprint(self) -> dict[str, EvalRow]:
        return {turn_fingerprint(r.turn.messages): r for r in self.rows}

    def get(self, row_id: str) -> EvalRow | None:
        """Return the row with this id, or ``None``."""
        return self._by_id.get(row_id)

    def find(self, *, row_id: str | None, messages: Sequence[Mapping[str, Any]]) -> EvalRow | None:
        """Find a row by id, else by the content of its conversation."""
        if row_id is not None:
            found = self._by_id.get(row_id)
            if found is not None:
                return found
        return self._by_fingerprint.get(turn_fingerprint(messages))

    def with_pair(self, fast: str, frontier: str) -> Dataset:
        """Return the rows that have outcomes for both models, with that pair as default.

        Raises:
            DatasetError: When a model has no outcome at all in the data.

        """
        for model in (fast, frontier):
            if model not in self.models:
                raise DatasetError(
                    f"{self.name}: no outcomes for model {model!r}; known: {', '.join(self.models)}"
                )
        rows = tuple(r for r in self.rows if fast in r.outcomes and frontier in r.outcomes)
        notes = self.notes
        dropped = len(self.rows) - len(rows)
        if dropped:
            notes = (*notes, f"{dropped} rows without outcomes for both models were left out")
        return replace(self, rows=rows, fast_model=fast, frontier_model=frontier, notes=notes)

    def head(self, n: int) -> Dataset:
        """Return the first ``n`` rows."""
        return replace(self, rows=self.rows[:n])

    def header(self) -> dict[str, Any]:
        """Return the header line written before the rows."""
        return {
            "format": FORMAT,
            "version": _VERSION,
            "name": self.name,
            "fast_model": self.fast_model,
            "frontier_model": self.frontier_model,
            "prices": {m: p.model_dump(exclude_none=True) for m, p in self.prices.items()},
            "source": self.source,
            "license": self.license,
            "notes": list(self.notes),
        }


def _open_text(path: Path, mode: str) -> IO[str]:
    if path.suffix == ".gz":
        # mtime=0 keeps written files byte-for-byte reproducible
        raw = gzip.GzipFile(filename=path, mode=mode + "b", mtime=0)
        return io.TextIOWrapper(raw, encoding="utf-8")
    return open(path, mode, encoding="utf-8")


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    with _open_text(path, "r") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                yield number, line


def read_dataset(path: str | os.PathLike[str], *, name: str | None = None) -> Dataset:
    """Read a dataset file (``.jsonl`` or ``.jsonl.gz``).

    Raises:
        DatasetError: When the file is missing, a line is not JSON, or a row is malformed;
            the message names the file and the line.

    """
    p = Path(path)
    if not p.is_file():
        raise DatasetError(f"{p}: no such dataset file")
    header: dict[str, Any] = {}
    rows: list[EvalRow] = []
    for number, line in _lines(p):
        where = f"{p}:{number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{where}: not JSON ({exc.msg})") from exc
        if not isinstance(data, dict):
            raise DatasetError(f"{where}: each line must be a JSON object")
        if "format" in data:
            if data["format"] != FORMAT or data.get("version", _VERSION) != _VERSION:
                raise DatasetError(
                    f"{where}: unsupported format {data['format']!r} version "
                    f"{data.get('version')!r} (expected {FORMAT!r} version {_VERSION})"
                )
            header = data
            continue
        rows.append(EvalRow.from_dict(data, where=where))
    if not rows:
        raise DatasetError(f"{p}: no rows")
    try:
        prices = {str(m): Price.model_validate(v) for m, v in (header.get("prices") or {}).items()}
    except ValueError as exc:
        raise DatasetError(f"{p}: header.prices: {exc}") from exc
    stem = p.name.split(".")[0]
    return Dataset(
        name=name or str(header.get("name") or stem),
        rows=tuple(rows),
        fast_model=header.get("fast_model"),
        frontier_model=header.get("frontier_model"),
        prices=prices,
        source=str(header.get("source") or ""),
        license=str(header.get("license") or ""),
        notes=tuple(header.get("notes") or ()),
    )


def write_dataset(dataset: Dataset, path: str | os.PathLike[str]) -> Path:
    """Write ``dataset`` (header line, then one row per line); ``.gz`` paths are compressed."""
    p = Path(path)
    with _open_text(p, "w") as f:
        f.write(json.dumps(dataset.header(), ensure_ascii=False) + "\n")
        for row in dataset.rows:
            f.write(json.dumps(row.to_dict(), ensure_ascii=False, separators=(",", ":")) + "\n")
    return p
