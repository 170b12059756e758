"""Strict JSON schemas for output models: what engines hand to the server to constrain decoding.

Why strict: OpenAI ``strict`` mode, vLLM guided decoding and llama.cpp grammars need every object closed
(``additionalProperties: false``) and every property listed in ``required``. Why ``maxItems`` everywhere:
measured, small models repeat list items until ``max_tokens`` cuts them off, which yields invalid JSON; a bound
in the schema stops the loop inside the decoder. A model without one is a programming error, so it is refused
before any request is sent.
"""

from __future__ import annotations

import copy
import re
from functools import lru_cache
from typing import Any

from pydantic import BaseModel

from mnemoflow.errors import ConfigError

_DROP = ("default", "title")


def strict_json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The strict JSON schema of ``model``; raises :class:`ConfigError` if any list or map in it is unbounded.

    Bound a list with ``Field(max_length=N)`` (pydantic writes it as ``maxItems``). Maps (``dict[str, X]``)
    cannot be expressed in strict mode; use a bounded list of items instead. The result is a fresh copy.
    """
    return copy.deepcopy(_cached(model))


def schema_name(model: type[BaseModel]) -> str:
    """A ``response_format`` name for ``model`` (OpenAI allows ``[a-zA-Z0-9_-]{1,64}``)."""
    return re.sub(r"[^a-zA-Z0-9_-]", "_", model.__name__)[:64] or "output"


@lru_cache(maxsize=256)
def _cached(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema(mode="validation")
    _strictify(schema, model.__name__, "$")
    return schema


def _strictify(node: Any, model_name: str, path: str) -> None:
    if isinstance(node, list):
        for i, item in enumerate(node):
            _strictify(item, model_name, f"{path}[{i}]")
        return
    if not isinstance(node, dict):
        return
    for key in _DROP:
        # ``title`` only costs tokens; ``default`` is meaningless once every property is required and strict
        # OpenAI mode rejects it. Maps of names (``properties``, ``$defs``) never reach here as nodes.
        node.pop(key, None)
    is_array = node.get("type") == "array" or "items" in node or "prefixItems" in node
    if is_array and "maxItems" not in node:
        raise ConfigError(
            f"output model {model_name}: the list at {path} has no max_length; "
            "bound it with Field(max_length=N) so a looping model cannot run until max_tokens"
        )
    if node.get("type") == "object" or "properties" in node:
        extra = node.get("additionalProperties")
        if isinstance(extra, dict) or (extra is True):
            raise ConfigError(
                f"output model {model_name}: the map at {path} has unbounded keys; use a bounded list of items"
            )
        props = node.get("properties", {})
        node["additionalProperties"] = False
        node["required"] = list(props)
    for key, child in node.items():
        if key in ("properties", "$defs") and isinstance(child, dict):
            for name, sub in child.items():
                _strictify(sub, model_name, f"{path}.{name}")
        elif isinstance(child, dict | list):
            _strictify(child, model_name, f"{path}.{key}")
