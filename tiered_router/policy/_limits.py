"""Size limits of a policy, checked before anything recurses over it.

PyYAML composes nodes recursively, and YAML aliases make data that is small in memory but
huge once expanded (as it is when a request body is serialised). So the loader reads YAML
through :func:`depth_limited_loader` and measures the data with :func:`measure`, which walks
it without recursion and counts every value as often as it is reachable.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import yaml

    from tiered_router.policy._base import Loc as _Loc

__all__ = [
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_POLICY_CHARS",
    "TooDeep",
    "depth_limited_loader",
    "measure",
    "too_long",
]

MAX_POLICY_CHARS = 1_048_576
"""Longest policy text read, in characters (1 MiB of ASCII)."""
MAX_DEPTH = 64
"""Deepest nesting of mappings and lists, counted after aliases are expanded."""
MAX_NODES = 100_000
"""Most values (mappings, lists and scalars) in a policy, counted after aliases are expanded."""


def too_long(size: int, unit: str) -> str:
    """The message for a policy of ``size`` ``unit`` (characters, bytes) over the limit."""
    return f"the policy is {size} {unit} long; the limit is {MAX_POLICY_CHARS} characters"


class TooDeep(Exception):
    """Raised by the loader of :func:`depth_limited_loader`; ``line`` is 1-based."""

    def __init__(self, line: int) -> None:
        self.line = line


@functools.cache
def depth_limited_loader() -> type[yaml.SafeLoader]:
    """Return PyYAML's ``SafeLoader`` extended to refuse nesting deeper than ``MAX_DEPTH``."""
    import yaml

    class DepthLimitedLoader(yaml.SafeLoader):
        """PyYAML's safe loader, refusing nesting deeper than :data:`MAX_DEPTH`.

        PyYAML composes nodes recursively: a policy nested ~1,000 deep would otherwise end
        in a ``RecursionError`` before any check could run.
        """

        _depth = 0

        def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
            self._depth += 1
            try:
                if self._depth > MAX_DEPTH + 1:  # + 1: the scalar at the deepest level
                    # PyYAML's stubs leave peek_event untyped
                    event = self.peek_event()  # type: ignore[no-untyped-call]
                    raise TooDeep(event.start_mark.line + 1)
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

    return DepthLimitedLoader


def measure(root: Any) -> tuple[_Loc, str] | None:
    """Check the size and depth of ``root`` with aliases expanded, without recursion.

    YAML aliases (and shared objects in a mapping source) make a tree that is small in
    memory but huge once expanded, as it is when a request body is serialised: each value
    is counted as often as it is reachable. Returns the path and message of the first limit
    broken, or ``None``.
    """
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    refs: dict[int, int] = {}
    entered: set[int] = set()
    stack: list[tuple[Any, bool, _Loc]] = [(root, False, ())]
    while stack:
        obj, finished, where = stack.pop()
        key = id(obj)
        if finished:
            kids = _containers(obj)
            size[key] = min(1 + len(obj) - len(kids) + sum(size[id(v)] for _, v in kids), _CAP)
            depth[key] = 1 + max((depth[id(v)] for _, v in kids), default=0)
            continue
        if key in size:
            continue
        if key in entered:  # entered but not finished: it contains itself
            return where, "a value contains itself (a recursive YAML alias)"
        entered.add(key)
        stack.append((obj, True, where))
        for k, v in _containers(obj):
            refs[id(v)] = refs.get(id(v), 0) + 1
            stack.append((v, False, (*where, k)))
    if size[id(root)] > MAX_NODES:
        measure, limit = size, MAX_NODES
        message = f"more than {MAX_NODES} values once YAML aliases are expanded"
    elif depth[id(root)] > MAX_DEPTH:
        measure, limit = depth, 0
        message = f"nested deeper than {MAX_DEPTH} levels once YAML aliases are expanded"
    else:
        return None
    # point at where it happens: follow the largest (deepest) value down to a shared one
    path: list[str | int] = []
    obj = root
    while len(path) < 12:
        kids = _containers(obj)
        if not kids:
            break
        k, v = max(kids, key=lambda kv: measure[id(kv[1])])
        if measure[id(v)] <= limit:
            break
        path.append(k)
        obj = v
        if refs[id(v)] > 1:
            break
    return tuple(path), message


_CAP = MAX_NODES + 1


def _containers(obj: Any) -> list[tuple[str | int, Any]]:
    if isinstance(obj, Mapping):
        return [(str(k), v) for k, v in obj.items() if _is_container(v)]
    return [(i, v) for i, v in enumerate(obj) if _is_container(v)]


def _is_container(value: Any) -> bool:
    return isinstance(value, (Mapping, list, tuple))
