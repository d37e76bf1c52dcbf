"""Coverage of calibrate's lower bound of the quality retained, simulated.

    PYTHONPATH=. python benchmarks/bench_bound_coverage.py [--reps 4000]

Paired 0/1 qualities: the frontier right with probability ``pf``; the fast answer right with
``a`` where the frontier is right and ``b`` where it is wrong; half the rows answered fast
(the others are the frontier's own answer). For each number of rows, the share of samples
whose bound is at or below the true ratio ``E[policy] / E[frontier]`` (nominal: 0.95), for
Fieller's bound alone and for the bound ``calibrate`` uses (Fieller's, and below 200 rows at
most the exact Clopper-Pearson one: tiered_router/evaluation/_bounds.py).
"""

from __future__ import annotations

import argparse
import random

from tiered_router.evaluation._bounds import _fieller, _Sums, _z, retained_low

CASES = ((0.95, 0.97, 0.3), (0.8, 0.9, 0.4), (0.6, 0.8, 0.3))


def coverage(n: int, pf: float, a: float, b: float, reps: int) -> tuple[float, float]:
    rng = random.Random(n * 1000 + round(pf * 100))
    truth = (0.5 * (pf * a + (1 - pf) * b) + 0.5 * pf) / pf
    z = _z(0.95)
    fieller = used = 0
    for _ in range(reps):
        s = fast = _Sums()
        for _ in range(n):
            front = float(rng.random() < pf)
            if rng.random() < 0.5:
                own = float(rng.random() < (a if front else b))
                s, fast = s.add(own, front), fast.add(own, front)
            else:
                s = s.add(front, front)
        fieller += _fieller(s, z, upper=False) <= truth + 1e-12
        used += retained_low(s, z, fast=fast) <= truth + 1e-12
    return fieller / reps, used / reps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=4000)
    args = ap.parse_args()
    print(f"coverage of the one-sided 95 % lower bound, {args.reps} samples each")
    print("| rows | pf, a, b | Fieller alone | calibrate's bound |")
    print("| --- | --- | --- | --- |")
    for n in (5, 20, 60, 150, 200, 500):
        for pf, a, b in CASES:
            f, u = coverage(n, pf, a, b, args.reps)
            print(f"| {n} | {pf}, {a}, {b} | {f:.3f} | {u:.3f} |")


if __name__ == "__main__":
    main()
