"""The public API is pinned: each public module's ``__all__`` is written out here.

Adding or removing a public name is a deliberate change: update this table with it (and the
docs). The top-level ``__all__`` is kept sorted, case-insensitively.
"""

from __future__ import annotations

import importlib

import pytest

import tiered_router

PINNED: dict[str, frozenset[str]] = {
    "tiered_router": frozenset(
        {
            "AllTiersFailed",
            "AsyncRoutedStream",
            "Attempt",
            "BackendConnectionError",
            "BackendError",
            "BackendRateLimited",
            "BackendResponseError",
            "BackendStatusError",
            "BackendTimeout",
            "BackendUnavailable",
            "CapabilityError",
            "CheckFailure",
            "Completion",
            "CompletionChunk",
            "Decision",
            "GateFailed",
            "HeuristicScorer",
            "InvalidRequest",
            "JSONLSink",
            "load_policy",
            "LoggingSink",
            "MemorySink",
            "Policy",
            "PolicyError",
            "QualityGate",
            "register_check",
            "RoutedResult",
            "RoutedStream",
            "Router",
            "Score",
            "Scorer",
            "StreamInterrupted",
            "Task",
            "TaskSummary",
            "TieredRouterError",
            "ToolCall",
            "ToolCallDelta",
            "ToolSpec",
            "Trace",
            "TraceSink",
            "Turn",
            "Usage",
            "Verdict",
        }
    ),
    "tiered_router.agent_signals": frozenset(
        {
            "agent_signals",
            "AgentSignals",
            "annotate",
            "is_tool_error",
            "tool_call_signature",
            "TurnRole",
            "window_start",
        }
    ),
    "tiered_router.backends": frozenset(
        {
            "Backend",
            "backend_types",
            "BackendFactory",
            "BackendRegistry",
            "build_backend",
            "CompletionRequest",
            "DialectProfile",
            "DIALECTS",
            "from_preset",
            "local_diffusion",
            "mercury2",
            "openai_backend",
            "OpenAICompatBackend",
            "Preset",
            "PRESETS",
            "register_backend_type",
            "resolve_config",
            "StreamingBackend",
        }
    ),
    "tiered_router.backends.registry": frozenset(
        {
            "backend_problems",
            "backend_types",
            "BackendCheck",
            "BackendFactory",
            "BackendRegistry",
            "build_backend",
            "check_backend",
            "from_preset",
            "local_diffusion",
            "mercury2",
            "openai_backend",
            "register_backend_type",
        }
    ),
    "tiered_router.calls": frozenset(),
    "tiered_router.cli": frozenset(
        {
            "build_app",
            "main",
        }
    ),
    "tiered_router.engine._machine": frozenset(
        {
            "EnginePorts",
            "Kept",
            "LIFTED_TEXT_CALLS",
            "RoutedResult",
            "TurnRun",
        }
    ),
    "tiered_router.engine._plan": frozenset({"decide_turn", "plan_turn"}),
    "tiered_router.engine": frozenset(
        {
            "decide_turn",
            "EnginePorts",
            "LIFTED_TEXT_CALLS",
            "plan_turn",
            "RoutedResult",
            "TurnRun",
        }
    ),
    "tiered_router.evaluation": frozenset(
        {
            "apgr",
            "bundled_policy_path",
            "calibrate",
            "calibrate_policy",
            "CalibrationError",
            "cpt",
            "Dataset",
            "DatasetError",
            "EvalResult",
            "EvalRow",
            "evaluate",
            "find_data_dir",
            "fit_scorer",
            "GateConfusion",
            "load_data",
            "load_sample",
            "Outcome",
            "pgr",
            "read_dataset",
            "render_html",
            "replay_backend_factory",
            "ReplayBackend",
            "ScorerFitReport",
            "simulated_latency",
            "SimulatedClock",
            "Summary",
            "sweep",
            "SweepPoint",
            "Target",
            "write_dataset",
            "write_threshold",
        }
    ),
    "tiered_router.exceptions": frozenset(
        {
            "AllTiersFailed",
            "BackendConnectionError",
            "BackendError",
            "BackendRateLimited",
            "BackendResponseError",
            "BackendStatusError",
            "BackendTimeout",
            "BackendUnavailable",
            "CapabilityError",
            "GateFailed",
            "InvalidRequest",
            "PolicyError",
            "StreamInterrupted",
            "TieredRouterError",
            "UnknownModel",
        }
    ),
    "tiered_router.gate": frozenset(
        {
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
        }
    ),
    "tiered_router.integrations": frozenset(
        {
            "TieredAgentsModel",
            "TieredChatModel",
            "TieredModelProvider",
            "TieredPydanticAIModel",
        }
    ),
    "tiered_router.integrations.langchain": frozenset(
        {
            "TieredChatModel",
        }
    ),
    "tiered_router.integrations.openai_agents": frozenset(
        {
            "TieredAgentsModel",
            "TieredModelProvider",
        }
    ),
    "tiered_router.integrations.pydantic_ai": frozenset(
        {
            "TieredPydanticAIModel",
        }
    ),
    "tiered_router.openai": frozenset(
        {
            "AsyncTieredOpenAI",
            "AsyncTieredStream",
            "TieredOpenAI",
            "TieredStream",
            "UnknownModel",
            "wrap_openai",
        }
    ),
    "tiered_router.otel": frozenset(
        {
            "configure_otlp",
            "gen_ai_system",
            "OTelSink",
            "TraceContextMiddleware",
        }
    ),
    "tiered_router.monitor": frozenset(
        {
            "Comparison",
            "compare_answers",
            "KindQuality",
            "Monitor",
            "random_sampler",
            "Sampler",
            "SHADOW_OUTCOMES",
            "turn_kind",
            "wilson_lower",
        }
    ),
    "tiered_router.panels": frozenset(
        {
            "AnswerKey",
            "AnswerKind",
            "answer_key",
            "canonical",
            "draft_parts",
            "draft_signals",
            "draft_text",
            "DraftView",
            "exact_form",
            "final_answer",
            "majority_only",
            "needed_votes",
            "normalise_answer",
            "panel_kinds",
            "Tally",
            "tally",
            "SIGNAL_NAMES",
            "turn_kind",
            "TURN_KINDS",
            "PARTS",
            "unshared_parts",
            "without_parts",
        }
    ),
    "tiered_router.policy": frozenset(
        {
            "BackendConfig",
            "BreakerConfig",
            "ClientLimits",
            "DraftsConfig",
            "EscalationConfig",
            "GateConfig",
            "HedgeConfig",
            "LatencyModel",
            "load_policy",
            "MonitorConfig",
            "Policy",
            "Price",
            "ResilienceConfig",
            "RetryConfig",
            "Rule",
            "RuleCondition",
            "ScoringConfig",
            "ServerConfig",
            "ShadowConfig",
            "StateConfig",
            "TaskConfig",
            "Tiers",
        }
    ),
    "tiered_router.pricing": frozenset(
        {
            "cost_of",
            "listed_price",
            "ListedPrice",
            "PRICE_TABLE",
            "PRICES_AS_OF",
            "PRICES_SOURCE",
            "table_rows",
            "warn_unpriced",
        }
    ),
    "tiered_router.engine.resilience": frozenset(
        {
            "breaker_outcome",
            "BreakerPass",
            "CircuitBreaker",
            "Deadline",
            "RetrySchedule",
        }
    ),
    "tiered_router.resilience": frozenset(
        {
            "breaker_outcome",
            "BreakerPass",
            "CircuitBreaker",
            "Deadline",
            "RetrySchedule",
        }
    ),
    "tiered_router.router": frozenset(
        {
            "RoutedResult",
            "Router",
        }
    ),
    "tiered_router.routing": frozenset(
        {
            "approx_tokens",
            "decide",
            "Decision",
            "describe_condition",
            "matches",
        }
    ),
    "tiered_router.scoring": frozenset(
        {
            "approx_tokens",
            "build_scorer",
            "DEFAULT_WEIGHTS",
            "FEATURE_NAMES",
            "fit",
            "fit_model",
            "HeuristicScorer",
            "LearnedModel",
            "LearnedScorer",
            "LearnedWeights",
            "load_deferral",
            "load_weights",
            "panel_deferral",
            "Score",
            "Scorer",
            "scoring_problems",
            "TransferModel",
            "TransferScorer",
        }
    ),
    "tiered_router.server": frozenset(
        {
            "API_KEYS_ENV",
            "create_app",
            "is_loopback",
            "serve",
            "ServerSettings",
        }
    ),
    "tiered_router.state": frozenset(
        {
            "Admission",
            "BreakerSnapshot",
            "BreakerState",
            "judge",
            "MemoryStateStore",
            "MonitorRules",
            "MonitorSnapshot",
            "MonitorState",
            "MonitorStore",
            "Outcome",
            "perfect_needs",
            "SafeStateStore",
            "StateStore",
            "TaskDelta",
            "TaskRules",
            "TaskSnapshot",
            "wilson_lower",
        }
    ),
    "tiered_router.task": frozenset(
        {
            "Task",
            "TaskHost",
            "TaskSummary",
        }
    ),
    "tiered_router.testing": frozenset(
        {
            "AgentReply",
            "BrokenMode",
            "FunctionBackend",
            "RecordedRequest",
            "Reply",
            "ReplyFn",
            "ReplyLike",
            "ScriptedBackend",
            "ScriptedServer",
            "ScriptError",
            "ScriptItem",
            "ToolCallSpec",
        }
    ),
    "tiered_router.trace": frozenset(
        {
            "Attempt",
            "AttemptRole",
            "EscalationReason",
            "JSONLSink",
            "LoggingSink",
            "MemorySink",
            "TierFailure",
            "Trace",
            "TraceSink",
        }
    ),
    "tiered_router.turn": frozenset(
        {
            "assemble",
            "Completion",
            "CompletionChunk",
            "Message",
            "message_text",
            "SIGNAL_KEYS",
            "ToolCall",
            "ToolCallDelta",
            "ToolSpec",
            "Turn",
            "Usage",
        }
    ),
}


def test_top_level_all_is_sorted_case_insensitively_without_duplicates() -> None:
    names = tiered_router.__all__
    assert names == sorted(names, key=str.casefold)
    assert len(set(names)) == len(names)


def test_every_public_module_is_pinned() -> None:
    import pkgutil

    public = {"tiered_router"}
    for info in pkgutil.walk_packages(tiered_router.__path__, "tiered_router."):
        parts = info.name.split(".")[1:]
        if any(part.startswith("_") for part in parts):
            continue
        # submodules of a package whose __init__ re-exports them are covered by the package
        if len(parts) == 1 or parts[0] in {"integrations"} or info.name.endswith(".registry"):
            public.add(info.name)
    assert public - set(PINNED) == set()


@pytest.mark.parametrize("name", sorted(PINNED))
def test_all_is_pinned(name: str) -> None:
    try:
        module = importlib.import_module(name)
    except ImportError as exc:  # an integration whose framework (an extra) is not installed
        pytest.skip(f"{name}: {exc}")
    exported = module.__all__
    assert len(set(exported)) == len(exported), f"{name}.__all__ has duplicates"
    assert set(exported) == PINNED[name], (
        f"{name}.__all__ changed: added {sorted(set(exported) - PINNED[name])}, "
        f"removed {sorted(PINNED[name] - set(exported))}"
    )
    for attr in exported:
        try:
            assert getattr(module, attr) is not None or attr.isupper(), f"{name}.{attr}"
        except ImportError as exc:  # a lazily imported framework (an extra)
            pytest.skip(f"{name}.{attr}: {exc}")
