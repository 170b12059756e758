"""Milvus filter building is pure string work: test it without a server (the contract tests run the server)."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemoflow.index._milvus_schema import lit, primary_key, scope_filter


def _unquote(literal: str) -> str:
    """What Milvus' parser does with a double-quoted literal that uses only \\\\ and \\" escapes."""
    assert literal[0] == literal[-1] == '"'
    out, body, i = [], literal[1:-1], 0
    while i < len(body):
        if body[i] == "\\":
            i += 1
            assert body[i] in '\\"'
        else:
            assert body[i] != '"', "unescaped quote would end the literal"
        out.append(body[i])
        i += 1
    return "".join(out)


@given(st.text(st.characters(min_codepoint=32, blacklist_characters="\x7f"), min_size=1, max_size=40))
def test_literal_round_trips_any_printable_id(value: str) -> None:
    assert _unquote(lit(value)) == value


def test_scope_filter_quotes_both_sides() -> None:
    assert scope_filter('t"1', "u\\2") == 'tenant == "t\\"1" and user == "u\\\\2"'


def test_primary_key_separates_scopes() -> None:
    assert primary_key("t", "u", "a1") != primary_key("t", "u2", "a1")
    assert primary_key("t", "u", "a1") == primary_key("t", "u", "a1")
    assert len(primary_key("t", "u" * 128, "a" * 128)) == 64


def test_missing_pymilvus_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from mnemoflow.index import _milvus_schema

    monkeypatch.setitem(sys.modules, "pymilvus", None)
    with pytest.raises(ImportError, match=r"pip install mnemoflow\[milvus\]"):
        _milvus_schema.vendor()


def test_control_characters_are_refused_before_reaching_milvus() -> None:
    from mnemoflow.errors import InvalidInput

    with pytest.raises(InvalidInput):
        lit("a\nb")
