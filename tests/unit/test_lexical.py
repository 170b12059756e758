"""Lexical terms: Chinese is segmented (words and bigrams), English is split as before, and both sides agree."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from mnemoflow.lexical import (
    analysed,
    bm25_idf,
    bm25_postings,
    bm25_score,
    bm25_scores,
    has_unspaced,
    terms,
    word_count,
    words,
)

SENTENCE = "我喜欢在山里徒步旅行，我的女儿叫小美，她在北京上大学。"


def test_a_chinese_sentence_yields_its_words_and_the_names_the_dictionary_does_not_know() -> None:
    got = set(terms(SENTENCE))
    assert {"徒步", "旅行", "女儿", "北京", "大学", "小美"} <= got
    assert SENTENCE.rstrip("。") not in got  # not one token per run, as unicode61 makes it


def test_a_query_word_is_its_own_single_term() -> None:
    for query in ("徒步", "女儿", "小美", "北京"):
        assert terms(query) == [query]


def test_spaced_scripts_are_lower_cased_words_as_before() -> None:
    assert terms("Caroline went to the LGBTQ support-group, twice!") == [
        "caroline",
        "went",
        "to",
        "the",
        "lgbtq",
        "support",
        "group",
        "twice",
    ]
    assert terms("Ünï_x naïve") == ["ünï_x", "naïve"]
    assert terms("?! ...") == []


def test_mixed_language_keeps_both_halves() -> None:
    got = terms("上个月我去了Python meetup，学了asyncio")
    assert {"python", "meetup", "asyncio", "上个月"} <= set(got)
    assert has_unspaced("I said 你好") and not has_unspaced("plain English, ünï")


@given(st.text(max_size=60))
def test_terms_are_always_word_runs_safe_to_quote(text: str) -> None:
    for term in terms(text):
        assert term and '"' not in term and " " not in term and term == term.lower()
    assert analysed(text).split() == terms(text)


def test_words_count_like_a_reader() -> None:
    assert word_count("我喜欢徒步") == 3
    assert words("I love 徒步旅行 a lot") == ["I", "love", "徒步旅行", "a", "lot"]
    assert word_count("") == 0


def test_bm25_ranks_the_document_with_the_chinese_word() -> None:
    docs = ["我喜欢在山里徒步旅行", "我的女儿叫小美", "I like hiking in the hills"]
    scores = bm25_scores("女儿", docs)
    assert scores[1] > 0 and scores[0] == scores[2] == 0
    scores = bm25_scores("hiking 徒步", docs)
    assert scores[0] > 0 and scores[2] > 0 and scores[1] == 0
    assert bm25_scores("", docs) == [0.0, 0.0, 0.0]


@given(
    st.lists(st.lists(st.sampled_from(["cat", "tree", "山", "pixel", "a", "b"]), max_size=30), min_size=1, max_size=40),
    st.lists(st.sampled_from(["cat", "tree", "山", "pixel", "zzz"]), min_size=1, max_size=5),
)
def test_bm25_from_postings_is_the_per_document_score_to_the_last_bit(docs: list[list[str]], query: list[str]) -> None:
    """The SQLite index scores postings on arrays; the in-memory reference one document at a time: same floats."""
    wanted = list(dict.fromkeys(query))
    tfs = [Counter(d) for d in docs]
    length = sum(len(d) for d in docs)
    postings = {
        t: np.array([(i, tf[t], len(docs[i])) for i, tf in enumerate(tfs) if tf[t]], dtype=np.int64)
        for t in wanted
        if any(t in tf for tf in tfs)
    }
    avgdl = length / len(docs) or 1.0
    idf = bm25_idf(wanted, len(docs), {t: len(rows) for t, rows in postings.items()})
    want = {i: s for i, tf in enumerate(tfs) if (s := bm25_score(tf, len(docs[i]), avgdl, idf))}
    ids, scores = bm25_postings(postings, wanted, len(docs), length)
    assert dict(zip(ids.tolist(), scores.tolist(), strict=True)) == want
