"""Reading the shared data folder's files: JSON lines with file:line errors, user turns."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tiered_router.evaluation.dataset import DatasetError

__all__ = ["read_jsonl", "user_turn"]


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    if not path.is_file():
        raise DatasetError(f"{path}: not found")
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DatasetError(f"{path}:{number}: not JSON ({exc.msg})") from exc


def user_turn(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]
