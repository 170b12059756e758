"""Rendering recall for the prompt (docs/tdam-spec.md §4.1): memory lines, budgets, and the two injection blocks.

Pure functions. ``prepend_context`` goes before the user turn; ``system_context`` (persona, scene navigation,
tool guide) is appended to the system prompt, which keeps the prompt cache stable. Tool names in the guide
are parameters, so the guide names the tools the host really exposes (the original hard-codes them, docs/tdam-spec.md
§9.1).
"""

from __future__ import annotations

from dataclasses import dataclass

from mnemoflow.ports.vectors import AtomRow

HEADER = "Recalled memories about the user, for reference only; they are not the current task state."
MIN_PARTIAL = 40


@dataclass(frozen=True, slots=True)
class ToolNames:
    memory: str = "memory_search"
    conversation: str = "conversation_search"
    scene: str = "read_scene"
    skill: str = "skill_read"
    skill_search: str = "skill_search"
    calls_per_turn: int = 3


_SCOPE_MARK = {"team": ", team", "agent": ", private"}


def memory_line(row: AtomRow, max_chars: int, tools: ToolNames = ToolNames()) -> str:
    """``- [type] content (YYYY-MM-DD)``: the date is when the fact was said (the original shows write time). A
    memory that is not shared with every agent of the user says so (``[instruction, private]``, ``[persona, team]``),
    so the agent knows it is its own or its team's (docs/concepts/scopes.md)."""
    when = row.created.date().isoformat()
    text = " ".join(row.text.split())
    mark = _SCOPE_MARK.get(row.scope.split(":", 1)[0], "")
    line = f"- [{row.type}{mark}] {text} ({when})"
    if len(line) > max_chars:
        suffix = f"… (more: {tools.memory})"
        line = line[: max(0, max_chars - len(suffix))] + suffix
    return line


def fit(lines: list[str], budget: int) -> list[str]:
    """Keep lines while they fit ``budget`` (newlines counted); a line is cut only if ≥ 40 chars remain."""
    out: list[str] = []
    used = 0
    for line in lines:
        cost = len(line) + (1 if out else 0)
        if used + cost <= budget:
            out.append(line)
            used += cost
            continue
        room = budget - used - (1 if out else 0)
        if room >= MIN_PARTIAL:
            out.append(line[: room - 1] + "…")
        break
    return out


def prepend_context(lines: list[str]) -> str:
    if not lines:
        return ""
    return "<relevant-memories>\n" + HEADER + "\n\n" + "\n".join(lines) + "\n</relevant-memories>"


def tools_guide(tools: ToolNames) -> str:
    return (
        f"When the injected memories are not enough, call {tools.memory} for structured memories "
        f"(preferences, events, rules), {tools.conversation} for the original wording and timelines, and "
        f"{tools.scene} on a navigation entry for a whole scene. These tools share a budget of "
        f"{tools.calls_per_turn} calls per turn; after that, answer from what you know."
    )


def system_context(persona: str, navigation: str, tools: ToolNames, anything_else: bool, skills: str = "") -> str:
    """Persona, navigation, the skills index and — whenever anything is injected — the tool guide, joined by blank
    lines."""
    parts = []
    if persona:
        parts.append(f"<user-persona>\n{persona}\n</user-persona>")
    if navigation:
        parts.append(f"<scene-navigation>\n{navigation}\n</scene-navigation>")
    if skills:
        parts.append(f"<skills-index>\n{skills}\n</skills-index>")
    if parts or anything_else:
        guide = tools_guide(tools) + (
            f" Before a task that a skill's name fits, call {tools.skill} with its name for its steps and pitfalls"
            f" ({tools.skill_search} finds skills the index does not list)."
            if skills
            else ""
        )
        parts.append(f"<memory-tools-guide>\n{guide}\n</memory-tools-guide>")
    return "\n\n".join(parts)


def clip(text: str, budget: int) -> str:
    """Cut ``text`` to ``budget`` characters at a line end when possible."""
    if len(text) <= budget:
        return text
    cut = text[:budget]
    nl = cut.rfind("\n")
    return (cut[:nl] if nl >= budget // 2 else cut[: budget - 1]) + "…"
