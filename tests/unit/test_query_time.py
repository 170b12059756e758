"""A query's time expression becomes the span of days it asks about, resolved against the recall's now."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from mnemoflow.memory.l1.event_time import Span, span, tag, tagged
from mnemoflow.memory.recall.query_time import query_span

NOW = datetime(2023, 10, 22, 9, 55, tzinfo=UTC)  # a Sunday


def days(first: str, last: str | None = None) -> Span:
    return Span(date.fromisoformat(first), date.fromisoformat(last or first))


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("What did I do yesterday?", days("2023-10-21")),
        ("What did Caroline do last week?", days("2023-10-09", "2023-10-15")),
        ("Which bike did I service the past weekend?", days("2023-10-14")),
        ("What milestone did I mention four weeks ago?", days("2023-09-24")),
        ("What did Melanie see on the camping trip last year?", days("2022-01-01", "2022-12-31")),
        ("What did Mel paint in July 2023?", days("2023-07-01", "2023-07-31")),
        ("What did Melanie show on October 13, 2023?", days("2023-10-13")),
        ("What happened on 7th of May, 2023?", days("2023-05-07")),
        ("When did Melanie go camping in June?", days("2023-06-01", "2023-06-30")),  # the latest June before now
        ("What did I buy in December?", days("2022-12-01", "2022-12-31")),  # not a December still to come
        ("How many times did she go to the beach in 2023?", days("2023-01-01", "2023-12-31")),
        ("notes from 2023-05-07 please", days("2023-05-07")),
    ],
)
def test_english_expressions(query: str, expected: Span) -> None:
    assert query_span(query, NOW) == expected


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("我上个月去了哪里？", days("2023-09-01", "2023-09-30")),
        ("去年我们去了哪", days("2022-01-01", "2022-12-31")),
        ("2023年5月我做了什么", days("2023-05-01", "2023-05-31")),
        ("2023年5月7日的会议", days("2023-05-07")),
        ("我五月去了哪里", days("2023-05-01", "2023-05-31")),
        ("5月3号我在哪", days("2023-05-03")),
        ("三天前我摔了一跤吗", days("2023-10-19")),
    ],
)
def test_chinese_expressions(query: str, expected: Span) -> None:
    assert query_span(query, NOW) == expected


def test_mixed_language_takes_the_first_expression() -> None:
    assert query_span("我 last week 去了哪里，上个月呢？", NOW) == days("2023-10-09", "2023-10-15")
    assert query_span("What did I eat 昨天?", NOW) == days("2023-10-21")


@pytest.mark.parametrize(
    "query",
    [
        "What does Caroline like?",
        "May I ask what Ana drinks?",  # a modal, not the month
        "How many weeks ago did I attend the workshop?",  # no count: no date
        "Did I earn 2023 dollars at the market?",  # a bare number is no year
        "我有三个月的假期吗",  # a duration, not a month
        "",
    ],
)
def test_queries_without_a_time(query: str) -> None:
    assert query_span(query, NOW) is None


def test_atom_labels_round_trip_to_spans() -> None:
    assert tagged(f"Caroline: I went to the support group yesterday {tag('2023-05-07')}") == "2023-05-07"
    assert tagged("no label here") is None
    assert span("2023-05-07") == days("2023-05-07")
    assert span("week of 2023-05-01") == days("2023-05-01", "2023-05-07")
    assert span("2024-02") == days("2024-02-01", "2024-02-29")
    assert span("2023-12") == days("2023-12-01", "2023-12-31")
    assert span("2022") == days("2022-01-01", "2022-12-31")
    for junk in ("2023-13", "2023-02-30", "week of 2023-05", "yesterday", ""):
        assert span(junk) is None


def test_spans_overlap_and_widen() -> None:
    june = days("2023-06-01", "2023-06-30")
    assert june.overlaps(days("2023-06-30", "2023-07-02")) and not june.overlaps(days("2023-07-02"))
    assert june.widened(3).overlaps(days("2023-07-02"))
