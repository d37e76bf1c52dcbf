"""``python -m tiered_router.cli``: run the command line."""

from __future__ import annotations

from tiered_router.cli import main

main()
