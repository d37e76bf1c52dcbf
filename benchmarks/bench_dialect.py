"""Cost of the dialect conversion and of parsing prompted tool calls, per request.

Converts the conformance tests' 15 agent-turn shapes (tests/agent_shapes.py) to the dlmserve
dialect, and reads five typical replies back into tool calls under the lifting rules (with the
schema validation the dialect uses; two of the five stay text: prose around a call, a fenced
example); prints p50/p99 in microseconds:

    PYTHONPATH=.:tests python benchmarks/bench_dialect.py [--n 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from agent_shapes import SHAPES, TIME, WEATHER

from tiered_router.backends._dialect_shape import shape
from tiered_router.backends._profiles import DIALECTS
from tiered_router.calls._prompted import split_tool_calls
from tiered_router.gate._lifting import argument_problem
from tiered_router.turn import ToolSpec

REPLIES = [
    '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
    'Let me check.\n<tool_call>{"name": "get_time", "arguments": {"tz": "CET"}}</tool_call>',
    '[get_weather(city="Oslo"), get_time(tz="UTC")]',
    '```json\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n```',
    "It is 18 C and sunny in Paris, with a light wind from the west. " * 8,
]


def _times(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1e6)
    return sorted(out)


def _report(label: str, samples: list[float]) -> None:
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    print(f"{label:<40} p50 {statistics.median(samples):8.1f} us   p99 {p99:8.1f} us")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    args = parser.parse_args()
    profile = DIALECTS["dlmserve"]
    bodies = []
    for _, messages, tools, response_format, params in SHAPES:
        body = {"model": "m", "messages": messages, **params}
        if tools:
            body["tools"] = tools
        if response_format:
            body["response_format"] = response_format
        bodies.append(body)
    all_shapes: list[float] = []
    for body in bodies:
        all_shapes += _times(lambda b=body: shape(profile, b), args.n // len(bodies) + 1)
    _report(f"shape() dlmserve, {len(bodies)} turn shapes", sorted(all_shapes))
    long = bodies[[s[0] for s in SHAPES].index("long_history")]
    _report("shape() dlmserve, 38-message history", _times(lambda: shape(profile, long), args.n))
    specs = [ToolSpec.from_openai(WEATHER), ToolSpec.from_openai(TIME)]
    parsed: list[float] = []
    for reply in REPLIES:
        parsed += _times(
            lambda r=reply: split_tool_calls(r, specs, validate=argument_problem),
            args.n // len(REPLIES),
        )
    _report(f"split_tool_calls (validated), {len(REPLIES)} replies", sorted(parsed))


if __name__ == "__main__":
    main()
