"""Benchmark: heuristic score + decide() per turn, in microseconds.

Builds ~1,000 realistic turns as agent trajectories (each conversation is routed once per
step, so turn k carries the messages of turns 0..k-1, as an agent re-sends them): short
questions, ~2 KB and ~8 KB conversations with prose, code, JSON tool results and math,
5-10 tools, some ``response_format`` JSON schemas. Deterministic (seeded).

Each call is timed twice: wall clock (``perf_counter_ns``) and this thread's CPU time
(``thread_time_ns``). On a busy machine the wall-clock tail is the scheduler's (another
process got the core); the CPU-time tail is ours.

Three measurements:

- ``trajectory``: every turn once, in trajectory order, caches cleared first (what an
  agent sees: earlier messages were analysed on earlier steps);
- ``no cache``: the text-analysis cache cleared before every call (worst case);
- ``repeated``: ``--repeat`` more passes over all turns;
- ``best5 warm`` / ``best5 cold``: per turn, the fastest of 5 calls (warm cache / cache
  cleared before each call): the cost of the code itself, without the noise of a shared
  machine (preemption, cache misses, GC).

``--scorer transfer`` times the transfer scorer (the bundled default policy's) instead of
the heuristic one.

Run: ``PYTHONPATH=. python benchmarks/bench_decide.py [--repeat 20] [--scorer transfer]``
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from typing import Any

from tiered_router.policy import Policy
from tiered_router.routing import Decision, decide
from tiered_router.scoring import HeuristicScorer, Scorer, TransferScorer, transfer
from tiered_router.scoring.features import normalised_words, text_signals
from tiered_router.turn import Turn

PROSE = [
    "The deployment failed again last night and the on-call engineer restarted the workers.",
    "Customers in the EU region reported slow checkout pages between 02:00 and 03:00 UTC.",
    "We need to decide whether to keep the cache in Redis or move it into the database.",
    "Please keep the answer short; the audience is the support team, not engineers.",
    "The quarterly report shows revenue of 4.2 million with a margin of 18 percent.",
    "Our agent reads the ticket, looks up the order, and drafts a reply for a human to check.",
    "The migration touches 14 tables and must finish within the maintenance window.",
    "Summaries should mention the customer's name, the order number and the next step.",
]
QUESTIONS = [
    "What is the capital of Australia?",
    "Translate 'thank you for your patience' into German.",
    "Summarize the ticket above in two sentences.",
    "Why does the retry loop never terminate when the upstream returns 429?",
    "Prove that the sum of the first n odd numbers is n^2.",
    "Compare Postgres logical replication with Debezium for our CDC pipeline; list trade-offs.",
    "A train leaves at 3 pm at 60 km/h and another at 4 pm at 90 km/h. When does the second "
    "catch up, and how far from the station?",
    "Write a Python function that merges overlapping intervals. It must run in O(n log n).",
    "ok",
    "yes, go ahead",
    "What's the order status for #48213?",
    "Plan the steps to migrate the billing service to the new queue without downtime.",
]
CODE = """```python
def merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out
```"""


def tool_result(rng: random.Random) -> str:
    return json.dumps(
        {
            "order_id": rng.randint(10000, 99999),
            "status": rng.choice(["shipped", "pending", "refunded"]),
            "items": [
                {"sku": f"SKU-{rng.randint(100, 999)}", "qty": rng.randint(1, 4), "price": 19.99}
                for _ in range(rng.randint(1, 6))
            ],
            "history": [f"2025-0{rng.randint(1, 9)}-1{rng.randint(0, 9)} update" for _ in range(4)],
        }
    )


def paragraph(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        piece = rng.choice(PROSE) if rng.random() > 0.1 else CODE
        out.append(piece)
        size += len(piece) + 1
    return " ".join(out)


def tools(rng: random.Random) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": "Look something up in the order system.",
                "parameters": {
                    "type": "object",
                    "properties": {"id": {"type": "string"}, "limit": {"type": "integer"}},
                    "required": ["id"],
                },
            },
        }
        for i in range(rng.randint(5, 10))
    ]


SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "reply",
        "schema": {
            "type": "object",
            "properties": {
                "answer": {"type": "string"},
                "confidence": {"type": "number"},
                "citations": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"url": {"type": "string"}, "quote": {"type": "string"}},
                    },
                },
            },
            "required": ["answer"],
        },
    },
}


def trajectories(rng: random.Random, n_turns: int) -> list[Turn]:
    turns: list[Turn] = []
    conv = 0
    while len(turns) < n_turns:
        conv += 1
        kind = rng.choice(["short", "2k", "8k"])
        budget = {"short": 0, "2k": 2000, "8k": 8000}[kind]
        spec = tools(rng) if rng.random() < 0.7 else None
        rf = SCHEMA if rng.random() < 0.3 else None
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a careful support agent. " + PROSE[0]},
            {"role": "user", "content": paragraph(rng, budget // 4) + " " + rng.choice(QUESTIONS)},
        ]
        step = 0
        while True:
            turns.append(
                Turn(
                    list(messages),
                    tools=spec,
                    response_format=rf,
                    step=step,
                    final=rng.random() < 0.05,
                    metadata={"conv": conv},
                )
            )
            size = sum(len(str(m.get("content") or "")) for m in messages)
            if size >= budget or len(turns) >= n_turns:
                break
            step += 1
            if spec and rng.random() < 0.6:
                messages.append(
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": f"c{step}",
                                "type": "function",
                                "function": {"name": "tool_0", "arguments": '{"id": "48213"}'},
                            }
                        ],
                    }
                )
                messages.append(
                    {"role": "tool", "tool_call_id": f"c{step}", "content": tool_result(rng)}
                )
            else:
                messages.append({"role": "assistant", "content": paragraph(rng, 600)})
                messages.append({"role": "user", "content": rng.choice(QUESTIONS)})
    return turns


def percentiles(samples_ns: list[int]) -> str:
    us = sorted(s / 1000 for s in samples_ns)
    q = statistics.quantiles(us, n=100, method="inclusive")
    return f"p50 {q[49]:6.1f}  p99 {q[98]:6.1f}  max {us[-1]:8.1f}"


class Timer:
    def __init__(self) -> None:
        self.wall: list[int] = []
        self.cpu: list[int] = []

    def run(self, turn: Turn, scorer: Scorer, policy: Policy) -> Decision:
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        decision = decide(turn, scorer.score(turn), policy)
        w1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        self.wall.append(w1 - w0)
        self.cpu.append(c1 - c0)
        return decision

    def report(self, label: str) -> str:
        return (
            f"{label:11s} wall us: {percentiles(self.wall)} | "
            f"cpu us: {percentiles(self.cpu)} | n={len(self.wall)}"
        )


def clear_caches() -> None:
    text_signals.cache_clear()
    normalised_words.cache_clear()
    transfer._choice_features.cache_clear()
    transfer._content_stems.cache_clear()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--scorer", choices=("heuristic", "transfer"), default="heuristic")
    args = parser.parse_args()

    policy = Policy.model_validate(
        {
            "backends": {"fast": {"model": "mercury-2"}, "frontier": {"model": "gpt-5.2"}},
            "tiers": {"fast": "fast", "frontier": "frontier"},
            "scoring": {"threshold": 0.6},
            "rules": [
                {"name": "final-answer", "when": {"final": True}, "tier": "frontier"},
                {"name": "huge", "when": {"min_prompt_tokens": 20000}, "tier": "frontier"},
                {"name": "vip", "when": {"metadata": {"tenant": "vip"}}, "tier": "frontier"},
            ],
        }
    )
    scorer: Scorer = HeuristicScorer() if args.scorer == "heuristic" else TransferScorer.default()
    print(f"scorer: {args.scorer}")
    turns = trajectories(random.Random(args.seed), args.turns)
    sizes = sorted(sum(len(str(m.get("content") or "")) for m in t.messages) for t in turns)
    tool_counts = [len(t.tools or ()) for t in turns]
    print(
        f"{len(turns)} turns; conversation chars p50 {sizes[len(sizes) // 2]}, max {sizes[-1]}; "
        f"tools {min(tool_counts)}-{max(tool_counts)}; "
        f"with response_format {sum(t.response_format is not None for t in turns)}"
    )

    clear_caches()
    timer = Timer()
    frontier = sum(timer.run(turn, scorer, policy).tier == "frontier" for turn in turns)
    print(timer.report("trajectory"), f"| frontier share {frontier / len(turns):.2f}")

    timer = Timer()
    for turn in turns:
        clear_caches()
        timer.run(turn, scorer, policy)
    print(timer.report("no cache"))

    timer = Timer()
    for _ in range(args.repeat):
        for turn in turns:
            timer.run(turn, scorer, policy)
    print(timer.report("repeated"))

    for label, cold in (("best5 warm", False), ("best5 cold", True)):
        best = Timer()
        for turn in turns:
            runs = Timer()
            for _ in range(5):
                if cold:
                    clear_caches()
                runs.run(turn, scorer, policy)
            best.wall.append(min(runs.wall))
            best.cpu.append(min(runs.cpu))
        print(best.report(label))


if __name__ == "__main__":
    main()
