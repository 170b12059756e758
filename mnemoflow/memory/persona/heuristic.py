"""The model-free persona: the spec's four-layer scan filled from scene items by a template.

It infers nothing: each layer quotes what the scenes already say (persona atoms → base & facts, scene topics by
recency → interest graph, instruction atoms → interaction protocol, the latest event of each hot scene →
current arc, the user's own: not what the assistant answered). A scene's topic is its salient terms
(:mod:`mnemoflow.memory.salience`: people, places, phrases, distinctive against the user's other scenes),
recomputed from its items rather than read from its file name, which was fixed when the scene was created.
Arcs carry the event day of their item (when it happened, not when a pass ran). Hotter scenes come first, and
each layer gets a share of the 2,000 characters, so no single layer crowds out the others. Deterministic for
the same scenes and time.
"""

from __future__ import annotations

from datetime import timedelta

from mnemoflow.memory.l1.subject import AI_SUBJECT, subject
from mnemoflow.memory.persona.generate import MAX_PERSONA_CHARS, PersonaContext
from mnemoflow.memory.salience import salient_terms
from mnemoflow.memory.scenes.model import SceneBlock
from mnemoflow.memory.scenes.text import Item, parse_items

ACTIVE_DAYS = 30
_LAYER_BUDGET = (MAX_PERSONA_CHARS - 200) // 4


def _fill(title: str, lines: list[str], budget: int = _LAYER_BUDGET) -> str:
    out, used = [title], len(title)
    for line in dict.fromkeys(lines):
        if used + len(line) + 1 > budget:
            break
        out.append(line)
        used += len(line) + 1
    return "\n".join(out) if len(out) > 1 else ""


def _topics(scenes: list[SceneBlock], k: int = 3) -> dict[str, str]:
    """Each scene's salient terms against all the user's scenes; the file name's words when it has none."""
    texts = {b.filename: [i.content for i in parse_items(b.body)] or [b.summary] for b in scenes}
    background = [t for ts in texts.values() for t in ts]
    return {
        name: ", ".join(salient_terms(ts, background, k)) or name.removesuffix(".md").replace("-", " ")
        for name, ts in texts.items()
    }


def _archetype(topics: dict[str, str], k: int = 5) -> str:
    """Up to ``k`` terms of the scenes' topics (hottest first), no word twice: who and what the user is about."""
    terms: list[str] = []
    used: set[str] = set()
    for topic in topics.values():
        for term in topic.split(", "):
            if not used & set(term.lower().split()):
                terms.append(term)
                used |= set(term.lower().split())
    return " · ".join(terms[:k])


class HeuristicPersonaEngine:
    """Implements :class:`~mnemoflow.memory.persona.generate.PersonaEngine` without a model."""

    name = "heuristic"

    async def write(self, ctx: PersonaContext) -> str:
        """Pure computation; ``async`` only to share the protocol with the model engine."""
        return self.render(ctx)

    def render(self, ctx: PersonaContext) -> str:
        scenes = ctx.scenes  # hottest first
        items: list[tuple[SceneBlock, Item]] = [(b, i) for b in scenes for i in parse_items(b.body)]
        ordered = sorted(items, key=lambda bi: (-bi[0].heat, _neg(bi[1].day)))  # hot scenes, then newest items
        facts = [f"- {i.content}" for _, i in ordered if i.type == "persona"]
        prefs = [f"- {i.content}" for _, i in ordered if i.type == "instruction"]
        cutoff = ctx.now - timedelta(days=ACTIVE_DAYS)
        topics = _topics(scenes)
        interests = [
            f"- {'active' if b.updated and b.updated >= cutoff else 'dormant'}: {topics[b.filename]} (heat {b.heat})"
            for b in scenes
        ]
        arcs = []
        for b in scenes:
            # what the assistant told the user is memory, not the user's arc
            events = [i for i in parse_items(b.body) if i.type == "episodic" and subject(i.content) != AI_SUBJECT]
            if events:
                latest = max(events, key=lambda i: (i.day, i.id))
                arcs.append(f"- [{latest.day}] {topics[b.filename]}: {latest.content}")
            elif b.summary:
                arcs.append(f"- {b.summary}")
        archetype = _archetype(topics) or "no scenes yet"
        head = f"# User Narrative Profile\n> Archetype: {archetype}"
        layers = [
            _fill("## 1. Base & facts", facts),
            _fill("## 2. Interest graph", interests),
            _fill("## 3. Interaction protocol", prefs),
            _fill("## 4. Current arcs", arcs),
        ]
        note = f"_Templated from {len(scenes)} scenes and {ctx.total_memories} memories; no inference._"
        return "\n\n".join([head, *[layer for layer in layers if layer], note])[:MAX_PERSONA_CHARS]


def _neg(day: str) -> str:
    """Sort key that puts later ISO days first inside an ascending sort."""
    return "".join(chr(0x7F - ord(c)) for c in day)
