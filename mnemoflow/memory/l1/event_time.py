"""When a remembered event happened: relative time expressions resolved against the time the message was said.

Why: "I went to the support group yesterday" stored as said is wrong a day later; LoCoMo's temporal questions and
LongMemEval's temporal-reasoning questions ask for the date. The heuristic engine appends what this module finds
to the atom (``... yesterday (2023-05-07)``), so the date travels with the fact into recall and the scene text.

Pure and deterministic: English and Chinese expressions, the first one in the text wins, resolved in the
message's own (UTC) calendar. The result is a label at the precision of the expression: a day ``2023-05-07``, a
week ``week of 2023-05-01`` (its Monday), a month ``2023-04``, a year ``2022``. Absolute dates in the text are left
alone: they are already readable.

The heuristic engine also stores the label's days as the atom's ``activity_start`` / ``activity_end``
(:meth:`Span.bounds`), the fields a model fills from its own reading, so the record holds the event time as data and
the index dates the atom by it. The label is also what recall reads back: :func:`tag` writes it into the atom,
:func:`tagged` finds it there and :func:`span` turns it into the days it covers, so a query's time expression
(resolved by the same rules, :mod:`mnemoflow.memory.recall.query_time`) can be compared with the atom's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo

_WEEKDAYS_EN = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_WEEKDAYS_ZH = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}
_NUM_ZH = {"一": 1, "两": 2, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10}
_UNIT_DAYS = {"day": 1, "week": 7, "天": 1, "周": 7, "星期": 7, "个星期": 7, "个礼拜": 7, "礼拜": 7}


def _day(d: date) -> str:
    return d.isoformat()


def _week(d: date) -> str:
    return f"week of {(d - timedelta(days=d.weekday())).isoformat()}"


def _month(d: date, delta: int) -> str:
    index = d.year * 12 + d.month - 1 + delta
    return f"{index // 12:04d}-{index % 12 + 1:02d}"


def _weekday(d: date, target: int, week_offset: int) -> str:
    """The ``target`` weekday of the week ``week_offset`` weeks from the week of ``d``."""
    monday = d - timedelta(days=d.weekday()) + timedelta(weeks=week_offset)
    return _day(monday + timedelta(days=target))


def _sign(word: str) -> int:
    """-1 for the past (上, last, past), +1 for the future (下, next), 0 for this one (这, 本, this)."""
    return {"上": -1, "last": -1, "past": -1, "下": 1, "next": 1}.get(word.lower(), 0)


def _count(token: str) -> int:
    if token.isdigit():
        return int(token)
    if token in ("a", "an", "one"):
        return 1
    words = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "few": 3, "couple of": 2}
    if token in words:
        return words[token]
    return _NUM_ZH.get(token, 1)


Rule = tuple[re.Pattern[str], Callable[[re.Match[str], date], str]]
"""A pattern and how its match becomes a label, given the day the text was said (or the query asked)."""
RULES: list[Rule] = [
    # Chinese first: its expressions never contain Latin letters, so the order only matters within a language.
    (re.compile(r"大前天"), lambda m, d: _day(d - timedelta(days=3))),
    (re.compile(r"前天"), lambda m, d: _day(d - timedelta(days=2))),
    (re.compile(r"昨[天晚]|昨日"), lambda m, d: _day(d - timedelta(days=1))),
    (re.compile(r"今[天晚早]|今日"), lambda m, d: _day(d)),
    (re.compile(r"大后天"), lambda m, d: _day(d + timedelta(days=3))),
    (re.compile(r"后天"), lambda m, d: _day(d + timedelta(days=2))),
    (re.compile(r"明[天晚早]|明日"), lambda m, d: _day(d + timedelta(days=1))),
    (
        re.compile(r"(上|下|这|本)(?:个)?(?:周|星期|礼拜)([一二三四五六日天])"),
        lambda m, d: _weekday(d, _WEEKDAYS_ZH[m.group(2)], _sign(m.group(1))),
    ),
    (re.compile(r"(上|下)(?:个)?周末"), lambda m, d: _weekday(d, 5, _sign(m.group(1)))),
    (re.compile(r"(上|下)(?:个)?(?:周|星期|礼拜)"), lambda m, d: _week(d + timedelta(weeks=_sign(m.group(1))))),
    (re.compile(r"(上|下)个月"), lambda m, d: _month(d, _sign(m.group(1)))),
    (re.compile(r"前年"), lambda m, d: str(d.year - 2)),
    (re.compile(r"去年"), lambda m, d: str(d.year - 1)),
    (re.compile(r"明年"), lambda m, d: str(d.year + 1)),
    (
        re.compile(r"(\d+|[一两二三四五六七八九十])(天|个星期|个礼拜|周|星期)(?:以)?前"),
        lambda m, d: _day(d - timedelta(days=_count(m.group(1)) * _UNIT_DAYS[m.group(2)])),
    ),
    (re.compile(r"(\d+|[一两二三四五六七八九十])个月(?:以)?前"), lambda m, d: _month(d, -_count(m.group(1)))),
    # English.
    (re.compile(r"\bthe day before yesterday\b", re.I), lambda m, d: _day(d - timedelta(days=2))),
    (re.compile(r"\b(yesterday|last night)\b", re.I), lambda m, d: _day(d - timedelta(days=1))),
    (re.compile(r"\b(today|tonight|this (morning|afternoon|evening))\b", re.I), lambda m, d: _day(d)),
    (re.compile(r"\btomorrow\b", re.I), lambda m, d: _day(d + timedelta(days=1))),
    (
        re.compile(r"\b(last|next|this) (" + "|".join(_WEEKDAYS_EN) + r")\b", re.I),
        lambda m, d: _weekday(d, _WEEKDAYS_EN.index(m.group(2).lower()), _sign(m.group(1))),
    ),
    (re.compile(r"\b(last|next|past) weekend\b", re.I), lambda m, d: _weekday(d, 5, _sign(m.group(1)))),
    (re.compile(r"\b(last|next) week\b", re.I), lambda m, d: _week(d + timedelta(weeks=_sign(m.group(1))))),
    (re.compile(r"\b(last|next) month\b", re.I), lambda m, d: _month(d, _sign(m.group(1)))),
    (re.compile(r"\b(last|next) year\b", re.I), lambda m, d: str(d.year + _sign(m.group(1)))),
    (
        re.compile(r"\b(\d+|a|an|one|two|three|four|five|six|seven|few|couple of) (day|week)s? ago\b", re.I),
        lambda m, d: _day(d - timedelta(days=_count(m.group(1).lower()) * _UNIT_DAYS[m.group(2).lower()])),
    ),
    (
        re.compile(r"\b(\d+|a|an|one|two|three|four|five|six|seven|few|couple of) months? ago\b", re.I),
        lambda m, d: _month(d, -_count(m.group(1).lower())),
    ),
    (
        re.compile(r"\b(\d+|a|an|one|two|three|four|five|six|seven|few|couple of) years? ago\b", re.I),
        lambda m, d: str(d.year - _count(m.group(1).lower())),
    ),
]


def first_label(text: str, day: date, rules: Sequence[Rule]) -> str | None:
    """The label of the first expression in ``text`` any of ``rules`` finds, resolved against ``day``, or None.

    On a tie of position the rule listed first wins (the more specific one: 上周六 before 上周)."""
    matches = [(m.start(), i, m) for i, (pattern, _) in enumerate(rules) if (m := pattern.search(text))]
    if not matches:
        return None
    _, i, m = min(matches, key=lambda x: (x[0], x[1]))
    return rules[i][1](m, day)


def resolve(text: str, said_at: datetime) -> str | None:
    """The time of the first relative expression in ``text``, as a label (see the module docstring), or None."""
    return first_label(text, said_at.date(), RULES)


def tag(label: str) -> str:
    """How an atom carries its event time: ``(event: 2023-05-07)`` at the end of its text."""
    return f"(event: {label})"


_TAG = re.compile(r"\(event: ([^()]{1,40})\)")
_LABEL = re.compile(r"(week of )?(\d{4})(?:-(\d{2})(?:-(\d{2}))?)?")


def untagged(text: str) -> str:
    """``text`` without the labels :func:`tag` wrote into it."""
    return _TAG.sub("", text).strip()


def tagged(text: str) -> str | None:
    """The label :func:`tag` wrote into ``text``, or None."""
    m = _TAG.search(text)
    return m.group(1) if m else None


@dataclass(frozen=True, slots=True)
class Span:
    """The days a label covers, both ends included."""

    first: date
    last: date

    def overlaps(self, other: Span) -> bool:
        return self.first <= other.last and other.first <= self.last

    def widened(self, days: int) -> Span:
        return Span(self.first - timedelta(days=days), self.last + timedelta(days=days))

    def bounds(self, tz: tzinfo | None) -> tuple[datetime, datetime]:
        """The span as the start of its first day and the last instant of its last day in ``tz`` (the message's
        zone), the ``activity_start`` / ``activity_end`` an atom stores."""
        start = datetime.combine(self.first, time.min, tz)
        return start, datetime.combine(self.last, time.max, tz)


def span(label: str) -> Span | None:
    """The days ``label`` covers; None when it is not a label (a model-written tag can hold anything)."""
    m = _LABEL.fullmatch(label)
    if not m or (m.group(1) and not m.group(4)):
        return None
    year, month, day = int(m.group(2)), m.group(3), m.group(4)
    try:
        if day:
            first = date(year, int(month), int(day))
            return Span(first, first + timedelta(days=6 if m.group(1) else 0))
        if month:
            first = date(year, int(month), 1)
            return Span(first, date.fromisoformat(_month(first, 1) + "-01") - timedelta(days=1))
        return Span(date(year, 1, 1), date(year, 12, 31))
    except ValueError:  # 2023-13, 2023-02-30
        return None
