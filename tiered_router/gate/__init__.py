"""The quality gate: deterministic checks on a draft, giving a :class:`Verdict`.

```python
from tiered_router.gate import QualityGate

gate = QualityGate(["non_empty", "not_truncated", "no_refusal", "repetition",
                    "json_schema", "tool_arguments", {"max_chars": {"limit": 8000}}])
verdict = gate.evaluate(completion, turn)   # Verdict(passed=..., failures=(...), checks=(...))
```

Built-in checks (by registered name): ``non_empty``, ``not_truncated``, ``no_refusal``,
``repetition``, ``json_schema``, ``tool_arguments``, ``regex``, ``max_chars``. Custom
checks are plain callables ``(completion, turn) -> str | Iterable[str] | None``, added with
:func:`register_check` or passed to :class:`QualityGate` directly.

Wing (docs/architecture.md): owns the checks, their registry and ``Verdict``; may import the
root's shared values, ``calls`` (strict reader of text-form calls) and ``policy`` (its schema).
A new check: a module here, registered in the default registry (``_registry``).
"""

from __future__ import annotations

from tiered_router.calls._text import parse_text_tool_calls
from tiered_router.gate._base import Check, CheckFactory, CheckResult, check_name
from tiered_router.gate._gate import CheckSpec, QualityGate
from tiered_router.gate._lifting import lift_text_tool_calls
from tiered_router.gate._registry import (
    CheckRegistry,
    check_names,
    default_registry,
    register_check,
)
from tiered_router.gate._repetition import RepetitionCheck
from tiered_router.gate._schema import (
    Engine,
    SchemaCache,
    SchemaCacheInfo,
    SchemaValidator,
    cache_info,
    default_schema_cache,
    json_path,
    parse_json,
)
from tiered_router.gate._structured import JsonSchemaCheck, ToolArgumentsCheck
from tiered_router.gate._text import (
    EOS_TOKENS,
    MaxCharsCheck,
    NonEmptyCheck,
    NoRefusalCheck,
    NotTruncatedCheck,
    RegexCheck,
)
from tiered_router.gate._verdict import CheckFailure, Verdict

__all__ = [
    "cache_info",
    "Check",
    "check_name",
    "check_names",
    "CheckFactory",
    "CheckFailure",
    "CheckRegistry",
    "CheckResult",
    "CheckSpec",
    "default_registry",
    "default_schema_cache",
    "Engine",
    "EOS_TOKENS",
    "json_path",
    "JsonSchemaCheck",
    "lift_text_tool_calls",
    "MaxCharsCheck",
    "NonEmptyCheck",
    "NoRefusalCheck",
    "NotTruncatedCheck",
    "parse_json",
    "parse_text_tool_calls",
    "QualityGate",
    "RegexCheck",
    "register_check",
    "RepetitionCheck",
    "SchemaCache",
    "SchemaCacheInfo",
    "SchemaValidator",
    "ToolArgumentsCheck",
    "Verdict",
]
