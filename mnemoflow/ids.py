"""Identifiers that become file and folder names.

Tenants, users, sessions, message ids and tool-call ids all end up in paths, so they are checked once at the
boundary: letters, digits and ``_ - . : @``, not starting with a dot, at most 128 characters. A path separator,
``..`` or a control character can never reach the file store.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, StringConstraints

ID_MAX = 128
ID_PATTERN = r"^[A-Za-z0-9_](?:\.?[A-Za-z0-9_:@-])*\.?$"
"""The whole rule but the length in one regex (a dot is never followed by a dot), so that pydantic-core can check
it without a call into Python."""
_ID_RE = re.compile(ID_PATTERN)


def is_id(value: str) -> bool:
    """Whether ``value`` is a safe id (:func:`check_id` without the error), e.g. a folder name read back."""
    return len(value) <= ID_MAX and _ID_RE.match(value) is not None


def check_id(value: str) -> str:
    """Return ``value`` if it is a safe id, else raise ValueError naming the rule."""
    if not is_id(value):
        raise ValueError(
            f"invalid id {value[:64]!r}: use 1-128 of letters, digits, '_', '-', '.', ':', '@'; "
            "no path separators, no '..', not starting with '.'"
        )
    return value


SafeId = Annotated[str, StringConstraints(min_length=1, max_length=ID_MAX), AfterValidator(check_id)]
"""An id from a caller: a refusal names the rule."""

WireId = Annotated[str, StringConstraints(max_length=ID_MAX, pattern=ID_PATTERN)]
"""An id in an event read from a topic: the same rule checked in Rust (the worker parses every event; four
Python validator calls were a fifth of its parsing). Its refusal, rare, only reaches a dead letter."""
