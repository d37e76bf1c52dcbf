"""Latency of the quality gate on realistic drafts (target: p99 <= 300 us).

Runs the policy's default gate (the ten default checks, listed in the output) on five
drafts that pass, and prints p50/p99 in microseconds:

    PYTHONPATH=. python benchmarks/bench_gate.py [--n 5000] [--engine auto|jsonschema|jsonschema-rs]
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import statistics
import sys
import time
from collections.abc import Callable

from tiered_router.gate import (
    CheckSpec,
    JsonSchemaCheck,
    QualityGate,
    SchemaCache,
    ToolArgumentsCheck,
)
from tiered_router.policy import GateConfig
from tiered_router.turn import Completion, ToolCall, Turn

PROSE = (
    "Diffusion language models generate text by starting from a fully masked sequence and "
    "refining every position in parallel over a fixed number of denoising steps. Instead of "
    "committing to one token at a time, the model predicts a distribution for each masked slot, "
    "keeps the most confident predictions, and re-masks the rest for the next step. This is why "
    "throughput can reach a thousand tokens per second on modern accelerators: the cost of a "
    "step is shared by every position in the block.\n\n"
    "The trade-offs are different from those of autoregressive decoding. The length of the "
    "canvas is usually chosen in advance, so a short answer is followed by padding that a "
    "careful server strips before returning the text. With too few steps, neighbouring "
    "positions are decided independently and can disagree, which shows up as repeated "
    "phrases or as sentences that start one way and finish another. Grammar-constrained "
    "decoding is rarely available, so structured output such as JSON must be checked after "
    "the fact rather than guaranteed during generation.\n\n"
    "For an agent, most calls are small: pick a tool, fill in its arguments, summarise a "
    "search result, or decide whether the task is done. These are exactly the calls where a "
    "fast model shines, provided that every draft is checked before it is used. A cheap, "
    "deterministic gate catches empty output, truncation, refusals, loops, malformed JSON "
    "and invalid tool arguments; anything it rejects is sent to a slower frontier model. "
    "The result is an agent that spends most of its time on the fast path and pays for the "
    "frontier only when the draft shows that it needs it.\n\n"
    "Measuring this honestly means recording, for every turn, which tier answered, how long "
    "it took, what it cost, and whether the gate passed the draft, so that thresholds can be "
    "calibrated from data instead of being tuned by hand."
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "minLength": 1},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city", "unit"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_flights",
            "description": "Search flights between two airports on a date.",
            "parameters": {
                "type": "object",
                "properties": {
                    "origin": {"type": "string", "pattern": "^[A-Z]{3}$"},
                    "destination": {"type": "string", "pattern": "^[A-Z]{3}$"},
                    "date": {"type": "string", "format": "date"},
                    "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
                    "cabin": {"type": "string", "enum": ["economy", "premium", "business"]},
                    "max_stops": {"type": ["integer", "null"], "minimum": 0},
                },
                "required": ["origin", "destination", "date", "passengers"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "create_calendar_event",
            "parameters": {
                "type": "object",
                "properties": {
                    "title": {"type": "string"},
                    "start": {"type": "string", "format": "date-time"},
                    "attendees": {"type": "array", "items": {"type": "string", "format": "email"}},
                },
                "required": ["title", "start"],
            },
        },
    },
]

PRODUCT_SCHEMA = {
    "type": "object",
    "required": ["query", "products", "total"],
    "additionalProperties": False,
    "properties": {
        "query": {"type": "string"},
        "total": {"type": "integer", "minimum": 0},
        "products": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "name", "price", "currency", "in_stock", "tags", "rating"],
                "additionalProperties": False,
                "properties": {
                    "id": {"type": "string", "pattern": "^P[0-9]{5}$"},
                    "name": {"type": "string", "minLength": 1},
                    "price": {"type": "number", "minimum": 0},
                    "currency": {"type": "string", "enum": ["EUR", "USD", "GBP"]},
                    "in_stock": {"type": "boolean"},
                    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
                    "rating": {"type": ["number", "null"], "minimum": 0, "maximum": 5},
                    "description": {"type": "string"},
                },
            },
        },
    },
}

_WORDS = (
    "compact sturdy wireless ergonomic quiet portable modular stainless recycled waterproof "
    "foldable adjustable lightweight rechargeable smart vintage classic premium "
    "lamp kettle backpack chair speaker blender charger monitor keyboard bottle jacket "
    "drill tent mug headphones desk router camera"
).split()


def _json_draft(target_bytes: int = 16_384) -> str:
    rng = random.Random(7)
    products: list[dict[str, object]] = []
    doc: dict[str, object] = {"query": "home office gear under 200", "products": products}
    while len(json.dumps(doc, indent=1)) < target_bytes:
        i = len(products)
        words = rng.sample(_WORDS, 6)
        products.append(
            {
                "id": f"P{10000 + i * 37:05d}",
                "name": " ".join(w.capitalize() for w in words[:3]),
                "price": round(rng.uniform(5, 199), 2),
                "currency": rng.choice(["EUR", "USD", "GBP"]),
                "in_stock": rng.random() > 0.3,
                "tags": words[3 : 3 + rng.randint(1, 3)],
                "rating": None if rng.random() < 0.1 else round(rng.uniform(1, 5), 1),
                "description": f"A {words[0]} {words[1]} {words[2]} for {rng.randint(1, 9)} "
                f"people, {rng.randint(2, 40)} cm wide.",
            }
        )
        doc["total"] = len(products)
    return json.dumps(doc, indent=1)


def _cases() -> list[tuple[str, Completion, Turn]]:
    history = [
        {"role": "system", "content": "You are a helpful assistant. Answer briefly."},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    short = (
        "short text draft",
        Completion(text="The capital of France is Paris.", finish_reason="stop"),
        Turn(history),
    )
    prose = (
        "2 KB prose",
        Completion(text=PROSE, finish_reason="stop"),
        Turn([{"role": "user", "content": "Explain diffusion LLMs for agents."}]),
    )
    args = {
        "origin": "CDG",
        "destination": "JFK",
        "date": "2026-03-14",
        "passengers": 2,
        "cabin": "economy",
        "max_stops": 1,
    }
    tool = (
        "tool call with args",
        Completion(
            tool_calls=(
                ToolCall(id="call_1", name="search_flights", arguments=json.dumps(args)),
                ToolCall(
                    id="call_2",
                    name="get_weather",
                    arguments='{"city": "New York", "unit": "celsius"}',
                ),
            ),
            finish_reason="tool_calls",
        ),
        Turn([{"role": "user", "content": "Find me a flight to NYC on 14 March."}], tools=TOOLS),
    )
    text_call = (
        "tool call written as text",
        Completion(text='[get_weather(city="New York", unit="celsius")]', finish_reason="stop"),
        Turn([{"role": "user", "content": "Weather in New York, in celsius?"}], tools=TOOLS),
    )
    draft = _json_draft()
    fmt = {"type": "json_schema", "json_schema": {"name": "products", "schema": PRODUCT_SCHEMA}}
    big = (
        f"{len(draft) // 1024} KB JSON with schema",
        Completion(text=draft, finish_reason="stop"),
        Turn([{"role": "user", "content": "List products."}], response_format=fmt),
    )
    return [short, prose, tool, text_call, big]


def _measure(fn: Callable[[], object], n: int) -> tuple[float, float, float, float]:
    """Return p50 and p99 wall time, mean wall time and p99 CPU time of ``fn``, in us.

    CPU time (this thread only) leaves out time the OS gave to other processes: on a busy
    machine the wall p99 measures the neighbours, the CPU p99 still measures the gate.
    """
    for _ in range(min(200, n)):
        fn()
    wall: list[int] = []
    cpu: list[int] = []
    clock, cpu_clock = time.perf_counter_ns, time.thread_time_ns
    for _ in range(n):
        start, cpu_start = clock(), cpu_clock()
        fn()
        cpu.append(cpu_clock() - cpu_start)
        wall.append(clock() - start)
    wall.sort()
    cpu.sort()
    p99 = min(n - 1, int(n * 0.99))
    return wall[n // 2] / 1000, wall[p99] / 1000, statistics.fmean(wall) / 1000, cpu[p99] / 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5000, help="timed runs per case")
    parser.add_argument("--engine", default="auto", choices=["auto", "jsonschema", "jsonschema-rs"])
    opts = parser.parse_args(argv)

    cache = SchemaCache(engine=opts.engine)
    checks: list[CheckSpec] = []
    for spec in GateConfig().checks:
        if spec == "json_schema":
            checks.append(JsonSchemaCheck(cache=cache))
        elif spec == "tool_arguments":
            checks.append(ToolArgumentsCheck(cache=cache))
        else:
            checks.append(spec)
    gate = QualityGate(checks)

    print(f"gate: {', '.join(gate.names)}")
    print(f"{'case':<26}{'bytes':>8}{'p50 us':>10}{'p99 us':>10}{'mean us':>10}{'cpu p99':>10}")
    worst = 0.0
    for label, completion, turn in _cases():
        verdict = gate.evaluate(completion, turn)
        if not verdict.passed:
            print(f"{label}: draft unexpectedly failed: {verdict.reasons}", file=sys.stderr)
            return 1
        size = len(completion.text) + sum(len(c.arguments) for c in completion.tool_calls)
        p50, p99, mean, cpu99 = _measure(functools.partial(gate.evaluate, completion, turn), opts.n)
        worst = max(worst, p99)
        print(f"{label:<26}{size:>8}{p50:>10.1f}{p99:>10.1f}{mean:>10.1f}{cpu99:>10.1f}")
    info = cache.cache_info()
    print(f"schema engine: {info.engine}; compiled {info.compiled}, hits {info.hits}")
    print(f"worst p99: {worst:.1f} us (target <= 300 us)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
