"""Salient terms of memory text: what a model-free scene or persona is named and summarised by.

Why: naming a scene by its most frequent words gave ``thanks-hard-means`` and ``every-always-answer``: in chat,
the frequent words are filler. A person reads a scene by who, where and what: people, places, organisations,
projects, activities. Without a tagger, those are approximated by

* **names**: runs of capitalised words that do not open a sentence (``Porto``, ``New York``, ``LGBTQ``), kept
  with their case;
* **phrases**: two adjacent content words ending in a noun (``oat milk``, ``support group``, ``mental health``);
* **content words**: any other word that is not on the stop lists below (English: function words, frequency
  adverbs, conversational filler, the most common verbs; Chinese: jieba words that are function words or filler)
  and is a noun: jieba's tags in Chinese, lemminflect's lexicon in English (a scene named
  ``authentically-courage-expressing`` told a reader nothing).

Terms are then ranked by tf-idf: in how many of the scene's texts a term occurs, times how rare it is among the
user's other texts, so a word every memory shares (often the user's own name) names no scene. Names weigh more
than phrases, phrases more than single words. Chinese is cut by :func:`mnemoflow.lexical.words` (jieba), the same
segmentation search uses. Pure and deterministic.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

from mnemoflow.lexical import has_unspaced, tagged_words
from mnemoflow.lexical import words as reader_words

STOPWORDS = frozenset(
    # Function words and pronouns.
    "the and for are was were has have had with that this from they them their there what when where which who "
    "whom whose will would could should shall might must about into onto upon just also very really been being "
    "some more most much many than then she her him his hers our ours your yours you its it's not but all any "
    "can did does doing done out how why too yes well now here off own same such only both either neither nor "
    "because since until unless though although whether via per within without across around among between "
    "myself yourself himself herself itself ourselves themselves someone something anything everything nothing "
    "anyone everyone nobody somebody everybody another other others each every "
    # Frequency and degree adverbs, time words that name no topic.
    "always never often usually sometimes rarely ever still already again almost quite rather even lately soon "
    "today tonight yesterday tomorrow recently currently after before while during over once twice week weeks "
    "month months year years day days time times morning evening night weekend weekends lot lots bit "
    "monday tuesday wednesday thursday friday saturday sunday january february march april may june july august "
    "september october november december "
    # Conversational filler: replayed LoCoMo users got scenes named thanks-hard-means and hear-wow-awesome.
    "thanks thank hear wow awesome yea yeah yep nope hey glad sounds sound cool amazing great nice means mean "
    "hard definitely totally absolutely sure okay lol haha true agree feel feels felt guess maybe kinda pretty "
    "love loved lovely wonderful fantastic super happy excited sorry hope hopefully seems look looks looking "
    "please good best better bad kind sort stuff thing things way ways new old big small little lot "
    "important perfect special different real whole full favorite favourite main able "
    # The commonest verbs (a verb rarely names what a scene is about) and reporting verbs of stored facts.
    "get got gets getting go goes going went gone make makes made making take takes took taking taken come comes "
    "came coming give gives gave given keep keeps kept know knows knew think thinks thought want wants wanted "
    "like likes liked say says said tell tells told ask asks asked answer answers answered use uses used using "
    "try tries tried trying find finds found need needs needed let lets put puts seem seemed "
    "live lives lived living work works worked do doing drink drinks eat eats ate start started starts plan "
    "plans planned planning share shares shared sharing mention mentions mentioned talk talks talked talking "
    "enjoy enjoys enjoyed decide decided feel felt become became remember remembers include includes "
    "bring brings brought join joins joined run runs ran help helps helped helping including include includes "
    "hold holds held name named attend attends attended attending "
    "through finding getting giving taking making ago user users one two three first last next event answering".split()
)
STOPWORDS_ZH = frozenset(
    "我们 你们 他们 她们 它们 自己 这个 那个 这些 那些 什么 怎么 为什么 因为 所以 但是 可是 而且 然后 还是 或者 "
    "已经 现在 今天 昨天 明天 时候 一下 一些 一个 一点 有点 非常 真的 觉得 知道 还有 没有 就是 不是 可以 应该 "
    "喜欢 希望 谢谢 最近 刚刚 一直 特别 比较 东西 事情 这样 那样 如果 虽然 其实 大家 我的 你的 他的 她的 "
    "总是 每天 每次 经常 常常 有时 从来 永远 请 回答 一定 可能 需要 真是 好的 太好了 哈哈 嗯嗯 是的 不错 "
    "周末 早上 晚上 上午 下午 每个 这里 那里 时间 一样 还是 开始 告诉 说过 用户".split()
)
_COUNTING_ZH = frozenset("一二两三四五六七八九十几每这那某")
"""A Chinese word opening with a numeral or demonstrative (一只, 这家, 每天) counts or points; it names nothing."""
_SENTENCE = re.compile(r"[.!?;:()\[\]\n。！？；：（）]+")
_NAME_WEIGHT, _PHRASE_WEIGHT = 2.0, 1.5


@dataclass(frozen=True, slots=True)
class Term:
    """One candidate: ``key`` (case-folded, for counting) and ``text`` (as a reader sees it)."""

    key: str
    text: str
    weight: float


def is_content(word: str) -> bool:
    """A word that can name something: Latin-script words of three letters or more, Chinese words of two
    characters or more, not a stop word, not a number."""
    if has_unspaced(word):
        return len(word) >= 2 and word not in STOPWORDS_ZH and word[0] not in _COUNTING_ZH
    return len(word) >= 3 and not any(c.isdigit() for c in word) and word.lower() not in STOPWORDS


def content_words(text: str) -> list[str]:
    """The case-folded content words of ``text``, in order (repeats kept)."""
    return [w.lower() for w in reader_words(text) if is_content(w)]


def published_stopwords() -> frozenset[str]:
    """The stopwords-iso lists of English and Chinese (a published list, kept as data by its package): a name may
    hold none of them, whatever our own lists miss."""
    global _PUBLISHED
    if _PUBLISHED is None:
        import stopwordsiso

        _PUBLISHED = frozenset(w.lower() for w in stopwordsiso.stopwords(["en", "zh"]))
    return _PUBLISHED


_PUBLISHED: frozenset[str] | None = None
_NOUN_TAGS = frozenset("n nr nrt nrfg ns nt nz nw ng vn an j eng".split())
"""jieba's tags of words that can name something: nouns, names, places, organisations, nominal verbs and
adjectives (工作, 健康), abbreviations."""
_NAME_TAGS = frozenset("nr nrt nrfg ns nt".split())


_CONTRACTED = frozenset("gonna wanna gotta sorta dunno lemme gimme".split())
"""Spoken contractions: no stop list holds them and the lexicon does not know them, so they would pass as names."""


def _english_noun(word: str, *, modifier: bool = False) -> bool:
    """A word the English lexicon knows as a noun, or does not know at all (a name, an acronym: ``lgbtq``):
    ``courage``, ``pottery``, ``trips`` name a topic; ``authentically``, ``believes``, ``involving`` do not. As the
    ``modifier`` of a phrase, an adjective also reads (``mental health``); an ``-ing`` form the lexicon knows only
    as a verb does not: it reads as a verb and its object (``bringing joy``, ``exploring options``), at the cost
    of ``camping trips``."""
    from lemminflect import getAllLemmas

    lemmas = getAllLemmas(word.lower())
    if not lemmas or "NOUN" in lemmas or "PROPN" in lemmas:
        return True
    return modifier and "ADJ" in lemmas


def _nameable(word: str, tag: str | None) -> bool:
    """A content word that is no published stop word and, in Chinese, a noun of some kind."""
    if not is_content(word) or word.lower() in published_stopwords() or word.lower() in _CONTRACTED:
        return False
    return tag is None or tag in _NOUN_TAGS


def terms(text: str) -> list[Term]:
    """Candidate names in ``text``: capitalised name runs, two-word phrases and other content words; in Chinese,
    nouns (names and places weigh as names) and runs of adjacent nouns as one phrase (新能源汽车, 电池工程师)."""
    out: list[Term] = []
    for sentence in _SENTENCE.split(text):
        tokens = tagged_words(sentence)
        run: list[str] = []
        nouns: list[str] = []
        prev: str | None = None
        for i, (tok, tag) in enumerate([*tokens, ("", None)]):
            unspaced = has_unspaced(tok)
            if unspaced and _nameable(tok, tag):
                weight = _NAME_WEIGHT if tag in _NAME_TAGS else 1.0
                out.append(Term(tok, tok, weight))
                nouns.append(tok)
                continue
            phrase = "".join(nouns[-3:])
            if len(nouns) > 1 and len(phrase) <= 8 and _nameable(phrase, None):
                out.append(Term(phrase, phrase, _PHRASE_WEIGHT))
            nouns = []
            name = i > 0 and tok[:1].isupper() and not unspaced and _nameable(tok, None)
            if name:
                run.append(tok)
                prev = None
                continue
            if run:
                out.append(Term(" ".join(run).lower(), " ".join(run), _NAME_WEIGHT))
                run = []
            if not tok or unspaced or not _nameable(tok, None):
                prev = None
                continue
            low = tok.lower()
            noun = _english_noun(low)
            if noun:
                out.append(Term(low, low, 1.0))
            if noun and prev is not None and _english_noun(prev, modifier=True) and not {prev[-2:], low[-2:]} & {"ed"}:
                out.append(Term(f"{prev} {low}", f"{prev} {low}", _PHRASE_WEIGHT))
            prev = None if i == 0 else low  # a capitalised opener is often a name
    return out


def _excluded(key: str, exclude: frozenset[str]) -> bool:
    """Whether the term ``key`` is or holds one of the excluded names (case-folded), is part of a Chinese one, or
    shortens one (Mel for Melanie)."""
    return any(
        name in key or (key in name and has_unspaced(key)) or (len(key) >= 3 and name.startswith(key))
        for name in exclude
    )


def salient_terms(
    texts: list[str],
    background: list[str],
    k: int = 3,
    *,
    distinctive: bool = True,
    exclude: frozenset[str] = frozenset(),
) -> list[str]:
    """The ``k`` terms that best name ``texts`` against ``background`` (the user's texts), as a reader sees them.

    Score: texts holding the term × log(1 + N / (1 + background texts holding it)) × weight (name, phrase, word).
    With ``distinctive``, a term in more than half of a background of four texts or more is left out: that is
    the user's own name or constant theme, which tells no scene from another. A word inside a chosen phrase or name,
    or a phrase holding a chosen word, is not chosen again. ``exclude``: case-folded names that never name anything
    here (the user's own name, the other side of a conversation), nor a term holding one.
    """
    df = Counter(key for t in background for key in {term.key for term in terms(t)})
    tf: Counter[str] = Counter()
    best: dict[str, Term] = {}
    for text in texts:
        for term in {t.key: t for t in terms(text)}.values():
            tf[term.key] += 1
            if term.key not in best or term.weight > best[term.key].weight:
                best[term.key] = term
    n = max(1, len(background))
    common = {key for key, count in df.items() if distinctive and n >= 4 and count > n / 2}
    score = {
        key: tf[key] * math.log(1 + n / (1 + df[key])) * best[key].weight
        for key in tf.keys() - common
        if not _excluded(key, exclude)
    }
    ranked = sorted(score, key=lambda key: (-score[key], key))
    chosen: list[Term] = []
    for key in ranked:
        parts = set(key.split())
        if any(parts & set(c.key.split()) or (has_unspaced(key) and (key in c.key or c.key in key)) for c in chosen):
            continue
        chosen.append(best[key])
        if len(chosen) == k:
            break
    return [c.text for c in chosen]
