"""Identifiers that become file and folder names.

Tenants, users, sessions, message ids and tool-call ids all end up in paths, so they are checked once at the
boundary: letters, digits and ``_ - . : @``, not starting with a dot, at most 128 characters. A path separator,
``..`` or a control character can never reach the file store.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, StringConstraints

ID_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9_.:@-]{0,127}"
_ID_RE = re.compile(ID_PATTERN)


def check_id(value: str) -> str:
    """Return ``value`` if it is a safe id, else raise ValueError naming the rule."""
    if not _ID_RE.fullmatch(value) or ".." in value:
        raise ValueError(
            f"invalid id {value[:64]!r}: use 1-128 of letters, digits, '_', '-', '.', ':', '@'; "
            "no path separators, no '..', not starting with '.'"
        )
    return value


SafeId = Annotated[str, StringConstraints(min_length=1, max_length=128), AfterValidator(check_id)]
