"""What a persona line is about, read from how people state facts about themselves, in English and Chinese.

Why: a persona that quotes scene topics ("LGBTQ · pride parade · art") tells an agent what was talked about, not
who the user is. A person writing a profile sorts what they know into where someone lives, what they do, who their
family and pets are, their health, what they like, do and plan. Without a model those are read from the cue words
that people use when they say such things ("I moved to", "my daughter", "allergic to", 住在, 我女儿, 过敏,
打算): the patterns below are of the language, not of any evaluation set. A sentence can carry several; the first
domain whose cue comes first wins (a fact of the user's life before a plan or a taste), so "my mom's knee surgery"
is family news and "I work as a nurse at the hospital" is work. A sentence
spoken to the other person (:func:`to_other`: "You must be proud") is never the user's fact; in a conversation
between people (atoms that name their speaker) only a sentence in which the user speaks of themselves
(:func:`of_self`), or that answers a question put to them, is: "希望阿姨早日康复" is about the friend's mother.

What the patterns cannot see: facts stated without a cue ("Portland has been good to us" says nothing of living
there), irony and hypotheticals ("if I had a dog"), facts about other people said with the user's possessive but
not the user's own ("my friend's cat"), and a negation far from its verb. Those stay in the scenes, unsorted.

:func:`sentences` cuts a statement into the sentences a line may quote, so a persona line is the sentence that
holds the fact, not the greeting before it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from mnemoflow.memory.salience import content_words

Domain = Literal["health", "pets", "family", "home", "work", "plans", "dislikes", "likes", "hobbies", "identity"]


@dataclass(frozen=True, slots=True)
class Cue:
    domain: Domain
    en: re.Pattern[str]
    zh: re.Pattern[str]


def _en(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


DOMAINS: tuple[Cue, ...] = (
    Cue(
        "health",
        _en(
            r"\b(allerg\w*|injur\w*|sprain\w*|broke my|fractur\w*|surgery|operation|hospital\w*|doctor|diagnos\w*|"
            r"illness|disease|therapy|therapist|medication|recover\w*|asthma|diabet\w*|chronic|migraines?|"
            r"vegetarian|vegan|gluten|lactose|pregnan\w*)\b"
        ),
        re.compile(r"过敏|受伤|扭伤|骨折|手术|医院|医生|生病|康复|复查|体检|住院|吃药|失眠|吃素|素食|怀孕|哮喘|糖尿病"),
    ),
    Cue(
        "pets",
        _en(
            r"\b(cats?|dogs?|pupp(y|ies)|kittens?|pets?|parrots?|hamsters?|rabbits?|bunn(y|ies)|guinea pigs?|"
            r"turtles?)\b"
        ),
        re.compile(r"猫|狗|宠物|领养|鹦鹉|仓鼠|兔子|乌龟"),
    ),
    Cue(
        "family",
        _en(
            r"\b(my|our) (wife|husband|partner|spouse|girlfriend|boyfriend|fianc[ée]e?|kids?|children|child|sons?|"
            r"daughters?|bab(y|ies)|mom|mum|mother|dad|father|parents?|sisters?|brothers?|siblings?|grandma|grandpa|"
            r"grand\w+|aunt|uncle|cousins?|family|in-laws?)\b|\b(married|engaged|divorced)\b"
        ),
        re.compile(
            r"女儿|儿子|孩子|小孩|宝宝|妻子|老婆|太太|丈夫|老公|爸|妈|父亲|母亲|父母|爷爷|奶奶|外公|外婆|姥姥|姥爷|"
            r"哥哥|姐姐|弟弟|妹妹|家人|全家|结婚|订婚|离婚"
        ),
    ),
    Cue(
        "home",
        _en(
            r"\b(live[sd]? in|living in|mov(e|ed|ing) (to|from|into|out|back|here|there|house)|relocat\w+|"
            r"my (apartment|flat|house|home ?town|neighbou?rhood|city|landlord|rent)|\w+-bedroom|grew up|"
            r"originally from|i'?m from)\b"
        ),
        re.compile(r"住在|住的|搬|老家|家乡|来自|出生在|长大|定居|房子|租房|房租|公寓|小区"),
    ),
    Cue(
        "work",
        _en(
            r"\b(work(ing|ed)? (as|at|for|in)|my (job|boss|manager|team|colleagues?|co-?workers?|company|office|"
            r"career|clients?|students?|shift)|(new|first|old) job|promoted|promotion|hired|resign\w*|quit my|laid off|"
            r"intern(ship)?|employ\w+|startup|my business)\b"
        ),
        re.compile(r"工作|上班|公司|老板|同事|职位|升职|辞职|跳槽|入职|面试|实习|团队|项目|工程师|加班|创业|客户|出差"),
    ),
    Cue(
        "plans",
        _en(
            r"\b(plan(s|ning)? to|going to|gonna|hop(e|ing) to|want to|thinking (about|of)|consider\w*|"
            r"intend\w*|about to|next (week|month|year|summer|spring|fall|autumn|winter|weekend)|upcoming|"
            r"this (coming )?(summer|fall|winter|spring|weekend))\b"
        ),
        re.compile(r"打算|计划|准备|想要|将要|即将|下个?(周|星期|礼拜|月)|明年|下次|考虑|暑假|寒假|要去"),
    ),
    Cue(
        "dislikes",
        _en(
            r"\b(hate|dislike|can'?t stand|cannot stand|(don'?t|do not|never) (like|eat|drink|enjoy)|"
            r"not a fan|afraid of|scared of)\b"
        ),
        re.compile(r"讨厌|不喜欢|受不了|不吃|不喝|不太喝|不能吃|忌口|害怕"),
    ),
    Cue(
        "likes",
        _en(r"\b(i|we) (really |absolutely |just |also )?(like|love|enjoy|adore|prefer)\b|\bfav(ou?rite)\b|\bfan of\b"),
        re.compile(r"喜欢|热爱|最爱|偏爱|享受|迷上|爱吃|爱喝|爱看"),
    ),
    Cue(
        "hobbies",
        _en(
            r"\b(hobb(y|ies)|every (day|morning|evening|night|week|weekend)|usually|on weekends|in my (free|spare) "
            r"time|practic\w+|learn(ing|ed|t)? (to|how)|took up|taking (a )?(class|classes|lessons)|"
            r"started (learning|taking|playing|running|painting|writing|baking)|i (play|paint|draw|hike|swim|"
            r"bake|knit|garden|volunteer|surf|climb|cycle|dance|sing)\w*|(hiking|running|painting|pottery|"
            r"photography|yoga|baking|camping|gardening|guitar|piano|chess|fishing|cycling|swimming|reading))\b"
        ),
        re.compile(
            r"爱好|兴趣|每天|每周|每个周末|平时|习惯|学做|开始学|在学|练习|报了|徒步|跑步|游泳|烘焙|画画|弹(吉他|钢琴|琴)|唱歌|"
            r"跳舞|摄影|钓鱼|瑜伽|健身|看书|读书|做饭|下棋|露营|骑行|滑雪|爬山"
        ),
    ),
    Cue(
        "identity",
        _en(r"\b(i'?m|i am) (a|an) \w+|\b\d{1,2} years old\b|\bmy name is\b|\bi identify\b"),
        re.compile(r"我是|我叫|我姓|岁了"),
    ),
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|(?<=[。！？；;])\s*")
_FILLER = re.compile(
    r"^(hi|hey|hello|thanks|thank you|wow|yeah|yes|no|oh|ok(ay)?|sure|cool|great|awesome|haha|lol)\b[\s,!.]*$|"
    r"^(你好|嗨|哈哈+|是的|是啊|好的|嗯+|哇|谢谢|恭喜|太好了|还不错|不错)[！!。，,~～\s]*$",
    re.IGNORECASE,
)


_OPENER = re.compile(
    r"^((oh|well|yeah|yes|yep|so|anyway|by the way|btw|haha|lol)\b[\s,，]+"
    r"|(对了|是啊|是的|嗯+|哈哈+|其实|不过)[，,\s]+)",
    re.IGNORECASE,
)


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` that say something: a bare greeting or cheer is left out, an opening "oh," or
    "对了，" taken off."""
    out = []
    for sentence in _SENTENCE.split(text.strip()):
        sentence = _OPENER.sub("", sentence.strip())
        if sentence and not _FILLER.match(sentence):
            out.append(sentence)
    return out


_SELF = re.compile(r"\b(i|i'm|i've|i'd|i'll|my|mine|myself|we|we're|we've|our|ours|us)\b", re.IGNORECASE)
_SELF_ZH = re.compile(r"(?<![诉给帮让教醒问])(我|咱)")
"""The speaker speaking of themselves; not the "me" of 告诉我 or 给我, which every request says."""


def of_self(text: str) -> bool:
    """Whether ``text`` speaks of its speaker (I, my, we; 我, 我们): "手术会顺利的" to a friend is about the friend."""
    return bool(_SELF.search(text) or _SELF_ZH.search(text))


_YOU = re.compile(r"\b(you|your|yours|yourself)\b|你|您", re.IGNORECASE)


def to_other(text: str) -> bool:
    """Whether ``text`` speaks to the other person ("You must be proud", "I hope you're okay", "你一定很骄傲"): what
    is said to someone is about them, or about both, not a fact of the speaker's own."""
    return bool(_YOU.search(text))


def says_something(text: str) -> bool:
    """At least two content words: "I love it!" and "我也是" name nothing a profile could keep."""
    return len(content_words(text)) >= 2


_BASE_DOMAINS = frozenset({"health", "pets", "family", "home", "work", "identity"})


def _first(cue: Cue, text: str) -> int | None:
    found = [m.start() for m in (cue.en.search(text), cue.zh.search(text)) if m]
    return min(found) if found else None


_CONDITION = re.compile(
    r"\b(allerg\w*|injur\w*|sprain\w*|fractur\w*|surgery|diagnos\w*|asthma|diabet\w*)\b|过敏|受伤|扭伤|骨折|手术|哮喘|糖尿病",
    re.IGNORECASE,
)
"""A condition outranks wherever it is said: "我对猫毛过敏" is health, though the cat comes first."""


def cue_at(domain: Domain, text: str) -> int:
    """Where ``domain``'s cue starts in ``text`` (0 when it has none): the archetype reads the user's term there."""
    cue = next(c for c in DOMAINS if c.domain == domain)
    return _first(cue, text) or 0


def domain_of(text: str) -> Domain | None:
    """The domain whose cue comes first in ``text`` ("I work as a nurse at the hospital" is work, "我妈妈的手术" is
    family), a fact about the user's life (home, work, family, pets, health, who they are) before a plan or a
    taste; ties go to the earlier of :data:`DOMAINS`. None when no cue is there."""
    if _CONDITION.search(text):
        return "health"
    hits = [
        (cue.domain not in _BASE_DOMAINS, pos, k, cue.domain)
        for k, cue in enumerate(DOMAINS)
        if (pos := _first(cue, text)) is not None
    ]
    return min(hits)[3] if hits else None
