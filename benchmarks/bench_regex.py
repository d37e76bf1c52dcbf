"""The gate's ``regex`` check on a catastrophic pattern: RE2 (linear) against Python's ``re``.

    PYTHONPATH=. python benchmarks/bench_regex.py [--pattern '^(a+)+$']

Times one gate evaluation with the ``regex`` check (RE2) on drafts of ``a`` * n + ``b``, up
to 100,000 characters, and ``re.search`` with the same pattern on short drafts, where the
backtracking engine's time doubles with every added character. Prints milliseconds.
"""

from __future__ import annotations

import argparse
import re
import statistics
import time

from tiered_router.gate import QualityGate
from tiered_router.turn import Completion, Turn


def _best_of(run: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return min(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pattern", default="^(a+)+$")
    args = parser.parse_args()
    turn = Turn([{"role": "user", "content": "Answer."}])
    gate = QualityGate([("regex", {"pattern": args.pattern})])
    print(f"pattern {args.pattern!r} on 'a' * n + 'b' (best of 5, ms)")
    print("  gate regex check (RE2):")
    for n in (24, 1_000, 100_000):
        draft = Completion(text="a" * n + "b")
        ms = _best_of(lambda d=draft: gate.evaluate(d, turn), 5)  # type: ignore[misc]
        print(f"    n={n:>7,}: {ms:9.2f} ms")
    compiled = re.compile(args.pattern)
    print("  Python re.search (backtracking):")
    growth = []
    for n in (16, 18, 20, 22):
        text = "a" * n + "b"
        ms = _best_of(lambda t=text: compiled.search(t), 1 if n > 20 else 3)  # type: ignore[misc]
        growth.append(ms)
        print(f"    n={n:>7,}: {ms:9.2f} ms")
    ratios = [b / a for a, b in zip(growth, growth[1:], strict=False) if a > 0]
    if ratios:
        print(f"  re: x{statistics.median(ratios):.1f} per 2 more characters")


if __name__ == "__main__":
    main()
