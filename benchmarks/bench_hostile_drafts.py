"""The default gate and the prompted-tools reader on degenerate drafts: time against size.

    PYTHONPATH=. python benchmarks/bench_hostile_drafts.py [--sizes 25000,100000,400000]
        [--repeat 5]

A fast model can loop and write the same fragment thousands of times; a proxy can be sent
anything. Each draft here repeats one fragment (an unclosed ``<tool_call>``, ``<function=``,
``<invoke``, nested JSON, ...) up to the given size, and is run through the policy's default
gate (``QualityGate.evaluate``, which first reads calls written as text under the lifting
rules, and whose ``tool_call_in_text`` reads them again for the reason a refused one gives)
and through the prompted-tools dialect's tolerant entry point (``split_tool_calls``, with the
schema validation the dialect uses). Printed: milliseconds per draft at each size (the
median of ``--repeat`` runs), and the ratio of the largest size's time to the smallest's.
A reader whose cost is linear in the text grows by about the size ratio; one that rescans the rest
of the text from each fragment grows by its square (at stop 17, before the readers were
rewritten to read left to right once: 11.5 s for 120 KB of ``<function=a>``). A draft
that raises instead of returning a verdict is printed as ``RAISED``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

from tiered_router.calls._prompted import split_tool_calls
from tiered_router.gate import QualityGate
from tiered_router.gate._lifting import argument_problem
from tiered_router.policy import GateConfig
from tiered_router.turn import Completion, Turn

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}

FRAGMENTS = {
    "unclosed <tool_call>": "<tool_call>",
    "<tool_call> with JSON": '<tool_call>{"name": "get_weather", "arguments": ',
    "fenced <tool_call>": "```json\n<tool_call>",
    "unclosed <function=>": "<function=get_weather>",
    "<function=><parameter=>": "<function=get_weather><parameter=city>",
    "unclosed <invoke>": '<invoke name="get_weather">',
    "<arg_key> pairs": "<arg_key>city</arg_key>",
    "nested JSON": '{"a": [',
    "nested list": "[",
    "open call": "get_weather(city=",
    '"arguments": keys': '"arguments": {',
}


def _draft(fragment: str, size: int) -> str:
    return (fragment * (size // len(fragment) + 1))[:size]


def _time(fn: Callable[[], object], repeat: int) -> float | None:
    """The median of ``repeat`` runs (a shared machine's noise spoils single runs)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        try:
            fn()
        except Exception:  # noqa: BLE001 - a draft must never raise: reported, not hidden
            return None
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="25000,100000,400000", help="draft sizes in chars")
    parser.add_argument("--repeat", type=int, default=5, help="runs per cell (median shown)")
    opts = parser.parse_args(argv)
    sizes = [int(s) for s in opts.sizes.split(",")]
    gate = QualityGate(GateConfig().checks)
    turn = Turn([{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER])
    print(f"default gate: {', '.join(gate.names)}")
    print("| draft | reader | " + " | ".join(f"{s:,} chars" for s in sizes) + " | ratio |")
    print("| --- " * (len(sizes) + 3) + "|")
    for name, fragment in FRAGMENTS.items():
        for reader in ("gate", "split_tool_calls"):
            cells = []
            times = []
            for size in sizes:
                text = _draft(fragment, size)
                if reader == "gate":
                    took = _time(
                        lambda t=text: gate.evaluate(Completion(text=t), turn), opts.repeat
                    )
                else:
                    took = _time(
                        lambda t=text: split_tool_calls(t, [WEATHER], validate=argument_problem),
                        opts.repeat,
                    )
                times.append(took)
                cells.append("RAISED" if took is None else f"{took * 1000:.1f} ms")
            ok = [t for t in times if t is not None]
            ratio = f"{ok[-1] / ok[0]:.0f}x" if len(ok) == len(times) and ok[0] > 0 else "-"
            print(f"| {name} | {reader} | " + " | ".join(cells) + f" | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
