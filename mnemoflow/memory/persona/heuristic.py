"""The model-free persona: the spec's four layers filled with the user's own facts, in the user's language.

What a person who read the scenes would write first: where the user lives, what they do, who their family and pets
are, their health, what they like and avoid, what they do with their time and what they plan. Each scene item is
cut into sentences and each sentence sorted into one of those domains by the cue words people use for them
(:mod:`mnemoflow.memory.persona.facts`); a line quotes the user's own sentence, dated by the event day of its atom,
and links to its atoms with a hidden ``<!-- atom-id -->`` comment (drill-down persona → atom; the comment is not
shown in the prompt and does not count toward the 2,000 characters). Newest facts come first, so a changed job
reads before the old one.

Layers: (1) base & facts: home, work, family, pets, health, who they are; (2) interest graph: likes and hobbies,
active (said in the last 30 days) or dormant; (3) interaction protocol: the user's instructions, and what to avoid
(dislikes); (4) current arcs: plans and the latest event of the hottest scenes, by event day. The archetype line
names the user by the salient term of each domain's facts (their job, home, family, pets, pastimes).

Only the user's own words: an atom's folded question (``(answering Mel: ...)``), its subject prefix and its event
tag are taken off (:func:`~mnemoflow.memory.l1.subject.own_words`); what the assistant said is not the user's; the
user's own name and the names of whoever asked them (the other side of a conversation) name nothing here, and a
sentence that opens by addressing that person loses the address. It infers nothing. Deterministic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from mnemoflow.lexical import is_chinese
from mnemoflow.memory.l1.subject import AI_SUBJECT, is_answer, own_words, people, subject
from mnemoflow.memory.links import visible_len
from mnemoflow.memory.persona.facts import (
    Domain,
    cue_at,
    domain_of,
    of_self,
    says_something,
    sentences,
    to_other,
)
from mnemoflow.memory.persona.generate import MAX_PERSONA_CHARS, PersonaContext, PersonaDraft
from mnemoflow.memory.salience import terms
from mnemoflow.memory.scenes.model import SceneBlock
from mnemoflow.memory.scenes.text import parse_items

ACTIVE_DAYS = 30
PER_DOMAIN = 4
"""Lines per domain at most: the newest facts of each, so one busy domain cannot fill a layer."""
ARCHETYPE_TERMS = 5

_LABELS: dict[str, dict[str, str]] = {
    "en": {
        "title": "# User Narrative Profile",
        "archetype": "> Archetype: ",
        "base": "## 1. Base & facts",
        "interests": "## 2. Interest graph",
        "protocol": "## 3. Interaction protocol",
        "arcs": "## 4. Current arcs",
        "home": "Home",
        "work": "Work",
        "family": "Family",
        "pets": "Pets",
        "health": "Health",
        "identity": "Who",
        "likes": "Likes",
        "hobbies": "Pastimes",
        "dislikes": "Avoid",
        "plans": "Plan",
        "active": "active",
        "dormant": "dormant",
        "instruction": "Asked",
        "none": "nothing known yet",
        "note": "_Sorted from {scenes} scenes and {memories} memories by cue words; no inference._",
        "colon": ": ",
    },
    "zh": {
        "title": "# 用户画像",
        "archetype": "> 画像：",
        "base": "## 1. 基本信息",
        "interests": "## 2. 兴趣图谱",
        "protocol": "## 3. 交流方式",
        "arcs": "## 4. 近期动态",
        "home": "住处",
        "work": "工作",
        "family": "家人",
        "pets": "宠物",
        "health": "健康",
        "identity": "身份",
        "likes": "喜好",
        "hobbies": "爱好",
        "dislikes": "避免",
        "plans": "计划",
        "active": "活跃",
        "dormant": "沉寂",
        "instruction": "要求",
        "none": "暂无已知信息",
        "note": "_由 {scenes} 个场景、{memories} 条记忆按关键词整理，未作推断。_",
        "colon": "：",
    },
}
_BASE: tuple[Domain, ...] = ("identity", "home", "work", "family", "pets", "health")
_INTERESTS: tuple[Domain, ...] = ("likes", "hobbies")
_ARCHETYPE: tuple[Domain, ...] = ("work", "identity", "home", "family", "pets", "hobbies", "likes", "health")
_LAYER_SHARE = {"base": 0.4, "interests": 0.2, "protocol": 0.15, "arcs": 0.25}


@dataclass(frozen=True, slots=True)
class Fact:
    """One line's worth: a domain, the user's sentence(s), the event day and the atoms it came from."""

    domain: Domain | None
    text: str
    day: str
    ids: tuple[str, ...]
    scene: str


def _address(names: frozenset[str]) -> re.Pattern[str] | None:
    """A sentence opening by addressing one of ``names`` ("Mel, guess what", "王磊，好消息")."""
    if not names:
        return None
    alternatives = "|".join(sorted((re.escape(n) for n in names), key=len, reverse=True))
    return re.compile(rf"^(?:hey |hi |oh )?(?:{alternatives})\s*[,，!！:：]\s*", re.IGNORECASE)


def facts(scenes: list[SceneBlock], names: frozenset[str]) -> list[Fact]:
    """The user's own sentences of every scene item, one :class:`Fact` per item and domain, newest day first."""
    address = _address(names)
    out: list[Fact] = []
    for block in scenes:
        for item in parse_items(block.body):
            if subject(item.content) == AI_SUBJECT:
                continue  # what the assistant said is memory, not the user's trait
            by_domain: dict[Domain | None, list[str]] = {}
            answer = is_answer(item.content)
            among_people = subject(item.content) is not None
            for sentence in sentences(own_words(item.content)):
                if address is not None:
                    sentence = address.sub("", sentence)
                if not sentence or to_other(sentence) or not says_something(sentence):
                    continue
                if answer or of_self(sentence) or not among_people:
                    by_domain.setdefault(domain_of(sentence), []).append(sentence)
            kind: Domain | None
            for kind, said in by_domain.items():
                domain = "plans" if item.type == "instruction" and kind is None else kind
                out.append(Fact(domain, " ".join(said), item.day, (item.id,), block.filename))
    return sorted(out, key=lambda f: (f.day, f.ids), reverse=True)


class HeuristicPersonaEngine:
    """Implements :class:`~mnemoflow.memory.persona.generate.PersonaEngine` without a model."""

    name = "heuristic"
    every_n: int | None = 1

    async def write(self, ctx: PersonaContext) -> PersonaDraft:
        """Pure computation; ``async`` only to share the protocol with the model engine."""
        return PersonaDraft(self.render(ctx), self.name)

    def render(self, ctx: PersonaContext) -> str:
        scenes = ctx.scenes  # hottest first
        items = [i for b in scenes for i in parse_items(b.body)]
        names = people(i.content for i in items)
        found = facts(scenes, names)
        lang = "zh" if is_chinese([f.text for f in found] or [b.summary for b in scenes]) else "en"
        label = _LABELS[lang]
        instructions = {i.id for i in items if i.type == "instruction"}
        cutoff = ctx.now.date() - timedelta(days=ACTIVE_DAYS)

        def line(fact: Fact, tag: str) -> str:
            links = " ".join(f"<!-- {i} -->" for i in fact.ids)
            return f"- {tag} ({fact.day}){label['colon']}{fact.text} {links}"

        def of(domains: tuple[Domain, ...]) -> list[tuple[int, str]]:
            """Round-robin over ``domains``, newest first in each, so every domain gets its first line first; each
            line with its domain's rank, by which the lines that fit are shown grouped."""
            lists = [[f for f in found if f.domain == d][:PER_DOMAIN] for d in domains]
            out: list[tuple[int, str]] = []
            for rank in range(PER_DOMAIN):
                for order, (domain, listed) in enumerate(zip(domains, lists, strict=True)):
                    if rank < len(listed):
                        fact = listed[rank]
                        tag = label[domain]
                        if domain in _INTERESTS:
                            state = "active" if fact.day >= cutoff.isoformat() else "dormant"
                            tag = f"{tag}, {label[state]}" if lang == "en" else f"{tag}·{label[state]}"
                        out.append((order, line(fact, tag)))
            return out

        asked = [f for f in found if instructions & set(f.ids)]
        protocol = [line(f, label["instruction"]) for f in asked]
        protocol += [line(f, label["dislikes"]) for f in found if f.domain == "dislikes"][:PER_DOMAIN]
        quoted = {f.ids for f in found if f.domain is not None} | {f.ids for f in asked}
        # an instruction is said once, under the protocol: "from now on answer in bullet points" also reads as a plan
        arcs = [line(f, label["plans"]) for f in found if f.domain == "plans" and f not in asked][:PER_DOMAIN]
        latest = [
            f
            for f in (next((f for f in found if f.scene == b.filename and f.ids not in quoted), None) for b in scenes)
            if f is not None
        ][:PER_DOMAIN]  # the hottest scenes' latest events not quoted above
        arcs += [f"- [{f.day}] {f.text} " + " ".join(f"<!-- {i} -->" for i in f.ids) for f in latest]
        layers = {
            "base": of(_BASE),
            "interests": of(_INTERESTS),
            "protocol": [(0, text) for text in dict.fromkeys(protocol)],
            "arcs": [(0, text) for text in dict.fromkeys(arcs)],
        }
        head = f"{label['title']}\n{label['archetype']}{self.archetype(found, names) or label['none']}"
        note = label["note"].format(scenes=len(scenes), memories=ctx.total_memories)
        budget = MAX_PERSONA_CHARS - len(head) - len(note) - 8
        parts, spare = [head], 0
        for key, lines in layers.items():
            text, used = _fill(label[key], lines, int(budget * _LAYER_SHARE[key]) + spare)
            spare = int(budget * _LAYER_SHARE[key]) + spare - used
            if text:
                parts.append(text)
        return "\n\n".join([*parts, note])

    @staticmethod
    def archetype(found: list[Fact], names: frozenset[str]) -> str:
        """For each domain of :data:`_ARCHETYPE` with a fact, the user's term at or right after the cue of its
        newest fact ("work as a *nurse*", "我对*猫毛过敏*"): no word twice, no name of :func:`people`."""
        exclude = frozenset(n.lower() for n in names)
        chosen: list[str] = []
        for domain in _ARCHETYPE:
            fact = next((f for f in found if f.domain == domain), None)
            if fact is None:
                continue
            low, start = fact.text.lower(), cue_at(domain, fact.text)
            placed = [
                (pos, -len(t.key), t.text)
                for t in terms(fact.text)
                if not any(n in t.key for n in exclude) and (pos := low.find(t.key, start)) != -1
            ]
            for _, _, term in sorted(placed):
                if not any(term.lower() in c.lower() or c.lower() in term.lower() for c in chosen):
                    chosen.append(term)
                    break
        return " · ".join(chosen[:ARCHETYPE_TERMS])


def _fill(title: str, lines: list[tuple[int, str]], budget: int) -> tuple[str, int]:
    """``title`` and the lines that fit in ``budget`` visible characters (comments are free), taken in the order
    given and shown by their group (stable); the text and what it used."""
    kept, used = [], len(title)
    for group, text in lines:
        size = visible_len(text) + 1
        if used + size > budget:
            continue
        kept.append((group, text))
        used += size
    if not kept:
        return "", 0
    return "\n".join([title, *(text for _, text in sorted(kept, key=lambda k: k[0]))]), used
