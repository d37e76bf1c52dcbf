"""The calls wing: every reader (and the prompt protocol) of tool calls written as text.

Owns one grammar per format (``_json``, ``_python``, ``_xml``), the reader and its lifting rules
with the gate's strict entry point (``_text``), the tolerant entry point for prompted tools
(``_prompted``) and the prompt protocol itself (``_protocol``). Pure: imports only the root's
shared helpers (``_limits``, ``turn``).
"""

from __future__ import annotations

__all__: list[str] = []
