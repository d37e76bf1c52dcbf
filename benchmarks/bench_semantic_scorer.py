"""A semantic scorer, leave-one-source-out: WordLlama static embeddings, kNN or ridge heads.

    pip install wordllama           # not a dependency of tiered_router: this is a trial
    cd /work/main && PYTHONPATH=. python benchmarks/bench_semantic_scorer.py [--json]
    cd /work/main && PYTHONPATH=. python benchmarks/bench_semantic_scorer.py --in-source

Issue 8 asked to try a small sentence-embedding model that ships inside a package from the
package index. ``wordllama`` (MIT) carries its 256-dimension ``l2_supercat`` weights
(16 MB) and tokenizer in the wheel and needs NumPy, ``tokenizers`` and ``safetensors``, not
PyTorch. Its 0.4.0.post1 wheel keeps the tokenizer under ``wordllama/tokenizers/`` while its
loader looks in ``wordllama/tokenizer/`` and then downloads; loading with the package folder
as ``cache_dir`` (which it searches as ``<cache_dir>/tokenizers/``) and
``disable_download=True`` reads both files from the wheel, with nothing written or fetched.

Protocol: the rows and pairs of ``bench_scorer_quality.py`` (``load_examples``); each
source held out in turn, the heads fitted on every other source:

- ``knn50`` / ``knn200``: mean gain (strong minus weak quality, centred per pair: a pair's
  mean gain is not a property of one request) of the k nearest training rows by cosine
  similarity of the focus text's embedding;
- ``ridge``: ridge regression (lambda 10) of the centred gain on the embedding and
  ``ln(1 + prompt characters)``;
- ``+transfer`` / ``+length``: the sum of the head's rank and the rank of the transfer
  scorer (fitted on the same other sources) or of prompt length, within the held-out pair.

``--in-source`` asks the question of ``bench_scorer_fit.py`` instead (a scorer fitted on a
source's own rows, as ``tiered-router fit-scorer`` does): per pair, the rows dealt into 5
folds (``fold_of``, seed 0), each scored by models fitted on the pair's other folds only:
``learned`` (``cross_validated_scores``), ``ridge`` (as above), their rank sum, and
``stack`` (ridge on the embedding, ``ln`` length and the learned out-of-fold score).

APGR per pair as in ``bench_scorer_quality.py`` (plain score-threshold router), and the mean
over the 10 pairs where it is defined. ``--latency`` also times one embedding of a focus
text (wall time, every 20th row, fastest of 5). Skips (exit 0, a message) without the data
or without ``wordllama``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from bench_scorer_quality import apgr_of, held_out_scores

from tiered_router.evaluation import find_data_dir
from tiered_router.scoring._transfer_fit import Example, load_examples
from tiered_router.scoring.features import focus_text


def _embedder() -> Any:
    import wordllama
    from wordllama import WordLlama

    # the wheel's own folder as the cache: its tokenizers/ and weights/ are found there
    return WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True)


def _rank(values: Any) -> Any:
    import numpy as np

    order = np.argsort(values, kind="stable")
    out = np.empty(len(values))
    out[order] = np.arange(len(values))
    return out / max(1, len(values) - 1)


def run(examples: list[Example], embed: Any) -> dict[str, dict[str, float]]:
    """APGR per held-out pair of every head and combination."""
    import numpy as np

    emb = np.asarray(embed([focus_text(e.turn) for e in examples], norm=True), dtype=np.float64)
    length = np.array([math.log1p(e.turn.prompt_chars) for e in examples])
    pairs = np.array([e.pair for e in examples])
    sources = np.array([e.source for e in examples])
    gain = np.array([e.strong - e.weak for e in examples])
    for pair in set(pairs):
        gain[pairs == pair] -= gain[pairs == pair].mean()
    transfer = held_out_scores(examples, groups=1, seed=0, use_learned=False)["transfer"]
    design = np.hstack([emb, length[:, None], np.ones((len(emb), 1))])

    def knn(train: Any, test: Any, k: int) -> Any:
        out = []
        for start in range(0, len(test), 512):
            sims = emb[test[start : start + 512]] @ emb[train].T
            top = np.argpartition(-sims, k, axis=1)[:, :k]
            out.append(gain[train][top].mean(axis=1))
        return np.concatenate(out)

    def ridge(train: Any, test: Any) -> Any:
        x = design[train]
        w = np.linalg.solve(x.T @ x + 10.0 * np.eye(x.shape[1]), x.T @ gain[train])
        return design[test] @ w

    results: dict[str, dict[str, float]] = {}
    for source in dict.fromkeys(sources.tolist()):
        train = np.where(sources != source)[0]
        test = np.where(sources == source)[0]
        heads = {"knn50": knn(train, test, 50), "knn200": knn(train, test, 200)}
        heads["ridge"] = ridge(train, test)
        for pair in dict.fromkeys(pairs[test].tolist()):
            mask = pairs[test] == pair
            rows = [examples[i] for i in test[mask]]
            weak, strong = [e.weak for e in rows], [e.strong for e in rows]
            base = {
                "transfer": np.array(transfer[pair]),
                "length": np.array([float(e.turn.prompt_chars) for e in rows]),
            }
            row = {name: apgr_of(list(s), weak, strong) for name, s in base.items()}
            for name, scores in heads.items():
                s = scores[mask]
                row[name] = apgr_of(list(s), weak, strong)
                for other, b in base.items():
                    row[f"{name}+{other}"] = apgr_of(list(_rank(s) + _rank(b)), weak, strong)
            results[pair] = row
    return results


def run_in_source(examples: list[Example], embed: Any) -> dict[str, dict[str, float]]:
    """APGR per pair of the learned and embedding heads fitted on the pair's other folds."""
    import numpy as np

    from tiered_router.evaluation.scorer_fit import cross_validated_scores, fold_of

    emb = np.asarray(embed([focus_text(e.turn) for e in examples], norm=True), dtype=np.float64)
    results: dict[str, dict[str, float]] = {}
    for pair in dict.fromkeys(e.pair for e in examples):
        idx = [i for i, e in enumerate(examples) if e.pair == pair]
        rows = [examples[i] for i in idx]
        weak, strong = [e.weak for e in rows], [e.strong for e in rows]
        fold = fold_of([f"{e.source}:{e.id}" for e in rows], folds=5, seed=0)
        learned = np.array(
            cross_validated_scores(
                [e.turn for e in rows], strong=strong, weak=weak, fold=fold, seed=0
            )
        )
        gain = np.array(strong) - np.array(weak)
        length = np.array([math.log1p(e.turn.prompt_chars) for e in rows])
        base = [emb[idx], length[:, None], np.ones((len(rows), 1))]
        designs = {"ridge": np.hstack(base), "stack": np.hstack([*base, learned[:, None]])}
        heads = {name: np.zeros(len(rows)) for name in designs}
        folds = np.array(fold)
        for k in range(5):
            train, test = folds != k, folds == k
            target = gain[train] - gain[train].mean()
            for name, x in designs.items():
                a = x[train]
                w = np.linalg.solve(a.T @ a + 10.0 * np.eye(a.shape[1]), a.T @ target)
                heads[name][test] = x[test] @ w
        scores = {
            "learned": learned,
            "ridge": heads["ridge"],
            "learned+ridge": _rank(learned) + _rank(heads["ridge"]),
            "stack": heads["stack"],
        }
        results[pair] = {name: apgr_of(list(s), weak, strong) for name, s in scores.items()}
    return results


def latency(examples: list[Example], embed: Any) -> dict[str, float]:
    """Wall time of one embedding, in microseconds: p50, p99 over every 20th row."""
    times = []
    for e in examples[::20]:
        text = focus_text(e.turn)
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            embed([text], norm=True)
            best = min(best, time.perf_counter() - t0)
        times.append(best * 1e6)
    times.sort()
    return {
        "n": len(times),
        "p50_us": times[len(times) // 2],
        "p99_us": times[int(0.99 * len(times))],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--latency", action="store_true")
    parser.add_argument("--in-source", action="store_true")
    opts = parser.parse_args(argv)
    data_dir = opts.data_dir or find_data_dir()
    if data_dir is None:
        print("skipped: no shared data folder (../shared/data)")
        return 0
    try:
        embed = _embedder().embed
    except ImportError:
        print("skipped: wordllama is not installed (pip install wordllama)")
        return 0
    examples = load_examples(Path(data_dir))
    if opts.latency:
        print(json.dumps(latency(examples, embed)))
        return 0
    results = run_in_source(examples, embed) if opts.in_source else run(examples, embed)
    names = list(next(iter(results.values())))
    key = names[0]
    defined = [r for r in results.values() if r[key] == r[key]]
    means = {n: sum(r[n] for r in defined) / len(defined) for n in names}
    if opts.json:
        print(json.dumps({"pairs": results, "mean": means}, indent=1))
        return 0
    title = "pair (folds of its own rows)" if opts.in_source else "held-out pair"
    print(f"| {title} | " + " | ".join(names) + " |")
    print("| --- " * (len(names) + 1) + "|")
    for pair, row in results.items():
        print(f"| {pair} | " + " | ".join(f"{row[n]:.3f}" for n in names) + " |")
    print(f"| mean of {len(defined)} | " + " | ".join(f"{means[n]:.3f}" for n in names) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
