"""Relative time expressions resolve against the time the message was said, in English and Chinese."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from mnemoflow.memory.l1.event_time import resolve

SAID = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)  # a Monday


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("I went to the LGBTQ support group yesterday.", "2023-05-07"),
        ("We painted a sunrise last year", "2022"),
        ("Mel ran a charity race last Saturday", "2023-05-06"),
        ("I'm going camping next month", "2023-06"),
        ("two weeks ago we adopted a puppy", "2023-04-24"),
        ("I started a new job last week", "week of 2023-05-01"),
        ("昨天我去了超市", "2023-05-07"),
        ("我们下周六去爬山", "2023-05-20"),
        ("上个月我去了一个 Python meetup", "2023-04"),
        ("三天前我摔了一跤", "2023-05-05"),
        ("去年我去过慕尼黑", "2022"),
        ("上周我换了工作，下周开始上班", "week of 2023-05-01"),  # the first expression wins
        ("I met Tom 昨天 after work", "2023-05-07"),
    ],
)
def test_expressions_resolve_against_the_message_time(text: str, label: str) -> None:
    assert resolve(text, SAID) == label


def test_text_without_a_relative_time_has_none() -> None:
    assert resolve("I love hiking in the mountains", SAID) is None
    assert resolve("On 7 May 2023 I went out", SAID) is None
    assert resolve("", SAID) is None


def test_months_cross_year_boundaries() -> None:
    assert resolve("last month", datetime(2024, 1, 3, tzinfo=UTC)) == "2023-12"
    assert resolve("下个月", datetime(2023, 12, 30, tzinfo=UTC)) == "2024-01"
