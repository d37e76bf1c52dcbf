"""The quality monitor in an agent loop whose fast model goes wrong from some step on.

    PYTHONPATH=. python benchmarks/bench_monitor.py [--steps 2800] [--change 2100] [--json]

An agent loop over real HTTP: one scripted OpenAI-compatible server on 127.0.0.1
(:class:`tiered_router.testing.ScriptedServer`) serves both tiers. Every step offers one tool,
``get_weather(city)``, and asks for the weather in that step's city. The frontier model
always calls it with the right city. The fast model does too until step ``--change``; from
then on, on ``--bad`` of the steps (a hash of the step number), every one of its drafts calls
it with the same wrong city (the other city the prompt names: grounded, schema-valid), so
the policy's panel (``drafts: {k: 3, min_agreement: 0.67}``,
three separate requests) agrees and accepts the wrong call: no gate check can see it.

The policy adds ``monitor: {shadow_rate: R, target: 0.95, confidence: 0.95, enforce: true,
window: 100, min_compared: 20, explore: 0.05, tighten: frontier}``. The loop runs the
turns one after the other through ``Router.acomplete`` and waits for the step's shadow call
(``adrain_shadows``) before the next step, so a comparison lands before the next decision
(a real loop's next step starts while the shadow call runs; the caller never waits for it).
Turn ids are ``step-<n>`` and the bench injects a hash of the id as the monitor's sampler
(``tiered_router.engine._shadow.sampled``; the default draws at random), so it picks the
same turns on every run. The change comes at step 2100 by default, once both shadow rates have
filled the window (100 comparisons: 420 steps at 0.2, 2000 at 0.05), so the figures are a
warm monitor's reaction; a monitor has no verdict before it has the comparisons a perfect
record needs to clear the target (52 here, ``perfect_needs``), which ``--change 300`` shows.

It prints, for shadow_rate 0.2 and 0.05 and for the same loop without a monitor (the naive
baseline) and all-frontier: the share of wrong calls returned per 50-step window; the share
of steps answered fast before the change; the steps from the change until the monitor
enforces; the steps until the 50-step window starting there returns <= 6 % wrong calls (the
target: within 200 steps at shadow_rate 0.2, with >= 60 % answered fast before the change);
the wrong share after that; shadow calls made. Then the statistic's coverage: for true
matched shares p and windows n, the share of simulated windows whose Wilson lower bound
(one-sided, 95 %) is at or below p (it should be >= 0.95).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import random
import time
from statistics import NormalDist
from typing import Any

from tiered_router import Router, Turn
from tiered_router.engine._shadow import sampled
from tiered_router.state import wilson_lower
from tiered_router.testing import Reply, ScriptedServer

CITIES = ["Paris", "Lyon", "Nice", "Lille", "Nantes", "Rennes", "Dijon", "Brest"]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "The city."}},
                "required": ["city"],
            },
        },
    }
]
WINDOW = 50
TARGET_WRONG = 0.06


def _city(step: int) -> str:
    return CITIES[step % len(CITIES)]


def _other(step: int) -> str:
    """The step's other city: named in the prompt, so a call with it is grounded (but wrong)."""
    return CITIES[(step + 3) % len(CITIES)]


def _prompt(step: int) -> str:
    return f"step {step}: I flew in from {_other(step)} this morning. Weather in {_city(step)}?"


def _bad(step: int, share: float) -> bool:
    digest = hashlib.sha256(f"bad-{step}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


def _step_of(body: dict[str, Any]) -> int:
    for message in reversed(body.get("messages", [])):
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str):
            return int(content.split(":", 1)[0].removeprefix("step "))
    raise ValueError("no step in the request")


def _policy(server: ScriptedServer, rate: float | None, frontier_only: bool) -> dict[str, Any]:
    backend = {"type": "openai", "base_url": server.base_url, "api_key": "bench"}
    policy: dict[str, Any] = {
        "version": 1,
        "backends": {
            "fast": {
                **backend,
                "model": "fast-model",
                "kind": "diffusion",
                "max_retries": 0,
                "price": {"input_per_mtok": 0.25, "output_per_mtok": 0.75},
            },
            "frontier": {
                **backend,
                "model": "frontier-model",
                "max_retries": 0,
                "price": {"input_per_mtok": 2.5, "output_per_mtok": 10.0},
            },
        },
        "tiers": {"fast": "fast", "frontier": "frontier"},
        "scoring": {"type": "heuristic", "threshold": 0.95},
        "drafts": {"k": 3, "min_agreement": 0.67, "n": False, "temperature": 0.7},
    }
    if frontier_only:
        policy["rules"] = [{"name": "all-frontier", "when": {"min_tools": 0}, "tier": "frontier"}]
    if rate is not None:
        policy["monitor"] = {
            "shadow_rate": rate,
            "target": 0.95,
            "confidence": 0.95,
            "enforce": True,
            "window": 100,
            "min_compared": 20,
            "explore": 0.05,
            "tighten": "frontier",
            "refresh_s": 0,
        }
    return policy


async def run_loop(
    server: ScriptedServer,
    *,
    rate: float | None,
    steps: int,
    change: int,
    bad: float,
    frontier_only: bool = False,
) -> dict[str, Any]:
    """One agent loop; the figures of one row."""

    def fast(body: dict[str, Any]) -> Reply:
        step = _step_of(body)
        city = _other(step) if step >= change and _bad(step, bad) else _city(step)
        return Reply.tool_calls([("get_weather", {"city": city})])

    def frontier(body: dict[str, Any]) -> Reply:
        return Reply.tool_calls([("get_weather", {"city": _city(_step_of(body))})])

    server.reset()
    server.default = lambda body: (
        fast(body) if body.get("model") == "fast-model" else frontier(body)
    )
    router = Router(_policy(server, rate, frontier_only))
    if router.monitor is not None:
        # a hash of the turn id: the same turns on every run (the default draws at random, so
        # that a client's turn_id cannot steer it)
        router.monitor.sample = sampled
    wrong: list[bool] = []
    served_fast: list[bool] = []
    enforced_at: int | None = None
    started = time.perf_counter()
    try:
        for step in range(steps):
            turn = Turn(
                [{"role": "user", "content": _prompt(step)}],
                tools=TOOLS,
                id=f"step-{step}",
            )
            result = await router.acomplete(turn)
            calls = result.completion.tool_calls
            got = json.loads(calls[0].arguments).get("city") if calls else None
            wrong.append(got != _city(step))
            served_fast.append(result.tier == "fast")
            await router.adrain_shadows()
            if enforced_at is None and router.monitor is not None:
                if router.monitor.state("tools").state == "enforcing":
                    enforced_at = step + 1  # the next step is the first one it can tighten
        quality = router.quality().get("tools")
    finally:
        await router.aclose()
    elapsed = time.perf_counter() - started
    windows = [
        round(sum(wrong[i : i + WINDOW]) / len(wrong[i : i + WINDOW]), 3)
        for i in range(0, steps, WINDOW)
    ]
    recovered = next(
        (
            t
            for t in range(change, steps - WINDOW + 1)
            if sum(wrong[t : t + WINDOW]) / WINDOW <= TARGET_WRONG
            and (enforced_at is not None or rate is None)
        ),
        None,
    )
    if rate is None and not frontier_only:  # no monitor: it never recovers by itself
        recovered = next(
            (
                t
                for t in range(change, steps - WINDOW + 1)
                if sum(wrong[t : t + WINDOW]) / WINDOW <= TARGET_WRONG
            ),
            None,
        )
    after = wrong[recovered:] if recovered is not None else []
    later = [
        sum(wrong[i : i + WINDOW]) / WINDOW
        for i in range(recovered or steps, steps - WINDOW + 1, WINDOW)
    ]
    shadow_calls = sum(quality.shadow_calls.values()) if quality is not None else 0
    return {
        "shadow_rate": rate,
        "label": "all-frontier"
        if frontier_only
        else ("no monitor" if rate is None else f"monitor, shadow_rate {rate:g}"),
        "fast_before": round(sum(served_fast[:change]) / change, 3),
        "fast_after": round(sum(served_fast[change:]) / (steps - change), 3),
        "wrong_before": round(sum(wrong[:change]) / change, 3),
        "enforced_after_steps": None if enforced_at is None else enforced_at - change,
        "recovered_after_steps": None if recovered is None else recovered - change,
        "wrong_after_recovery": round(sum(after) / len(after), 3) if after else None,
        "worst_window_after": round(max(later), 3) if later else None,
        "shadow_calls": shadow_calls,
        "windows": windows,
        "seconds": round(elapsed, 1),
    }


def coverage(trials: int, seed: int = 7) -> list[dict[str, Any]]:
    """Simulated coverage of the one-sided 95 % Wilson lower bound."""
    rng = random.Random(seed)
    z = NormalDist().inv_cdf(0.95)
    rows = []
    for n in (60, 100, 200):
        for p in (0.8, 0.9, 0.95, 0.97, 0.99):
            held = 0
            for _ in range(trials):
                matched = sum(rng.random() < p for _ in range(n))
                held += wilson_lower(matched, n, z) <= p
            rows.append({"n": n, "p": p, "coverage": round(held / trials, 4)})
    return rows


def alarms() -> list[dict[str, Any]]:
    """Exact: the chance a full window's bound is below target while the true share is p.

    X ~ Binomial(window, p); the kind is below target when ``wilson_lower(X, window) <
    target``. At p under the target it is the detection probability of one window; at p
    over it, the share of time a healthy kind is tightened.
    """
    z = NormalDist().inv_cdf(0.95)
    rows = []
    for window, target in ((100, 0.95), (200, 0.95), (200, 0.97), (500, 0.97)):
        for p in (0.9, 0.95, 0.97, 0.98, 0.99, 0.995):
            below = sum(
                math.comb(window, x) * p**x * (1 - p) ** (window - x)
                for x in range(window + 1)
                if wilson_lower(x, window, z) < target
            )
            rows.append({"window": window, "target": target, "p": p, "below": round(below, 3)})
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2800)
    parser.add_argument("--change", type=int, default=2100)
    parser.add_argument("--bad", type=float, default=0.5, help="share of wrong steps after")
    parser.add_argument("--trials", type=int, default=4000, help="coverage simulation trials")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--stats-only", action="store_true", help="only the statistics")
    args = parser.parse_args()
    if args.stats_only:
        for a in alarms():
            print(
                f"window {a['window']:>3}  target {a['target']:.2f}  true share {a['p']:.3f}: "
                f"bound below target in {a['below']:.1%} of windows"
            )
        return
    rows = []
    async with ScriptedServer() as server:
        for rate, frontier_only in ((0.2, False), (0.05, False), (None, False), (None, True)):
            rows.append(
                await run_loop(
                    server,
                    rate=rate,
                    steps=args.steps,
                    change=args.change,
                    bad=args.bad,
                    frontier_only=frontier_only,
                )
            )
    cover = coverage(args.trials)
    below = alarms()
    if args.json:
        print(json.dumps({"loops": rows, "coverage": cover, "below_target": below}, indent=2))
        return
    print(
        f"agent loop: {args.steps} steps, fast model wrong (same call in every draft) on "
        f"{args.bad:.0%} of steps from step {args.change}; target 0.95, confidence 0.95, "
        "window 100, min_compared 20 (52: what a perfect record needs), explore 0.05, "
        "tighten: frontier"
    )
    for row in rows:
        print(f"\n{row['label']}  ({row['seconds']} s)")
        print(
            f"  answered fast before the change {row['fast_before']:.1%}, after "
            f"{row['fast_after']:.1%}; wrong before {row['wrong_before']:.1%}"
        )
        if row["shadow_rate"] is not None:
            print(
                f"  enforcing {row['enforced_after_steps']} steps after the change; "
                f"<= {TARGET_WRONG:.0%} wrong from {row['recovered_after_steps']} steps after "
                f"it (wrong after that: {row['wrong_after_recovery']}, worst {WINDOW}-step "
                f"window {row['worst_window_after']}); "
                f"{row['shadow_calls']} shadow calls"
            )
        first = max(0, args.change // WINDOW - 2)
        print(f"  wrong calls returned per {WINDOW}-step window, from step {first * WINDOW}:")
        print("   " + " ".join(f"{w:.2f}" for w in row["windows"][first:]))
    print("\ncoverage of the one-sided 95 % Wilson lower bound (share of windows with bound <= p):")
    for c in cover:
        print(f"  n={c['n']:>3}  p={c['p']:.2f}  {c['coverage']:.3f}")
    print("\nchance a full window's bound is below target (exact, binomial):")
    for a in below:
        print(
            f"  window {a['window']:>3}  target {a['target']:.2f}  true share {a['p']:.3f}: "
            f"{a['below']:.1%}"
        )


if __name__ == "__main__":
    asyncio.run(main())
