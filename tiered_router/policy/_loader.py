"""Loading a policy: YAML nodes with line numbers, ``${VAR}`` interpolation, one validation pass.

:func:`read_policy` does the work of :func:`tiered_router.policy.load_policy` (the public
entry, which hands it the wings' load-time checks); ``_schema`` stays the schema. YAML is
read with PyYAML's ``SafeLoader`` only, within size limits (:data:`MAX_POLICY_CHARS`,
:data:`MAX_DEPTH`, :data:`MAX_NODES`) checked before anything recurses over the data, so a
deeply nested policy or an alias bomb is a clean :class:`~tiered_router.PolicyError`. After
the schema, the policy is checked against what the router builds from it (``_checks``), so a
policy that loads is one ``Router()`` accepts.
"""

from __future__ import annotations

import os
import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from pydantic import BaseModel, ValidationError

from tiered_router._types import PolicySource
from tiered_router.exceptions import PolicyError
from tiered_router.policy._base import FieldErrors as _FieldErrors
from tiered_router.policy._base import Loc as _Loc
from tiered_router.policy._base import did_you_mean as _did_you_mean
from tiered_router.policy._base import dotted as _dotted
from tiered_router.policy._checks import LoadCheck, check_policy
from tiered_router.policy._limits import (
    MAX_DEPTH,
    MAX_NODES,
    MAX_POLICY_CHARS,
    TooDeep,
    depth_limited_loader,
    measure,
    too_long,
)
from tiered_router.policy._schema import Policy

__all__ = ["MAX_DEPTH", "MAX_NODES", "MAX_POLICY_CHARS", "read_policy"]


if TYPE_CHECKING:
    import yaml


_VAR = re.compile(r"\$\$\{|\$\{(?:(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\})?")
_SECRET = re.compile(
    r"(?i)(^|_)(api_?keys?|keys?|token|secret|password|authorization|headers)($|_)"
)
_MERGE_TAG = "tag:yaml.org,2002:merge"
_KINDS = {"list": "a list", "str": "a string", "int": "a number", "float": "a number"}
_Problem = tuple[int | None, str | None, str]


def read_policy(
    source: PolicySource | Policy,
    *,
    env: Mapping[str, str] | None = None,
    checks: Sequence[LoadCheck] = (),
) -> Policy:
    """Read, interpolate and validate a policy: the schema, then ``checks``.

    :func:`tiered_router.policy.load_policy` is the public entry: it hands in the load-time
    checks of the gate, the scorer and the backends (their registries), so this module
    imports none of them.

    Args:
        source: A path, YAML text, a mapping or a :class:`Policy` (returned as is); see
            :func:`tiered_router.policy.load_policy`.
        env: Where ``${VAR}`` references are looked up; ``os.environ`` when ``None``.
        checks: The load-time checks run on the validated policy, in order.

    Raises:
        PolicyError: Every problem found, each with its line and dotted field path.
        TypeError: ``source`` is none of the accepted types.

    """
    if isinstance(source, Policy):
        return source
    loader = _Loader(os.environ if env is None else env, checks)
    if isinstance(source, Mapping):
        return loader.load(source, file="<dict>")
    if isinstance(source, str) and not _is_path(source):
        return loader.load(loader.parse(source, file="<string>"), file="<string>")
    if isinstance(source, (str, os.PathLike)):
        file = os.fspath(source)
        return loader.load(loader.parse(_read(file), file=file), file=file)
    raise TypeError(
        f"load_policy() takes a path, YAML text, a mapping or a Policy, not {type(source).__name__}"
    )


def _is_path(text: str) -> bool:
    if "\n" in text:
        return False
    if text.endswith((".yaml", ".yml")) or os.path.isfile(text):
        return True
    return ":" not in text and bool(text.strip())


def _read(file: str) -> str:
    try:
        size = os.stat(file).st_size
        if size > 4 * MAX_POLICY_CHARS:  # more characters than the limit, whatever the encoding
            raise PolicyError(too_long(size, "bytes"), file=file)
        return Path(file).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PolicyError("no such policy file", file=file) from None
    except UnicodeDecodeError as exc:
        raise PolicyError(f"not UTF-8 text (byte {exc.start})", file=file) from None
    except OSError as exc:
        raise PolicyError(f"cannot read the policy file: {exc.strerror}", file=file) from None


class _Loader:
    """One load: YAML nodes -> data, line of every path, ``${VAR}`` interpolation, validation."""

    def __init__(self, env: Mapping[str, str], checks: Sequence[LoadCheck]) -> None:
        self.env = env
        self.checks = checks
        self.lines: dict[_Loc, int] = {}
        self.templates: dict[_Loc, str] = {}
        self.resolved: dict[_Loc, str] = {}
        self.secrets: set[str] = set()
        self.problems: list[_Problem] = []
        self.deferred_keys: dict[_Loc, str] = {}

    def parse(self, text: str, *, file: str) -> Any:
        import yaml  # here, not at the top: most imports of tiered_router never read YAML

        if len(text) > MAX_POLICY_CHARS:
            raise PolicyError(too_long(len(text), "characters"), file=file)
        loader: yaml.SafeLoader | None = None
        try:
            loader = depth_limited_loader()(text)  # reads (and checks) the characters at once
            root = loader.get_single_node()
            if root is None:
                raise PolicyError("the policy is empty", file=file, line=1)
            self._check_duplicates(root, (), set())
            data = loader.construct_document(root)
            self.lines[()] = root.start_mark.line + 1
            self._record_lines(loader, root, (), set())
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark is not None else None
            message = "invalid YAML: " + ", ".join(filter(None, [exc.context, exc.problem]))
            if line is not None and "${" in "".join(text.splitlines()[line - 1 : line]):
                message += " (quote values that use ${VAR} inside { } or [ ])"
            # `from None`: PyYAML's own message quotes the source line, which may hold a key
            raise PolicyError(message, file=file, line=line) from None
        except TooDeep as exc:
            raise PolicyError(
                f"nested deeper than {MAX_DEPTH} levels", file=file, line=exc.line
            ) from None
        except yaml.YAMLError as exc:
            # ReaderError (a control character, ...): its first line names only the character
            position = getattr(exc, "position", None)
            line = text.count("\n", 0, position) + 1 if isinstance(position, int) else None
            reason = str(exc).splitlines()[0]
            raise PolicyError(f"invalid YAML: {reason}", file=file, line=line) from None
        finally:
            if loader is not None:
                loader.dispose()
        if self.problems:
            raise self.error(file)
        if not isinstance(data, Mapping):
            kind = _KINDS.get(type(data).__name__, f"a {type(data).__name__}")
            raise PolicyError(
                f"the policy must be a mapping (version, backends, tiers, ...), not {kind}",
                file=file,
                line=self.lines[()],
            )
        return data

    def _check_duplicates(self, node: yaml.Node, path: _Loc, seen: set[int]) -> None:
        import yaml

        if id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[tuple[str, str], int] = {}
            for key, value in node.value:
                if key.tag == _MERGE_TAG or not isinstance(key, yaml.ScalarNode):
                    continue
                line = key.start_mark.line + 1
                if (key.tag, key.value) in first:
                    where = _dotted((*path, key.value))
                    message = (
                        f"duplicate key {key.value!r} (first at line {first[key.tag, key.value]})"
                    )
                    self.problems.append((line, where, message))
                first.setdefault((key.tag, key.value), line)
                self._check_duplicates(value, (*path, key.value), seen)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self._check_duplicates(item, (*path, i), seen)

    def _record_lines(
        self, loader: yaml.SafeLoader, node: yaml.Node, path: _Loc, seen: set[int]
    ) -> None:
        # Runs after construction, so merge keys (`<<: *base`) are already flattened into the
        # mapping, merged pairs first: a key written in the mapping itself wins, as in the data.
        import yaml

        if id(node) in seen:  # an alias: its paths point at the alias, not inside the anchor
            return
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                sub = (*path, str(loader.construct_object(key)))
                self.lines[sub] = key.start_mark.line + 1
                self._record_lines(loader, value, sub, seen)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                sub = (*path, i)
                self.lines[sub] = item.start_mark.line + 1
                self._record_lines(loader, item, sub, seen)

    def load(self, data: Mapping[str, Any], *, file: str) -> Policy:
        too_big = measure(data)
        if too_big is not None:  # before anything recurses over the data
            self._problem(*too_big)
            raise self.error(file)
        data = self._interpolate(data, (), {})
        if self.problems:
            raise self.error(file)
        for path, name in self.deferred_keys.items():
            backend = data["backends"][path[1]]
            del backend["api_key"]
            backend.setdefault("api_key_env", name)
        try:
            policy = Policy.model_validate(data)
        except ValidationError as exc:
            self._collect(exc, data)
            # `from None`: pydantic's own message repeats the input values, secrets included
            raise self.error(file) from None
        for path, message in check_policy(policy, self.checks):
            self._problem(path, message)
        if self.problems:
            raise self.error(file)
        policy._templates = {
            path: (template, self.resolved[path]) for path, template in self.templates.items()
        }
        return policy

    def _interpolate(self, obj: Any, path: _Loc, memo: dict[int, Any]) -> Any:
        if isinstance(obj, str):
            return self._substitute(obj, path) if "$" in obj else obj
        if id(obj) in memo:  # YAML aliases share objects: interpolate each one once
            return memo[id(obj)]
        if isinstance(obj, Mapping):
            out: dict[Any, Any] = {}
            memo[id(obj)] = out
            for key, value in obj.items():
                out[key] = self._interpolate(value, (*path, str(key)), memo)
            return out
        if isinstance(obj, (list, tuple)):
            items: list[Any] = []
            memo[id(obj)] = items
            items.extend(self._interpolate(v, (*path, i), memo) for i, v in enumerate(obj))
            return items
        return obj

    def _substitute(self, text: str, path: _Loc) -> str:
        def replace(match: re.Match[str]) -> str:
            if match.group(0) == "$${":
                return "${"
            name, default = match.group("name"), match.group("default")
            if name is None:
                self._problem(path, "malformed ${...}: write ${NAME}, ${NAME:-default}, or $${")
                return ""
            value = self.env.get(name)
            if default is not None and not value:
                return default
            if value and (_is_secret(path) or _SECRET.search(name)):
                self.secrets.add(value)
            if value is None and _is_backend_key(path) and match.group(0) == text:
                # a key is needed only when the backend is first called: building a router,
                # `explain` and `validate` work without it (the first call names the variable)
                self.deferred_keys[path] = name
                return ""
            if value is None:
                self._problem(
                    path, f"environment variable {name} is not set (or write ${{{name}:-default}})"
                )
                return ""
            return value

        result = _VAR.sub(replace, text)
        if result != text:
            self.templates[path] = text
            self.resolved[path] = result
        return result

    def _problem(self, path: _Loc, message: str) -> None:
        self.problems.append((self._line(path), _dotted(path) or None, message))

    def _line(self, path: _Loc) -> int | None:
        for end in range(len(path), -1, -1):
            line = self.lines.get(path[:end])
            if line is not None:
                return line
        return None

    def error(self, file: str) -> PolicyError:
        """Return the error listing every problem found, sorted by line."""
        merged: dict[tuple[int | None, str | None], list[str]] = {}
        for line, field, message in self.problems:
            for secret in self.secrets:  # a secret variable may also have been used elsewhere
                if len(secret) >= 4:
                    message = message.replace(secret, "***")
            messages = merged.setdefault((line, field), [])
            if message not in messages:
                messages.append(message)
        problems = [(line, field, "; ".join(m)) for (line, field), m in merged.items()]
        problems.sort(key=lambda p: (p[0] is None, p[0] or 0))
        line, field, message = problems[0]
        return PolicyError(message, file=file, line=line, field=field, problems=problems)

    def _collect(self, exc: ValidationError, data: Mapping[str, Any]) -> None:
        for error in exc.errors(include_url=False):
            loc = tuple(error["loc"])
            path = _data_path(data, loc)
            cause = error.get("ctx", {}).get("error")
            if isinstance(cause, _FieldErrors):
                for sub, message in cause.problems:
                    self._problem((*path, *sub), message)
                continue
            kind, message = error["type"], error["msg"]
            if kind == "missing" and loc:
                path = (*path, loc[-1])
                message = "required key is missing"
            elif kind == "extra_forbidden":
                model = _model_at(path[:-1])
                known = list(model.model_fields) if model is not None else []
                message = "unknown key" + (_did_you_mean(str(path[-1]), known) if known else "")
            elif not _is_secret(path):
                message += self._shown_input(path, error.get("input"))
            self._problem(path, message)

    def _shown_input(self, path: _Loc, value: Any) -> str:
        template = self.templates.get(path)
        if template is not None:  # never echo a value read from the environment
            return f" (input: {_short(template)}, interpolated)"
        if isinstance(value, (str, int, float, bool)) or value is None:
            return f" (input: {_short(value)})"
        return ""


def _is_backend_key(path: _Loc) -> bool:
    return len(path) == 3 and path[0] == "backends" and path[2] == "api_key"


def _is_secret(path: _Loc) -> bool:
    return any(isinstance(el, str) and _SECRET.search(el) for el in path)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _data_path(data: Any, loc: tuple[Any, ...]) -> _Loc:
    """Turn a pydantic error location into the path of the data it points at.

    Elements that are not keys or indexes of the data (union member tags such as ``str``,
    ``[key]``, a missing field's name) are left out.
    """
    path: list[str | int] = []
    current = data
    for el in loc:
        if isinstance(current, Mapping):
            key = next((k for k in current if k == el or str(k) == str(el)), _MISSING)
            if key is not _MISSING:
                path.append(str(key))
                current = current[key]
        elif isinstance(current, list) and isinstance(el, int) and 0 <= el < len(current):
            path.append(el)
            current = current[el]
    return tuple(path)


_MISSING = object()


def _model_at(path: _Loc) -> type[BaseModel] | None:
    """Return the model class that validates the mapping at ``path``, if there is one."""
    annotation: Any = Policy
    for el in (*path, None):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if typing.get_origin(annotation) in (Union, types.UnionType) and len(args) == 1:
            annotation = args[0]
        if el is None:
            break
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(str(el))
            if field is None:
                return None
            annotation = field.annotation
        elif typing.get_origin(annotation) in (dict, list):
            annotation = typing.get_args(annotation)[-1]
        else:
            return None
    return (
        annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    )
