"""``python -m tiered_router.scoring.learned train ...``: retrain the learned scorer."""

from __future__ import annotations

if __name__ == "__main__":
    from tiered_router.scoring.learned._cli import main

    raise SystemExit(main())
