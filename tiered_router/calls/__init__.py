"""The calls wing: every reader (and the prompt protocol) of tool calls written as text.

Owns the formats' grammars (``_text`` shared pieces, ``_xml``, ``_python``), the tolerant reader
for prompted tools (``_prompted``) and the prompt protocol itself (``_protocol``). Pure: imports
only the root's shared helpers (``_json``, ``_limits``, ``turn``).
"""

from __future__ import annotations

__all__: list[str] = []
