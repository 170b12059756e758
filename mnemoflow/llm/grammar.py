"""The llama.cpp grammar (GBNF) of a strict output schema: what constrains the in-process engine's sampler.

Why not llama-cpp-python's own ``response_format`` conversion: measured on our L1 schema, its converter writes
every length bound as nested optionals (``maxLength: 1000`` is a rule a thousand levels deep, 21 KB for the L1
reply), the sampler then refuses the grammar, and ``create_chat_completion`` quietly decodes unconstrained JSON;
and it leaves integer ranges open, so a 0.5B model wrote ``"priority": 1000000000000000`` until ``max_tokens``.
This subclass of that converter keeps everything else of it and changes three things:

* lengths and ``maxItems`` use llama.cpp's bounded repetition ``x{m,n}`` (flat, a few bytes);
* integers with ``minimum``/``maximum`` become the alternatives of their range (ranges up to ``MAX_INT_CHOICES``);
* a string holds no raw control character (JSON forbids them; the stock ``char`` allows a raw newline) and one
  without ``maxLength`` gets ``UNBOUNDED_STRING_CHARS``, so a looping id ends inside the decoder, not at
  ``max_tokens`` with invalid JSON.
"""

from __future__ import annotations

import json
from typing import Any

MAX_INT_CHOICES = 1000
UNBOUNDED_STRING_CHARS = 300
CHAR = r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})'


def schema_grammar(schema: dict[str, Any]) -> str:
    """The GBNF text whose root rule accepts exactly the JSON documents of ``schema`` (a strict schema)."""
    from llama_cpp.llama_grammar import SchemaConverter

    class Converter(SchemaConverter):
        def visit(self, node: dict[str, Any], name: str) -> str:
            rule_name = name or "root"
            kind = node.get("type")
            if kind == "string" and not ({"pattern", "format", "enum", "const"} & node.keys()):
                char = self._add_rule("char", CHAR)
                lo, hi = node.get("minLength", 0), node.get("maxLength", UNBOUNDED_STRING_CHARS)
                return str(self._add_rule(rule_name, f'"\\"" {char}{{{lo},{hi}}} "\\"" space'))
            if kind == "integer" and "enum" not in node:
                lo = node.get("minimum", node.get("exclusiveMinimum", float("-inf")) + 1)
                hi = node.get("maximum", node.get("exclusiveMaximum", float("inf")) - 1)
                if hi - lo < MAX_INT_CHOICES:
                    choices = " | ".join(f'"{v}"' for v in range(int(lo), int(hi) + 1))
                    return str(self._add_rule(rule_name, f"({choices}) space"))
            if kind == "array" and isinstance(node.get("items"), dict) and "maxItems" in node:
                item = self.visit(node["items"], f"{name}{'-' if name else ''}item")
                lo, hi = node.get("minItems", 0), node["maxItems"]
                if hi == 0:
                    return str(self._add_rule(rule_name, '"[" space "]" space'))
                more = f'("," space {item}){{{max(lo - 1, 0)},{hi - 1}}}'
                body = f"{item} {more}" if lo > 0 else f"({item} {more})?"
                return str(self._add_rule(rule_name, f'"[" space {body} "]" space'))
            return str(super().visit(node, name))

    converter = Converter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    resolved = converter.resolve_refs(json.loads(json.dumps(schema)), "schema")
    converter.visit(resolved, "")
    return str(converter.format_grammar())
