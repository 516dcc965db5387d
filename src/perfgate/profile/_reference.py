"""The profile key reference (Markdown), generated from the key declarations in ``_model.py``."""

from __future__ import annotations

from perfgate._docs import GeneratedSection
from perfgate.profile._keys import key_docs
from perfgate.profile._model import CorrectnessSpec, ExplainSpec, GateSpec, ServerSpec, TelemetrySpec, Workload

# docs/profiles.md holds the generated reference between this section's marker lines.
SECTION = GeneratedSection("profile key reference", "python -m perfgate.profile --reference", "docs/profiles.md")

_TABLES = (
    ("[server]", ServerSpec),
    ("[telemetry]", TelemetrySpec),
    ("[gate]", GateSpec),
    ("[[workload]]", Workload),
    ("[correctness]", CorrectnessSpec),
    ("[explain]", ExplainSpec),
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def reference_markdown() -> str:
    """One Markdown table per profile table: key, type, default, allowed values, description."""
    parts = []
    for title, spec in _TABLES:
        lines = [f"#### `{title}`", "", "| key | type | default | allowed | description |", "|---|---|---|---|---|"]
        for k in key_docs(spec):
            cells = [f"`{k.name}`", k.type, k.default, k.allowed or "any", k.doc]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"
