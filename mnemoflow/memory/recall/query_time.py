"""The time a recall query asks about: its first time expression as the span of days it covers.

Why: "What did I do last weekend?" or "上个月我去了哪里？" should prefer the memories of that time. The relative
expressions are the L1 rules of :mod:`mnemoflow.memory.l1.event_time` (one grammar for the atom's event time and
the query's), resolved against the recall's *now* instead of the message time; a query also names absolute dates,
which extraction leaves alone ("in May 2023", "2023年5月", "October 13, 2023", "in June"), so their rules live here
and produce the same labels. A date without a year is the latest one not after *now*: a question asks about the past.

Pure and deterministic. Bare month names need a preposition ("in May"), so "May I ask" is no date, and bare
numbers are no years ("in 2023" and "2023年" are).
"""

from __future__ import annotations

import re
from datetime import date, datetime

from mnemoflow.memory.l1.event_time import RULES, Rule, Span, first_label, span

_MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_MONTH = r"(" + "|".join(f"{m[:3]}(?:{m[3:]})?" for m in _MONTHS) + r")\.?"
_ORD = r"(?:st|nd|rd|th)?"
_AFTER = (
    "(?:" + "|".join(rf"(?<=\b{w})" for w in ("in ", "on ", "of ", "during ", "early ", "late ", "mid-", "mid ")) + ")"
)
"""Right after a preposition, without matching it: the match starts where the date does, so "in May 2023" is won
by the more specific month-and-year rule at the same position."""
_NUM_ZH_MONTH = {"一": 1, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10}


def _month_no(name: str) -> int:
    return next(i for i, m in enumerate(_MONTHS, start=1) if m.startswith(name.lower().rstrip(".")[:3]))


def _zh_month(token: str) -> int:
    if token.isdigit():
        return int(token)
    return 10 + _NUM_ZH_MONTH.get(token[1:], 0) if token.startswith("十") else _NUM_ZH_MONTH[token]


def _day(year: int, month: int, day: int) -> str:
    return f"{year:04d}-{month:02d}-{day:02d}"


def _latest(today: date, month: int, day: int = 1) -> int:
    """The year of the latest ``month``/``day`` not after ``today``."""
    return today.year if (month, day) <= (today.month, today.day) else today.year - 1


ABSOLUTE: list[Rule] = [
    (
        re.compile(r"(?<!\d)(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?!\d)"),
        lambda m, d: _day(int(m.group(1)), int(m.group(2)), int(m.group(3))),
    ),
    (
        re.compile(r"(\d{4})年(\d{1,2})月(\d{1,2})[日号]"),
        lambda m, d: _day(int(m.group(1)), int(m.group(2)), int(m.group(3))),
    ),
    (re.compile(r"(\d{4})年(\d{1,2})月"), lambda m, d: f"{m.group(1)}-{int(m.group(2)):02d}"),
    (re.compile(r"(\d{4})年"), lambda m, d: m.group(1)),
    (
        re.compile(r"(?<![\d年])(\d{1,2})月(\d{1,2})[日号]"),
        lambda m, d: _day(_latest(d, int(m.group(1)), int(m.group(2))), int(m.group(1)), int(m.group(2))),
    ),
    (
        re.compile(r"(?<![\d年个])(1[0-2]|0?[1-9]|十[一二]?|[一二三四五六七八九])月(?!\d)"),
        lambda m, d: f"{_latest(d, _zh_month(m.group(1)))}-{_zh_month(m.group(1)):02d}",
    ),
    (
        re.compile(rf"\b{_MONTH} (\d{{1,2}}){_ORD},? (\d{{4}})\b", re.I),
        lambda m, d: _day(int(m.group(3)), _month_no(m.group(1)), int(m.group(2))),
    ),
    (
        re.compile(rf"\b(\d{{1,2}}){_ORD} (?:of )?{_MONTH},? (\d{{4}})\b", re.I),
        lambda m, d: _day(int(m.group(3)), _month_no(m.group(2)), int(m.group(1))),
    ),
    (re.compile(rf"\b{_MONTH},? (\d{{4}})\b", re.I), lambda m, d: f"{m.group(2)}-{_month_no(m.group(1)):02d}"),
    (
        re.compile(rf"{_AFTER}{_MONTH} (\d{{1,2}}){_ORD}\b", re.I),
        lambda m, d: _day(_latest(d, _month_no(m.group(1)), int(m.group(2))), _month_no(m.group(1)), int(m.group(2))),
    ),
    (
        re.compile(rf"{_AFTER}{_MONTH}\b", re.I),
        lambda m, d: f"{_latest(d, _month_no(m.group(1)))}-{_month_no(m.group(1)):02d}",
    ),
    (re.compile(rf"{_AFTER}((?:19|20)\d{{2}})\b", re.I), lambda m, d: m.group(1)),
]
"""Absolute dates, most specific first (a tie of position goes to the rule listed first)."""


def query_span(query: str, now: datetime) -> Span | None:
    """The days the first time expression of ``query`` covers, resolved against ``now``; None without one."""
    label = first_label(query, now.date(), [*ABSOLUTE, *RULES])
    return span(label) if label else None
