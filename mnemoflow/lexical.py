"""Lexical terms for BM25: one analysis of text, the same for what is indexed and for the query, in any language.

Why: FTS5's ``unicode61`` tokenizer (and Milvus' ``standard`` analyzer, and a ``\\w+`` regex) keep a run of CJK
characters as one token, so ``我喜欢在山里徒步旅行`` is a single term and a search for 徒步 finds nothing. Here
every script a word regex splits well (Latin, Cyrillic, Greek, Hangul words between spaces, digits) is cut into
lower-cased ``\\w+`` words as before, so English recall is unchanged; a run of Han or kana characters becomes
the words of ``rjieba.cut_for_search`` (jieba-rs: a dictionary segmenter, with the shorter words inside long
ones) plus every character bigram of the run. The bigrams catch what the dictionary does not know: jieba keeps
叫小美 as one word, so without them the name 小美 could not be found. A lone character is kept as itself.

The stores index ``" ".join(terms(text))`` (space-separated words every engine's whitespace or unicode tokenizer
splits the same way) and query with ``terms(query)``, so SQLite, Milvus and the in-memory reference agree.
Terms never contain quotes, operators or spaces: each is a ``\\w+`` run, safe to quote as an FTS5 string.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

_WORD = re.compile(r"\w+", re.UNICODE)
# Han (CJK unified ideographs and extensions A, compatibility), hiragana, katakana: scripts written without spaces.
_UNSPACED = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")


def has_unspaced(text: str) -> bool:
    """True when the text holds a script written without spaces between words (Chinese, Japanese)."""
    return _UNSPACED.search(text) is not None


@lru_cache(maxsize=1)
def _jieba() -> Any:
    """rjieba loads its dictionary on first use; import it then, not when mnemoflow is imported."""
    import rjieba

    return rjieba


def _unspaced_terms(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    words = [w for w in _jieba().cut_for_search(run) if _WORD.fullmatch(w)]
    bigrams = [run[i : i + 2] for i in range(len(run) - 1)]
    return list(dict.fromkeys([*words, *bigrams]))


def terms(text: str) -> list[str]:
    """The BM25 terms of ``text`` in order of appearance (repeats kept: they are term frequency)."""
    out: list[str] = []
    for word in _WORD.findall(text):
        if not has_unspaced(word):
            out.append(word.lower())
            continue
        pos = 0
        for run in _UNSPACED.finditer(word):
            if run.start() > pos:
                out.append(word[pos : run.start()].lower())
            out += _unspaced_terms(run.group())
            pos = run.end()
        if pos < len(word):
            out.append(word[pos:].lower())
    return out


def analysed(text: str) -> str:
    """The text as the lexical index stores it: its terms separated by single spaces."""
    return " ".join(terms(text))


def fts5_any(query: str) -> str:
    """An FTS5 MATCH expression for rows holding any of the query's terms ("" when it has none). Terms are
    ``\\w+`` runs, so quoting each as an FTS5 string cannot inject query syntax."""
    return " OR ".join(f'"{t}"' for t in dict.fromkeys(terms(query)))


def words(text: str) -> list[str]:
    """Words a reader would count, case kept: ``\\w+`` runs of spaced scripts, jieba words of Chinese and Japanese
    runs (no bigrams, no shorter words inside longer ones). For thresholds and naming, not for search."""
    out: list[str] = []
    for word in _WORD.findall(text):
        pos = 0
        for run in _UNSPACED.finditer(word):
            if run.start() > pos:
                out.append(word[pos : run.start()])
            piece = run.group()
            out += [w for w in _jieba().cut(piece) if _WORD.fullmatch(w)] if len(piece) > 1 else [piece]
            pos = run.end()
        if pos < len(word):
            out.append(word[pos:])
    return out


def tagged_words(text: str) -> list[tuple[str, str | None]]:
    """:func:`words` with jieba's part-of-speech tag of each Chinese or Japanese word (``n`` noun, ``ns`` place,
    ``v`` verb, ``t`` time, ...; None for words of spaced scripts): naming prefers nouns, and only a tagger tells
    下个月 (a time) and 不吃 (a verb) from 电池 (a noun) without a list of every word."""
    out: list[tuple[str, str | None]] = []
    for word in _WORD.findall(text):
        pos = 0
        for run in _UNSPACED.finditer(word):
            if run.start() > pos:
                out.append((word[pos : run.start()], None))
            out += [(w, tag) for w, tag in _jieba().tag(run.group()) if _WORD.fullmatch(w)]
            pos = run.end()
        if pos < len(word):
            out.append((word[pos:], None))
    return out


def word_count(text: str) -> int:
    """How many :func:`words` the text has: the heuristic engine's thresholds (a four-word statement is four
    characters long in Chinese, one ``\\w+`` run)."""
    return len(words(text))


BM25_K1, BM25_B = 1.2, 0.75
"""Okapi BM25 parameters: FTS5's and Milvus' defaults."""


def bm25_idf(wanted: Iterable[str], docs: int, df: Mapping[str, int]) -> dict[str, float]:
    """The weight of each query term found in the population (``docs`` documents, ``df`` holding each term's
    document count there); terms no document holds are left out, as they add nothing."""
    return {t: math.log(1 + (docs - n + 0.5) / (n + 0.5)) for t in wanted if (n := df.get(t, 0))}


def bm25_score(tf: Mapping[str, int], length: int, avgdl: float, idf: Mapping[str, float]) -> float:
    """Okapi BM25 of one document: its term counts ``tf`` and ``length`` (terms), the population's mean length.

    The terms' parts are added one by one in ``idf``'s order, not with ``sum()`` (which compensates its rounding
    from Python 3.12 on): :func:`bm25_postings` adds them the same way, so the two agree to the last bit."""
    norm = BM25_K1 * (1 - BM25_B + BM25_B * length / avgdl)
    score = 0.0
    for t, w in idf.items():
        if n := tf.get(t):
            score += w * n * (BM25_K1 + 1) / (n + norm)
    return score


def bm25_postings(
    postings: Mapping[str, npt.NDArray[np.int64]], wanted: Sequence[str], docs: int, length: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Okapi BM25 of every document holding a query term, from an inverted index: for each term of ``wanted``
    found, its postings as rows of (document, count of the term there, document length), one row a document;
    ``docs`` and ``length`` (total terms) are the population's. Returns the documents and their scores, each
    :func:`bm25_score`'s to the last bit (the same operations in the same order, on arrays: a heavy user's common
    term has thousands of postings)."""
    import numpy as np  # here, not at import: the lexical analysis is light

    idf = bm25_idf(wanted, docs, {t: len(rows) for t, rows in postings.items()})
    if not idf:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    held = [postings[t] for t in idf]
    docs_of, at = np.unique(np.concatenate([rows[:, 0] for rows in held]), return_inverse=True)
    avgdl = length / docs or 1.0
    scores = np.zeros(len(docs_of), dtype=np.float64)
    start = 0
    for w, rows in zip(idf.values(), held, strict=True):
        n, dl = rows[:, 1].astype(np.float64), rows[:, 2].astype(np.float64)
        norm = BM25_K1 * (1 - BM25_B + BM25_B * dl / avgdl)
        scores[at[start : start + len(rows)]] += w * n * (BM25_K1 + 1) / (n + norm)
        start += len(rows)
    return docs_of, scores


def bm25_scores(query: str, docs: Sequence[str]) -> list[float]:
    """Okapi BM25 of each document for ``query`` within ``docs`` (the population the statistics come from).

    The pure-Python scorer for the places that rank a small set without an index: the in-memory store (the
    reference the indexes are tested against) and search over one user's raw conversation. The SQLite index scores
    with :func:`bm25_idf` and :func:`bm25_score` too, from statistics it reads per user."""
    wanted = dict.fromkeys(terms(query))
    tfs = [Counter(terms(d)) for d in docs]
    if not wanted or not tfs:
        return [0.0] * len(tfs)
    avg = sum(sum(tf.values()) for tf in tfs) / len(tfs) or 1.0
    idf = bm25_idf(wanted, len(tfs), Counter(t for tf in tfs for t in tf if t in wanted))
    return [bm25_score(tf, sum(tf.values()), avg, idf) for tf in tfs]


def is_chinese(texts: list[str]) -> bool:
    """Whether most of ``texts`` are written in Chinese: the persona, and the headings recall puts over its parts,
    are written in the user's language."""
    han = sum(1 for t in texts for c in t if "\u4e00" <= c <= "\u9fff")
    latin = sum(1 for t in texts for c in t if c.isascii() and c.isalpha())
    return han * 2 > latin
