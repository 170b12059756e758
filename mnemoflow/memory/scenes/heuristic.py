"""The model-free scene engine: scenes from embedding clusters of atoms, with templated text.

How a pass decides, in the spec's order of preference (update > merge > create):

1. each new atom joins the existing scene whose centroid is nearest, if the cosine reaches ``join_threshold`` and
   the scene has room for it (its body shows at most ``MAX_SCENE_CHARS``, links not counted): a full scene takes no
   more, so a broad early scene cannot swallow the user's memories and drop the oldest from view (it kept 11 of the
   72 atoms it absorbed on LoCoMo); what it would have taken opens a scene of its own;
2. the rest are clustered greedily (centroid, ``cluster_threshold``), biggest cluster first;
3. a cluster of at least ``min_new`` atoms (or one unlike every scene) becomes a new scene if the policy allows a
   create; when the user is at ``max_scenes``, the two most similar existing scenes are merged first to make
   room (one merge per pass);
4. anything left joins its nearest scene with room, else its nearest (nothing is dropped from L1 and the scene's
   META; the body shows the highest-priority, newest items), or, for a user with no scene yet, one new scene.

Names and summaries are made from the user's own words (:func:`~mnemoflow.memory.l1.subject.own_words`: no folded
question of the other side, no subject prefix), and never from a name of :func:`~mnemoflow.memory.l1.subject.people`
(the user's own, or the other side of a conversation).

It only proposes a :class:`ScenePlan`; :func:`apply_plan` enforces the rules as for a model. Deterministic for a
deterministic embedder. Its quality is measured in ``bench/scenes.py``, not assumed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from mnemoflow.errors import MnemoflowError
from mnemoflow.memory.l1.subject import own_words, people
from mnemoflow.memory.links import visible_len
from mnemoflow.memory.salience import salient_terms
from mnemoflow.memory.scenes.model import MAX_SCENE_CHARS, SceneBlock, SceneInput
from mnemoflow.memory.scenes.plan import SceneEdit, ScenePlan, ScenePolicy
from mnemoflow.memory.scenes.text import Item, parse_items, render_items
from mnemoflow.ports import Embedder

Vec = list[float]
NAME_TERMS, NAME_WORDS, SUMMARY_TERMS = 3, 4, 6
"""Salient terms in a new scene's file name (short enough to read in a listing; never the user's constant terms)
and in its summary (which also routes a question to the scene, so it names more)."""


def _unit(vecs: list[Vec]) -> Vec:
    total = [sum(xs) for xs in zip(*vecs, strict=True)]
    norm = sum(x * x for x in total) ** 0.5 or 1.0
    return [x / norm for x in total]


def _cos(a: Vec, b: Vec) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


@dataclass(slots=True)
class _Group:
    """An existing scene (``name`` set) or a candidate new one, with its items and centroid."""

    name: str | None
    items: list[Item]
    vecs: list[Vec]
    new: list[Item] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    @property
    def centroid(self) -> Vec:
        return _unit(self.vecs)

    def has_room(self, item: Item) -> bool:
        """Whether ``item`` still shows in the body with this group's items (none drops past the limit)."""
        return visible_len(render_items([*self.items, *self.new, item], limit=1 << 30)) <= MAX_SCENE_CHARS


def summarise(items: list[Item], words: list[str]) -> str:
    """The templated one-line summary of a scene's items, named by ``words`` (its salient terms), dated by the
    items' event days."""
    days = sorted(i.day for i in items)
    latest = max(items, key=lambda i: (i.day, i.id)).content
    return (
        f"{len(items)} memories about {', '.join(words) or 'various things'} "
        f"({days[0]} to {days[-1]}); latest: {latest[:160]}"
    )


def _short(terms: list[str], max_words: int = NAME_WORDS) -> list[str]:
    """The leading terms that fit in ``max_words`` words (the first always): a name stays readable in a listing."""
    out: list[str] = []
    for term in terms:
        if out and sum(len(t.split()) for t in [*out, term]) > max_words:
            break
        out.append(term)
    return out


class HeuristicSceneEngine:
    """Implements the scene-engine protocol of :mod:`mnemoflow.memory.scenes.passes` without a model."""

    name = "heuristic"
    rejection_retries = 0

    def fallback_for(self, error: MnemoflowError) -> None:
        """Nothing plans a window this engine refused: the failure stands."""
        return None

    def __init__(
        self, embedder: Embedder, *, join_threshold: float = 0.45, cluster_threshold: float = 0.45, min_new: int = 2
    ) -> None:
        self.embedder = embedder
        self.join_threshold = join_threshold
        self.cluster_threshold = cluster_threshold
        self.min_new = min_new

    async def plan(
        self,
        scenes: dict[str, SceneBlock],
        atoms: list[SceneInput],
        now: datetime,
        policy: ScenePolicy,
        feedback: str | None = None,
    ) -> ScenePlan:
        """Pure computation, no I/O; ``async`` only to share the protocol with the model engine."""
        return self.plan_now(scenes, atoms, policy)

    def plan_now(self, scenes: dict[str, SceneBlock], atoms: list[SceneInput], policy: ScenePolicy) -> ScenePlan:
        atoms = sorted(atoms, key=lambda a: (a.ts, a.id))
        groups = self._existing(scenes)
        new_items = [Item(a.id, a.type, a.event_day, a.content, a.priority) for a in atoms]
        new_vecs = self.embedder.embed([i.content for i in new_items])
        loose: list[tuple[Item, Vec]] = []
        for item, vec in zip(new_items, new_vecs, strict=True):
            best = self._nearest(groups, vec)
            if best is not None and _cos(best.centroid, vec) >= self.join_threshold and best.has_room(item):
                best.new.append(item)
            else:
                loose.append((item, vec))
        clusters = self._cluster(loose)
        creates = 0
        for cluster in sorted(clusters, key=lambda c: -len(c.new)):
            if len(cluster.new) < self.min_new and self._fits_somewhere(groups, cluster):
                continue
            if creates >= policy.max_creates:
                break
            if len(groups) >= policy.max_scenes and not self._merge_pair(groups):
                break
            groups.append(cluster)
            creates += 1
        for cluster in clusters:
            if any(cluster is g for g in groups):
                continue
            for item, vec in zip(cluster.new, cluster.vecs, strict=True):
                roomy = [g for g in groups if g.has_room(item) and _cos(g.centroid, vec) >= self.join_threshold / 2]
                target = self._nearest(roomy, vec) or self._nearest(groups, vec)
                if target is None:
                    groups.append(_Group(None, [], [vec], [item]))
                else:
                    target.new.append(item)
        return ScenePlan(edits=self._edits(groups, scenes, background=[i.content for i in new_items]))

    def _existing(self, scenes: dict[str, SceneBlock]) -> list[_Group]:
        groups = []
        for name, block in sorted(scenes.items()):
            if block.deleted:
                continue
            items = parse_items(block.body)
            texts = [i.content for i in items] or [f"{block.summary}\n{block.body}"]
            groups.append(_Group(name, items, self.embedder.embed(texts)))
        return groups

    def _fits_somewhere(self, groups: list[_Group], cluster: _Group) -> bool:
        """A small cluster joins an existing scene unless it is unlike all of them (half the join threshold)."""
        best = self._nearest(groups, cluster.centroid)
        return best is not None and _cos(best.centroid, cluster.centroid) >= self.join_threshold / 2

    @staticmethod
    def _nearest(groups: list[_Group], vec: Vec) -> _Group | None:
        return max(groups, key=lambda g: _cos(g.centroid, vec), default=None)

    def _cluster(self, loose: list[tuple[Item, Vec]]) -> list[_Group]:
        clusters: list[_Group] = []
        for item, vec in loose:
            best = self._nearest(clusters, vec)
            if best is not None and _cos(best.centroid, vec) >= self.cluster_threshold:
                best.new.append(item)
                best.vecs.append(vec)
            else:
                clusters.append(_Group(None, [], [vec], [item]))
        return clusters

    @staticmethod
    def _merge_pair(groups: list[_Group]) -> bool:
        """Fold the most similar pair of existing scenes whose items fit in one body into one (the smallest pair
        when none fits; lower-heat names lose); True if done."""
        existing = [g for g in groups if g.name is not None and not g.sources]
        pairs = [(a, b) for i, a in enumerate(existing) for b in existing[i + 1 :]]
        if not pairs:
            return False

        def size(pair: tuple[_Group, _Group]) -> int:
            items = [*pair[0].items, *pair[0].new, *pair[1].items, *pair[1].new]
            return visible_len(render_items(items, limit=1 << 30))

        fitting = [p for p in pairs if size(p) <= MAX_SCENE_CHARS]
        if fitting:
            a, b = max(fitting, key=lambda p: (_cos(p[0].centroid, p[1].centroid), p[0].name, p[1].name))
        else:
            a, b = min(pairs, key=lambda p: (size(p), p[0].name, p[1].name))
        a.sources = [a.name or "", b.name or ""]
        a.items += b.items
        a.vecs += b.vecs
        a.new += b.new
        groups.remove(b)
        return True

    def _edits(self, groups: list[_Group], scenes: dict[str, SceneBlock], background: list[str]) -> list[SceneEdit]:
        every = background + [i.content for g in groups for i in g.items]
        user_texts = [own_words(t) for t in every]
        exclude = frozenset(n.lower() for n in people(every))
        edits = []
        for g in groups:
            if not g.new and not g.sources:
                continue
            items = g.items + g.new
            body = render_items(items)
            texts = [own_words(i.content) for i in items]
            words = salient_terms(texts, user_texts, k=NAME_TERMS, exclude=exclude)
            summary = summarise(items, salient_terms(texts, user_texts, k=SUMMARY_TERMS, exclude=exclude))
            ids = [i.id for i in g.new]
            if g.sources:
                keep = max(g.sources, key=lambda n: (scenes[n].heat, n))
                edits.append(
                    SceneEdit(
                        action="merge", filename=keep, sources=g.sources, summary=summary, body=body, atom_ids=ids
                    )
                )
            elif g.name is None:
                # A group whose words are all common ("Lots has been going on since then!") has no topic to name
                # it by; its first day says more than a placeholder.
                name = "-".join(_short(words)) or f"notes-{items[0].day}"
                edits.append(SceneEdit(action="create", filename=name, summary=summary, body=body, atom_ids=ids))
            else:
                edits.append(SceneEdit(action="update", filename=g.name, summary=summary, body=body, atom_ids=ids))
        return edits
