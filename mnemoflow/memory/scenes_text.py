"""The templated scene text of the heuristic engine, and reading it back.

Why re-parseable: the heuristic engine has no model to rewrite a scene, so an update re-renders the scene from
its items (old ones parsed back from the body, new atoms added). Each item is one line
``- [YYYY-MM-DD] content <!-- atom-id -->``: readable in any Markdown viewer (the comment is hidden), and the id
makes drill-down exact. Sections follow the spec template's headings that a template can honestly fill.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

from mnemoflow.lexical import has_unspaced
from mnemoflow.lexical import words as reader_words
from mnemoflow.memory.scenes_model import MAX_SCENE_CHARS

SECTIONS = (("persona", "## core traits"), ("instruction", "## preferences"), ("episodic", "## core narrative"))
_ITEM = re.compile(r"^- \[(\d{4}-\d{2}-\d{2})\] (.*) <!-- (\S+) -->$")
_WORD = re.compile(r"[^\W\d_]{3,}", re.UNICODE)
STOPWORDS = frozenset(
    "the and for are was were has have had with that this from they them their there what when where which who "
    "will would could should about into just also very really been being some more most much many than then "
    "she her him his hers our ours your yours you its it's not but all any can did does doing done get got "
    "going like know think want make made one two out how why too yes yeah well now new time lot things thing "
    "user users said says told today recently currently after before while during over other others each "
    # Conversational filler: replayed LoCoMo users got scenes named thanks-hard-means and hear-wow-awesome.
    "thanks thank hear wow awesome yea yeah yep nope hey glad sounds sound cool amazing great nice means mean "
    "hard definitely totally absolutely sure okay lol haha true agree feel feels felt guess maybe kinda pretty "
    "love loved lovely wonderful fantastic super happy excited sorry hope hopefully seems look looks looking "
    "event answering".split()
)
STOPWORDS_ZH = frozenset(
    "我们 你们 他们 她们 它们 自己 这个 那个 这些 那些 什么 怎么 为什么 因为 所以 但是 可是 而且 然后 还是 或者 "
    "已经 现在 今天 昨天 明天 时候 一下 一些 一个 一点 有点 非常 真的 觉得 知道 还有 没有 就是 不是 可以 应该 "
    "喜欢 希望 谢谢 最近 刚刚 一直 特别 比较 东西 事情 这样 那样 如果 虽然 其实 大家 我的 你的 他的 她的".split()
)


@dataclass(frozen=True, slots=True)
class Item:
    """One remembered line of a scene: the atom it came from, its type, day and text."""

    id: str
    type: str
    day: str
    content: str
    priority: int = 50


def parse_items(body: str) -> list[Item]:
    """Items of a templated body; lines of a model-written body that do not match are ignored."""
    kind = "episodic"
    items = []
    for line in body.splitlines():
        line = line.strip()
        for section_type, heading in SECTIONS:
            if line == heading:
                kind = section_type
        m = _ITEM.match(line)
        if m:
            items.append(Item(id=m.group(3), type=kind, day=m.group(1), content=m.group(2)))
    return items


def _line(item: Item) -> str:
    text = " ".join(item.content.replace("<!--", "").replace("-->", "").split())
    return f"- [{item.day}] {text} <!-- {item.id} -->"


def render_items(items: list[Item], limit: int = MAX_SCENE_CHARS) -> str:
    """Sections of items, chronological inside each; the lowest-priority, oldest items drop out past ``limit``.

    A dropped item stays in the scene's META ``atoms`` list and in L1, so drill-down still reaches it.
    """
    keep = list(dict.fromkeys(items))
    while True:
        parts = []
        for kind, heading in SECTIONS:
            lines = [_line(i) for i in sorted((i for i in keep if i.type == kind), key=lambda i: (i.day, i.id))]
            if lines:
                parts.append(heading + "\n" + "\n".join(lines))
        text = "\n\n".join(parts)
        if len(text) <= limit or len(keep) <= 1:
            return text[:limit]
        keep.remove(min(keep, key=lambda i: (i.priority, i.day, i.id)))


def words(text: str) -> list[str]:
    """Naming words: Latin-script words of three letters or more, Chinese words of two characters or more
    (jieba), neither a stopword."""
    out = [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS and not has_unspaced(w)]
    if has_unspaced(text):
        out += [w for w in reader_words(text) if len(w) >= 2 and has_unspaced(w) and w not in STOPWORDS_ZH]
    return out


def keywords(texts: list[str], background: list[str], k: int = 3) -> list[str]:
    """Top ``k`` words of ``texts`` by in-cluster frequency × inverse frequency over ``background`` (the user's
    other texts), so a word every memory shares (often the user's own name) does not name every scene."""
    df = Counter(w for t in background for w in set(words(t)))
    tf = Counter(w for t in texts for w in set(words(t)))
    n = max(1, len(background))
    ranked = sorted(tf, key=lambda w: (-tf[w] * math.log(1 + n / (1 + df[w])), w))
    return ranked[:k]
