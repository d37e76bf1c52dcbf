"""Offline evaluation: replay a policy over recorded model outcomes, sweep and calibrate.

```python
from tiered_router import load_policy
from tiered_router.evaluation import evaluate, load_data

result = evaluate(load_policy("policy.yaml"), load_data("sample"))
result.summary.quality_retained, result.summary.cost_saved, result.summary.apgr
```

The dataset format is in :mod:`~tiered_router.evaluation.dataset`, the data names in
:mod:`~tiered_router.evaluation.sources`, the metric definitions in
:mod:`~tiered_router.evaluation.metrics`; ``tiered-router eval``, ``calibrate`` and ``fit-scorer``
are the command-line face of this package.

Wing (docs/architecture.md): owns replay, datasets, calibration and reports; may import the
router and every wing below it. Its data readers (``replay``, ``sources``) are also read by
``backends`` (the replay backend) and ``scoring`` (fitting), and never reach the router.
"""

from __future__ import annotations

from tiered_router.evaluation.calibration import Target, calibrate_policy, write_threshold
from tiered_router.evaluation.dataset import (
    Dataset,
    DatasetError,
    EvalRow,
    Outcome,
    read_dataset,
    write_dataset,
)
from tiered_router.evaluation.metrics import GateConfusion, apgr, cpt, pgr
from tiered_router.evaluation.replay import (
    ReplayBackend,
    SimulatedClock,
    replay_backend_factory,
    simulated_latency,
)
from tiered_router.evaluation.report import render_html
from tiered_router.evaluation.results import EvalResult, Summary, evaluate
from tiered_router.evaluation.scorer_fit import ScorerFitReport, fit_scorer
from tiered_router.evaluation.sources import (
    bundled_policy_path,
    find_data_dir,
    load_data,
    load_sample,
)
from tiered_router.evaluation.sweep import CalibrationError, SweepPoint, calibrate, sweep

__all__ = [
    "CalibrationError",
    "Dataset",
    "DatasetError",
    "EvalResult",
    "EvalRow",
    "GateConfusion",
    "Outcome",
    "ReplayBackend",
    "ScorerFitReport",
    "SimulatedClock",
    "Summary",
    "SweepPoint",
    "Target",
    "apgr",
    "bundled_policy_path",
    "calibrate",
    "calibrate_policy",
    "cpt",
    "evaluate",
    "find_data_dir",
    "fit_scorer",
    "load_data",
    "load_sample",
    "pgr",
    "read_dataset",
    "render_html",
    "replay_backend_factory",
    "simulated_latency",
    "sweep",
    "write_dataset",
    "write_threshold",
]
