"""Draft panels on multi-sample reasoning data (MurongYue/LLM_MoT_cascade, ICLR 2024).

    python benchmarks/bench_mot.py --data PATH [--tune] [--json]

``PATH`` is a checkout of ``MurongYue/LLM_MoT_cascade`` at commit ``8db97e65`` (it has no
licence file: read it where it is, never copy its rows; only derived figures are printed).
Its result files hold, per question, many sampled answers of a cheap model under four prompts
(chain of thought ``cot1``/``cot2``, program of thought ``pot1``/``pot2``, the program's output
recorded as the answer) and three GPT-4 samples. Here a cheap model is the fast tier and GPT-4
(its ``cot1`` majority, as the paper escalates to) the strong one.

A panel of ``k`` drafts (:func:`tiered_router.panels.tally` over
:func:`tiered_router.panels.normalise_answer` of each draft's recorded answer) accepts the
majority answer when at least ``min_agreement`` of the ``k`` drafts give it, and escalates to
GPT-4 otherwise; a draft with no answer counts as failed. Drafts are taken in turn from the
prompts (``mixed``: cot1, pot1, cot2, pot2, then each prompt's next sample; MoT's finding) or
all from one prompt (``same``). ``MoT verify`` is the paper's own rule, replayed: the majority
of 7 CoT samples against the majority of 7 PoT samples, escalating when they differ.

Every row is compared with random escalation at the same rate (a single draft, the first of
the panel, escalated on a random share of questions; expected value), and, where the data has
prices (gpt-3.5-turbo and GPT-4, from the repository's ``Evaluation/utils.py`` lines 231-234,
tokens estimated as characters / 4, few-shot prompt included), at the same cost.

``--tune`` prints the grid over scheme and ``min_agreement`` for k = 2, 3, 5 on DATE with
gpt-3.5-turbo (the tuning set) and the choice per k (the least escalation that reaches
GPT-4's accuracy, else the best accuracy); without it, the tuned choice (``TUNED`` below) is
reported once on DATE (gpt-3.5, tuning set) and, untuned, on the Llama-2-13B files (GSM8K,
CREPE, DATE; only the files present in the checkout are read).

Skips (exit 0, a message) when ``--data`` is not given or holds no result files.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tiered_router.panels import AnswerKey, normalise_answer, tally

VARIANTS = ("cot1", "pot1", "cot2", "pot2")
MODELS = {"gpt-3.5-turbo": "GPT3_result", "llama-2-13b": "llama2_13B_result"}
TASKS = {"date": ("date", "date"), "gsm8k": ("gsm", "gsm8k"), "crepe": ("crepe", "crepe")}
# Evaluation/utils.py lines 231-234 of the repository: US$ per 1K tokens (input, output)
PRICES = {"gpt-3.5-turbo": (0.0015, 0.002), "gpt-4": (0.03, 0.06)}
AGREEMENTS = (0.5, 0.6, 0.67, 0.75, 0.8, 1.0)
KS = (2, 3, 5)
PAPER_SAMPLES = 7  # the paper's k = int((N - 0.75 M) / 2) with N = 20 samples, M = 8 examples

TUNED: dict[int, tuple[str, float]] = {2: ("mixed", 0.6), 3: ("mixed", 0.75), 5: ("mixed", 0.67)}
"""Per k, the scheme and min_agreement chosen by ``--tune`` on DATE with gpt-3.5-turbo."""


@dataclass
class Item:
    """One question: the gold answer, each prompt's drafts, and the strong model's verdict."""

    gold: str | None
    question_chars: int
    drafts: dict[str, list[tuple[str | None, int]]] = field(default_factory=dict)
    strong_correct: bool = False
    strong_cost: float = 0.0


@dataclass
class Task:
    """A (cheap model, task) pair read from the checkout."""

    model: str
    task: str
    items: list[Item]
    variants: tuple[str, ...]
    prompt_chars: dict[str, int]


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, list) else []


def _listed(value: Any) -> list[Any]:
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return []
    return list(value) if isinstance(value, (list, tuple)) else []


def _gold(answer: Any) -> str | None:
    if isinstance(answer, dict):  # the options, the right one marked 1
        right = [k for k, v in answer.items() if v == 1]
        return normalise_answer(str(right[0])) if right else None
    if isinstance(answer, str) and answer.startswith("{"):
        try:
            return _gold(ast.literal_eval(answer))
        except (ValueError, SyntaxError):
            return None
    return normalise_answer(str(answer)) if answer is not None else None


def _key(answer: Any) -> str | None:
    if answer is None or isinstance(answer, (list, dict)):
        return None
    return normalise_answer(str(answer))


def _precision(text: str) -> int:
    return len(text.split(".")[-1]) if "." in text else 5


def same_answer(a: str | None, b: str | None) -> bool:
    """Whether an answer matches the gold one (numbers to the lesser precision, as MoT's
    ``finqa_equal``; anything else as canonical text)."""
    if a is None or b is None:
        return False
    if a.startswith("number:") and b.startswith("number:"):
        (x, _, unit_x), (y, _, unit_y) = a[7:].partition(" "), b[7:].partition(" ")
        if unit_x != unit_y:  # 42 and 42 % (or 42 thousand) are different answers
            return False
        digits = min(_precision(x), _precision(y))
        return round(float(x), digits) == round(float(y), digits)
    return a == b


def _prompt_chars(root: Path, module: str) -> dict[str, int]:
    """Length of each few-shot prompt: the string constants of ``Evaluation/prompting``
    (read with ``ast``, never run)."""
    path = root / "Evaluation" / "prompting" / f"{module}.py"
    out: dict[str, int] = {}
    if not path.is_file():
        return out
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    name = target.id.lower()
                    for variant in VARIANTS:
                        if variant in name:
                            out[variant] = len(node.value.value)
    return out


def _cost(model: str, input_chars: int, output_chars: int) -> float:
    price = PRICES.get(model)
    if price is None:
        return math.nan
    return (input_chars / 4 * price[0] + output_chars / 4 * price[1]) / 1000


def load_task(root: Path, model: str, task: str) -> Task | None:
    """Read one cheap model's files for a task, aligned with GPT-4's by question text."""
    prefix, module = TASKS[task]
    folder = root / MODELS[model]
    prompts = _prompt_chars(root, module)
    strong_rows = {
        r.get("question"): r for r in _read(root / "GPT4_result" / f"{prefix}_cot1.json")
    }
    items: dict[str, Item] = {}
    variants = []
    for variant in VARIANTS:
        path = folder / f"{prefix}_{variant}.json"
        if not path.is_file():
            path = folder / f"{prefix}_{variant}_V2.json"
        if not path.is_file():
            continue
        variants.append(variant)
        for row in _read(path):
            question = row.get("question")
            strong = strong_rows.get(question)
            if not isinstance(question, str) or strong is None:
                continue
            item = items.get(question)
            if item is None:
                gold = _gold(row.get("answer"))
                strong_outputs = _listed(strong.get("generated"))
                item = Item(
                    gold=gold,
                    question_chars=len(question),
                    strong_correct=same_answer(_key(strong.get("prediction")), gold),
                    strong_cost=_cost(
                        "gpt-4",
                        prompts.get("cot1", 0) + len(question),
                        sum(len(str(g)) + 1 for g in strong_outputs),
                    ),
                )
                items[question] = item
            answers = _listed(row.get("results"))
            texts = _listed(row.get("generated"))
            item.drafts[variant] = [
                (_key(a), len(str(texts[j])) if j < len(texts) else 0)
                for j, a in enumerate(answers)
            ]
    if not variants or not items:
        return None
    kept = [i for i in items.values() if all(v in i.drafts for v in variants)]
    return Task(model, task, kept, tuple(variants), prompts)


@dataclass(frozen=True)
class Figures:
    """A router's totals over a task."""

    accuracy: float
    escalated: float
    cost: float
    random_same_rate: float
    random_same_cost: float


def _order(task: Task, scheme: str) -> tuple[str, ...]:
    if scheme == "same":
        return (task.variants[0],)
    return task.variants


def _draft(task: Task, item: Item, order: Sequence[str], i: int) -> tuple[str | None, float]:
    variant = order[i % len(order)]
    j = i // len(order)
    samples = item.drafts.get(variant, [])
    if j >= len(samples):
        return None, 0.0
    answer, out_chars = samples[j]
    cost = _cost(task.model, task.prompt_chars.get(variant, 0) + item.question_chars, out_chars)
    return answer, cost


def _totals(
    task: Task, decisions: list[tuple[bool, bool, float]], single: list[tuple[bool, float]]
) -> Figures:
    """``decisions``: per item (escalated, correct, fast cost); ``single``: the first draft's
    (correct, cost) for the random baselines."""
    n = len(decisions)
    rate = sum(e for e, _, _ in decisions) / n
    strong = [i.strong_correct for i in task.items]
    accuracy = sum(c for _, c, _ in decisions) / n
    cost = sum(c for _, _, c in decisions) + sum(
        i.strong_cost for i, (e, _, _) in zip(task.items, decisions, strict=True) if e
    )
    single_acc = sum(c for c, _ in single) / n
    strong_acc = sum(strong) / n
    same_rate = (1 - rate) * single_acc + rate * strong_acc
    strong_cost = sum(i.strong_cost for i in task.items)
    single_cost = sum(c for _, c in single)
    same_cost = math.nan
    if strong_cost > 0 and not math.isnan(cost):
        share = min(1.0, max(0.0, (cost - single_cost) / strong_cost))
        same_cost = (1 - share) * single_acc + share * strong_acc
    return Figures(accuracy, rate, cost, same_rate, same_cost)


def panel(task: Task, *, k: int, min_agreement: float, scheme: str) -> Figures:
    """Replay a panel of ``k`` drafts over the task."""
    order = _order(task, scheme)
    decisions: list[tuple[bool, bool, float]] = []
    single: list[tuple[bool, float]] = []
    for item in task.items:
        drafts = [_draft(task, item, order, i) for i in range(k)]
        keys = [None if a is None else AnswerKey(kind="final", value=a) for a, _ in drafts]
        failed = {i for i, key in enumerate(keys) if key is None}
        result = tally(keys, k=k, min_agreement=min_agreement, failed=failed)
        fast_cost = sum(c for _, c in drafts)
        if result.agreed and result.majority is not None:
            decisions.append((False, same_answer(result.majority.value, item.gold), fast_cost))
        else:
            decisions.append((True, item.strong_correct, fast_cost))
        single.append((same_answer(drafts[0][0], item.gold), drafts[0][1]))
    return _totals(task, decisions, single)


def mot_verify(task: Task, *, samples: int = PAPER_SAMPLES) -> Figures | None:
    """The paper's rule: the CoT majority of ``samples`` against the PoT majority."""
    if "cot1" not in task.variants or "pot1" not in task.variants:
        return None
    decisions: list[tuple[bool, bool, float]] = []
    single: list[tuple[bool, float]] = []
    for item in task.items:
        votes = {}
        cost = 0.0
        for variant in ("cot1", "pot1"):
            drafts = [_draft(task, item, (variant,), i) for i in range(samples)]
            cost += sum(c for _, c in drafts)
            counted = Counter(a for a, _ in drafts if a is not None)
            votes[variant] = counted.most_common(1)[0][0] if counted else None
        first = _draft(task, item, ("cot1",), 0)
        single.append((same_answer(first[0], item.gold), first[1]))
        cot, pot = votes["cot1"], votes["pot1"]
        if cot is not None and same_answer(cot, pot):
            decisions.append((False, same_answer(cot, item.gold), cost))
        else:
            decisions.append((True, item.strong_correct, cost))
    return _totals(task, decisions, single)


def _strong_accuracy(task: Task) -> float:
    return sum(i.strong_correct for i in task.items) / len(task.items)


def _single_accuracy(task: Task) -> float:
    order = _order(task, "mixed")
    return sum(same_answer(_draft(task, i, order, 0)[0], i.gold) for i in task.items) / len(
        task.items
    )


def tune(task: Task) -> tuple[list[dict[str, Any]], dict[int, tuple[str, float]]]:
    """The grid over scheme and min_agreement per k, and the choice per k."""
    strong = _strong_accuracy(task)
    grid = []
    choice: dict[int, tuple[str, float]] = {}
    for k in KS:
        best: tuple[tuple[float, float], tuple[str, float]] | None = None
        for scheme in ("mixed", "same"):
            for agreement in AGREEMENTS:
                f = panel(task, k=k, min_agreement=agreement, scheme=scheme)
                grid.append({"k": k, "scheme": scheme, "min_agreement": agreement, **f.__dict__})
                reaches = f.accuracy >= strong
                rank = (0.0, f.escalated) if reaches else (1.0, -f.accuracy)
                if best is None or rank < best[0]:
                    best = (rank, (scheme, agreement))
        assert best is not None
        choice[k] = best[1]
    return grid, choice


def _pct(v: float) -> str:
    return "n/a" if math.isnan(v) else f"{100 * v:.1f} %"


def _money(v: float) -> str:
    return "n/a" if math.isnan(v) else f"${v:.3f}"


def report(root: Path) -> list[dict[str, Any]]:
    """The tuned panels on DATE (gpt-3.5, the tuning set) and, untuned, on Llama-2-13B."""
    out = []
    runs = [("gpt-3.5-turbo", "date", "tuning set")] + [
        ("llama-2-13b", t, "held out, untuned") for t in ("gsm8k", "crepe", "date")
    ]
    for model, name, role in runs:
        task = load_task(root, model, name)
        if task is None:
            continue
        base = {
            "model": model,
            "task": name,
            "role": role,
            "n": len(task.items),
            "prompts": list(task.variants),
            "strong_accuracy": _strong_accuracy(task),
            "single_draft_accuracy": _single_accuracy(task),
        }
        verify = mot_verify(task)
        if verify is not None:
            out.append(
                {
                    **base,
                    "router": f"MoT verify ({PAPER_SAMPLES}+{PAPER_SAMPLES})",
                    **verify.__dict__,
                }
            )
        for k in KS:
            scheme, agreement = TUNED[k]
            if scheme == "mixed" and len(task.variants) == 1:
                scheme = "same"
            f = panel(task, k=k, min_agreement=agreement, scheme=scheme)
            label = f"panel k={k} ({scheme}, min_agreement {agreement:g})"
            out.append({**base, "router": label, **f.__dict__})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=None, help="LLM_MoT_cascade checkout")
    parser.add_argument("--tune", action="store_true", help="grid on DATE with gpt-3.5-turbo")
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args(argv)
    if opts.data is None or not (opts.data / "GPT4_result").is_dir():
        print("skipped: give --data PATH, a checkout of MurongYue/LLM_MoT_cascade@8db97e65")
        return 0
    if opts.tune:
        task = load_task(opts.data, "gpt-3.5-turbo", "date")
        if task is None:
            print("skipped: no gpt-3.5-turbo DATE files in the checkout")
            return 0
        grid, choice = tune(task)
        if opts.json:
            print(json.dumps({"grid": grid, "choice": choice}, indent=1))
            return 0
        print(
            f"tuning: DATE, gpt-3.5-turbo, {len(task.items)} questions; GPT-4 "
            f"{_pct(_strong_accuracy(task))}, one draft {_pct(_single_accuracy(task))}"
        )
        print("| k | scheme | min_agreement | accuracy | escalated | cost | random, same rate |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for g in grid:
            print(
                f"| {g['k']} | {g['scheme']} | {g['min_agreement']:g} | {_pct(g['accuracy'])} | "
                f"{_pct(g['escalated'])} | {_money(g['cost'])} | {_pct(g['random_same_rate'])} |"
            )
        print("chosen: " + ", ".join(f"k={k}: {s} {a:g}" for k, (s, a) in choice.items()))
        return 0
    records = report(opts.data)
    if not records:
        print("skipped: no result files found under --data")
        return 0
    if opts.json:
        print(json.dumps(records, indent=1))
        return 0
    print(
        "| model, task (role) | n | GPT-4 | one draft | router | accuracy | escalated | "
        "random, same rate | cost | random, same cost |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in records:
        print(
            f"| {r['model']}, {r['task']} ({r['role']}) | {r['n']} | "
            f"{_pct(r['strong_accuracy'])} | {_pct(r['single_draft_accuracy'])} | {r['router']} | "
            f"{_pct(r['accuracy'])} | {_pct(r['escalated'])} | {_pct(r['random_same_rate'])} | "
            f"{_money(r['cost'])} | {_pct(r['random_same_cost'])} |"
        )
    print(
        "prompts read per file: "
        + "; ".join(
            sorted({f"{r['model']} {r['task']}: {'+'.join(r['prompts'])}" for r in records})
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
