"""The ``heuristic`` engine for L1: deterministic, model-free extraction and dedup decisions (docs/DESIGN.md §6).

Why it exists: mnemoflow must work with no model configured, and tests need a stage that is reproducible.
What it does, plainly: every substantive user statement becomes one atom (questions, greetings and very short
acknowledgements are dropped); a short answer carries the question it answers as context; the type comes from
keyword patterns. "Short" is fewer than ``MIN_WORDS`` words, but a short statement that names something and is
tied to its speaker stays (:func:`says_in_few_words`: "I'm vegan.", 我家狗叫豆豆, 下周去成都, an answer such as
"Mostly spicy food."): a fact stated in passing is an atom with its own words as its key (issue 29: held-out
Chinese dialogues lost pets, plans and preferences to the word count). A greeting or wish sentence is dropped on
its own, so the fact beside it stays ("Thanks! I'm allergic to nuts.").

A message of questions only becomes an atom, whole, when the user speaks of themselves in it ("... keep my living
room dust-free with a cat that sheds a lot?"): on LongMemEval's preference questions that request is the evidence,
and nothing else said it. The questions of a message that also states something are searched with its atom (its
context): "What else can I do in the evening? I prefer winding down by 9:30." is found by a question about the
evening. Dedup decisions compare word sets. Its quality is measured in ``bench/locomo_recall.py``.

Chinese and English, and a mix of both in one message: sentences end at ``.!?`` followed by a space or at
``。！？；`` (Chinese puts no space after them); questions end in ``?``/``？`` or, unpunctuated, in 吗/呢;
words are counted with :func:`mnemoflow.lexical.word_count` (jieba words for Chinese, so 我喜欢徒步 is three
words, not one); greetings, persona and instruction cues have a Chinese pattern beside the English one.

Context: a statement is searched together with the two turns before it in its session, whoever said them
(``AtomDraft.context``, not shown), so that "Yes, twice, it was great!" is found by the words of the question it
answered and of what that question was about. On LoCoMo's raw turns (e5, hybrid recall@10) no context gave 0.672,
the turn before 0.727, the two turns before 0.770 (the turn after as well: 0.771, but an atom is extracted before
the next turn exists). A short answer to a question keeps that question in its text instead, where a reader needs
it, and the turn before the question as context. Each context turn is cut to ``CONTEXT_CHARS``.

The assistant's answers: what the AI told the user is memory too ("remind me the name of that restaurant you
recommended": LongMemEval's single-session-assistant questions; the spec allows memories with the AI as subject,
not about its own behaviour). An unnamed assistant message that answers a user's question or request becomes one
episodic atom ``Assistant: ...`` (its statements, cut to ``MAX_CONTENT``), searched with the request as context,
at ``ASSISTANT_PRIORITY``, below the user's own statements, so a pass over its limit drops these first. A named
assistant message is another person in a conversation (each LoCoMo speaker has a memory of their own): their
statements belong to their memory, not to this user's, and are only context here.

Subject: when the message carries the speaker's ``name`` the atom starts with it (``Caroline: I went ...``), so a
question that names the person finds the fact by BM25 and by embedding (on LoCoMo, prefixing the speaker raised
dense recall@10 over raw turns from 0.378 to 0.565, issue 14). Time: a relative expression (yesterday, 上个月,
下周六) is resolved against the message's time and appended (``(event: 2023-05-07)``,
:mod:`mnemoflow.memory.l1.event_time`).
"""

from __future__ import annotations

import re
from datetime import datetime

from mnemoflow.lexical import has_unspaced, tagged_words, terms, word_count
from mnemoflow.memory.l0 import L0Message
from mnemoflow.memory.l1.dedup import JudgeItem
from mnemoflow.memory.l1.event_time import resolve, span, tag
from mnemoflow.memory.l1.extract import validate_drafts
from mnemoflow.memory.l1.models import AtomDraft, DedupDecision
from mnemoflow.memory.l1.subject import AI_SUBJECT, fold
from mnemoflow.memory.l1.window import Window
from mnemoflow.memory.salience import content_words
from mnemoflow.ports.vectors import AtomType

_SENTENCE = re.compile(r"(?<=[.!?])\s+|(?<=[。！？；])\s*")
_QUESTION_END = re.compile(r"([?？]|[吗呢][\s。.…~～]*)$")
_GREETING = re.compile(
    r"^(hi|hey|hello|thanks|thank you|bye|good (morning|night|evening|luck)|ok(ay)?|cool|great|wow|lol|"
    r"take care|see you|happy \w*day|congrat\w*|cheers|(you|me) too|same here)\b",
    re.IGNORECASE,
)
# No \b in the Chinese patterns: between two Han characters there is no word boundary.
_GREETING_ZH = re.compile(
    r"^(你好|您好|嗨|哈喽|谢谢|多谢|感谢|再见|拜拜|早上好|早安|晚上好|晚安|好的|好吧|嗯+|哈哈+|"
    r"没问题|收到|太好了|太棒了|真棒|好棒|厉害|加油|恭喜|祝你|一路顺风|生日快乐|保重|回头见|改天见)"
)
_INSTRUCTION = re.compile(
    r"\b(from now on|always (reply|answer|respond|use|write)|never (reply|answer|use|call|say)|"
    r"(reply|answer|respond|write) (in|with|using))\b",
    re.IGNORECASE,
)
_INSTRUCTION_ZH = re.compile(
    r"(从现在(开始|起)|从今以后|以后|今后).{0,20}(回答|回复|答复|用|写|说|叫我|称呼)|"
    r"(总是|始终|一直|永远|每次都)(用|以).{0,12}(回答|回复|写|说)|"
    r"(请|要)?(用|以)(中文|英文|英语|汉语|日语|简体|繁体).{0,6}(回答|回复|答复|写|交流)|"
    r"(回答|回复|写).{0,6}(不要|别|不许)|(不要|别|不许)再?(叫我|称呼我|给我发|回复)"
)
_PERSONA = re.compile(
    r"\b(i|i'm|i am|my|me)\b.{0,60}\b(like|love|prefer|enjoy|hate|dislike|favou?rite|allergic|"
    r"vegetarian|vegan|passionate|identify|believe|value|am a|work as|live in|grew up)\b",
    re.IGNORECASE,
)
_PERSONA_ZH = re.compile(
    r"我(很|非常|特别|最|真|也|还|一直|从小|比较)?(喜欢|爱|热爱|讨厌|不喜欢|偏爱|享受|擅长|害怕|"
    r"信|对.{0,10}过敏|过敏|吃素|是|住在|来自|出生|长大|叫|姓|在.{0,12}(工作|上班|上学|读书|当))|"
    r"我的(女儿|儿子|妻子|丈夫|老婆|老公|孩子|爸爸|妈妈|父亲|母亲|家人|猫|狗|名字|爱好|工作|职业)"
)
# A message that asks: a question anywhere in it, a question or an order without its mark ("What 5 bottles should
# I buy", "Write a packing list"), or a request in its words.
_REQUEST = re.compile(
    r"[?？]|^\W*(what|which|how|where|who|whose|when|why|should|shall|can|could|would|will|is|are|do|does|did|"
    r"write|explain|describe|give|list|tell|show|find|suggest|recommend|create|make|plan|compare|summari[sz]e|"
    r"translate|provide|generate|name)\b|\b(can|could|would|will) you\b|\b(please|recommend|suggest|remind|"
    r"tell me|give me|show me|help me|i need|i'?m looking for|looking for)\b|"
    r"请|推荐|建议|帮我|告诉我|给我|提醒|能不能|什么|哪|怎么|如何|为什么|多少|[吗呢]",
    re.IGNORECASE,
)
# The user speaking of themselves; "me" is left out, as every request says it ("tell me", "give me").
_SELF = re.compile(r"\b(i|i'm|i've|i'd|i'll|my|mine|myself|we|we're|we've|our|ours)\b", re.IGNORECASE)
_SELF_ZH = re.compile(r"(?<![诉给帮让教醒问])我")  # not the "me" of 告诉我, 给我, 帮我, 提醒我
_NOUN_TAGS_ZH = frozenset("n ns nt nz nw ng vn t".split())
"""jieba's tags of Chinese words that name a thing, a place or a time (names, ``nr``, are left out: jieba tags
exclamations such as 太棒了 as names)."""
ASSISTANT_PRIORITY = 50
MIN_WORDS = 4
PHATIC_WORDS = 8
"""A greeting opener followed by fewer words than this, none of them about the speaker, is only phatic."""
SHORT_ANSWER_WORDS = 12
CONTEXT_CHARS = 200
CONTEXT_TURNS = 2
MAX_CONTENT = 1000


def classify(text: str) -> tuple[AtomType, int]:
    """Type and priority from patterns: instructions 90, persona statements 65, everything else episodic 60."""
    if _INSTRUCTION.search(text) or _INSTRUCTION_ZH.search(text):
        return "instruction", 90
    if _PERSONA.search(text) or _PERSONA_ZH.search(text):
        return "persona", 65
    return "episodic", 60


def statement(text: str, *, answers: bool = False, said_at: datetime | None = None) -> str:
    """The non-question sentences of a message; empty when it is only questions or a greeting, or short and
    says nothing of its speaker (:func:`says_in_few_words`)."""
    kept = [
        s.strip()
        for s in _SENTENCE.split(text.strip())
        if s.strip() and not _QUESTION_END.search(s.strip()) and not _phatic(s.strip(), answers, said_at)
    ]
    out = " ".join(kept).strip()
    if word_count(out) < MIN_WORDS and not says_in_few_words(out, answers=answers, said_at=said_at):
        return ""
    return out


def _phatic(sentence: str, answers: bool, said_at: datetime | None) -> bool:
    """A greeting, thanks or wish that says nothing of its speaker ("Thanks!", "Wow, that's so cool to hear",
    "Good luck with the interview tomorrow!", "谢谢你，太好了"); a statement after the opener still counts
    ("Thanks! I'm allergic to nuts." splits into two sentences; "Wow, I ran my first marathon" speaks of its
    speaker), as does a long one."""
    opener = _GREETING.match(sentence) or _GREETING_ZH.match(sentence)
    if not opener:
        return False
    rest = sentence[opener.end() :].lstrip(" ,，!！~～、.。…")
    return word_count(rest) < PHATIC_WORDS and not (_names_something(rest) and _speaks_of_self(rest))


def _names_something(text: str) -> bool:
    """A content word in English, a noun, place or time in Chinese (猫, 辣, 成都; not 真不错, which jieba calls an
    idiom), or a persona or instruction cue."""
    if classify(text)[0] != "episodic":
        return True
    if any(not has_unspaced(w) for w in content_words(text)):
        return True
    return any(tag in _NOUN_TAGS_ZH for w, tag in tagged_words(text) if has_unspaced(w))


def _speaks_of_self(text: str) -> bool:
    return bool(_SELF.search(text) or _SELF_ZH.search(text))


def says_in_few_words(text: str, *, answers: bool, said_at: datetime | None) -> bool:
    """A statement under ``MIN_WORDS`` words that is still a fact about its speaker: it names something
    (:func:`_names_something`) and is tied to the speaker — it answers a question put to them ("Mostly spicy
    food.", "喜欢辣的"), speaks of them ("I'm vegan.", "我家狗叫豆豆"), or dates a plan (下周去成都: Chinese drops
    the subject). "Sounds good!", "真不错", "Yes!" name nothing and stay out; a short answer is stored with its
    question folded in, where it reads."""
    if not _names_something(text):
        return False
    if answers or _speaks_of_self(text):
        return True
    return said_at is not None and resolve(text, said_at) is not None


def questions(text: str) -> str:
    """The question sentences of a message (what :func:`statement` leaves out), cut to ``CONTEXT_CHARS``."""
    asked = [s.strip() for s in _SENTENCE.split(text.strip()) if s.strip() and _QUESTION_END.search(s.strip())]
    return " ".join(asked)[:CONTEXT_CHARS]


def about_the_user(text: str) -> str:
    """A message of questions only that says something about the user ("How do I keep my living room dust-free
    with a cat that sheds?"): the whole message, else empty. A bare question ("Can you recommend a trail?",
    "Could you tell me what you did?") says nothing about them."""
    out = " ".join(text.split())
    if word_count(out) < MIN_WORDS or not (_SELF.search(out) or _SELF_ZH.search(out)):
        return ""
    return out


def search_context(before: list[L0Message], session: str, n: int = CONTEXT_TURNS) -> str:
    """The last ``n`` turns of ``before`` in ``session``, oldest first, each named and cut to ``CONTEXT_CHARS``.

    Searched with the atom, never shown (``AtomDraft.context``)."""
    turns: list[str] = []
    for m in reversed(before):
        if m.session != session or len(turns) >= n:
            break
        turns.append((f"{m.name}: " if m.name else "") + m.content.strip()[:CONTEXT_CHARS])
    return "\n".join(reversed(turns))


class HeuristicExtractor:
    """One atom per substantive user statement, one per answer of the (unnamed) assistant to a request; no model
    call."""

    uses_llm = False

    async def extract(self, user: str, window: Window, previous_scene: str) -> list[AtomDraft]:
        context = [*window.background, *window.new]
        drafts = []
        for i, msg in enumerate(context):
            if msg.id not in window.new_ids:
                continue
            if msg.role == "assistant":
                answer = _answer(context, i, previous_scene)
                drafts += [answer] if answer else []
                continue
            if msg.role != "user":
                continue
            prev = context[i - 1] if i > 0 else None
            answers = prev is not None and prev.role != "user" and ("?" in prev.content or "？" in prev.content)
            text = statement(msg.content, answers=answers, said_at=msg.ts)
            asks = questions(msg.content)
            if not text and (text := about_the_user(msg.content)):
                asks = ""  # the request is the atom's text, not its context
            if not text:
                continue
            when = resolve(text, msg.ts)
            folded = answers and prev is not None and word_count(text) < SHORT_ANSWER_WORDS
            if folded and prev is not None:
                text = fold(text, prev.name, prev.content.strip()[:CONTEXT_CHARS])
            skip = 1 if folded else 0  # a question folded into the text is one of the turns
            follows = "\n".join(
                filter(None, [search_context(context[: i - skip], msg.session, CONTEXT_TURNS - skip), asks])
            )
            kind, priority = classify(text)
            days = span(when) if when else None
            start, end = days.bounds(msg.ts.tzinfo) if days else (None, None)  # stored as data, not only as text
            if when:
                text = f"{text} {tag(when)}"
            if msg.name:  # name the subject: "Caroline: I went ..." is found by a question about Caroline
                text = f"{msg.name}: {text}"
            drafts.append(
                AtomDraft(
                    content=text[:MAX_CONTENT],
                    type=kind,
                    priority=priority,
                    source_message_ids=(msg.id,),
                    scene_name=previous_scene,
                    context=follows,
                    activity_start=start,
                    activity_end=end,
                )
            )
        return validate_drafts(drafts, window)


def _answer(context: list[L0Message], i: int, scene: str) -> AtomDraft | None:
    """The atom of the assistant message ``context[i]`` when it answers the user's request right before it."""
    msg = context[i]
    prev = context[i - 1] if i > 0 else None
    if msg.name or prev is None or prev.role != "user" or prev.session != msg.session:
        return None
    if not _REQUEST.search(prev.content):
        return None
    text = statement(msg.content)
    if not text:
        return None
    return AtomDraft(
        content=f"{AI_SUBJECT}: {text}"[:MAX_CONTENT],
        type="episodic",
        priority=ASSISTANT_PRIORITY,
        source_message_ids=(msg.id,),
        scene_name=scene,
        context=search_context(context[:i], msg.session),
    )


def _words(text: str) -> set[str]:
    return set(terms(text))


class HeuristicJudge:
    """Dedup decisions by word sets, for the cases the similarity gate leaves open. No model call.

    new ⊇ old (same type) → update (the new one is more specific); old ⊇ new → skip; otherwise store.
    Merge is left to models: concatenating two texts by rule makes atoms that grow without bound.
    """

    uses_llm = False

    async def judge(self, items: list[JudgeItem]) -> list[DedupDecision]:
        out = []
        for item in items:
            new = _words(item.atom.draft.content)
            action, targets = "store", []
            for cand in sorted(item.candidates, key=lambda c: -c.similarity):
                old = _words(cand.row.text)
                if cand.row.type == item.atom.draft.type and old <= new:
                    action, targets = "update", [cand.row.id]
                    break
                if new <= old:
                    action, targets = "skip", [cand.row.id]
                    break
            out.append(DedupDecision(record_id=item.atom.id, action=action, target_ids=targets))
        return out
