"""The o200k counter: tiktoken on a vocabulary written from the bpe-openai wheel must count as the wheel does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import bpe_openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemoflow import tokens

MIXED = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(list("我住在杭州，是一名护士。以后回答请用简短的要点 \n\t'sre")),
    ),
    max_size=200,
)


@pytest.fixture(scope="module")
def wheel() -> object:
    return bpe_openai.get_encoding(tokens.ENCODING)


@settings(max_examples=300, deadline=None)
@given(text=MIXED)
def test_counts_equal_the_wheels(wheel: object, text: str) -> None:
    assert tokens.count_tokens(text) == len(wheel.encode_ordinary(text))  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "text",
    [
        "我住在杭州，是一名护士。",
        "mixed 中文 and English 😀 text\x00\u200b",
        "<|endoftext|> counts as plain text",
        " " * 1000,
        "a" * 20_000,
        "def f(x):\n    return x ** 2  # it's\r\n",
    ],
)
def test_edge_cases_equal_the_wheels(wheel: object, text: str) -> None:
    assert tokens.count_tokens(text) == len(wheel.encode_ordinary(text))  # type: ignore[attr-defined]


def test_writes_openais_file_once_and_rewrites_a_damaged_one(tmp_path: Path) -> None:
    """In a fresh process: the file is written under tiktoken's key, checked, and a damaged one is replaced
    (tiktoken itself would delete it and try to download, which fails offline)."""
    script = "from mnemoflow.tokens import count_tokens; print(count_tokens('我住在杭州 hello'))"
    env = {"TIKTOKEN_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    written = tokens._cached_file(tmp_path)
    assert tokens._is_openais(written)
    written.write_bytes(written.read_bytes()[:-100])
    again = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert first.stdout == again.stdout == "5\n"
    assert tokens._is_openais(written)
    assert not list(tmp_path.glob("*.tmp"))
