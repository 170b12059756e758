"""LLM engines behind the :class:`~mnemoflow.ports.llm.LLM` port, and the pieces every engine shares.

Only the ``openai`` engine lives here so far; it needs nothing beyond httpx, so importing this package pulls in
no model runtime.
"""

from mnemoflow.llm.openai import OpenAIEngine
from mnemoflow.llm.schema import schema_name, strict_json_schema
from mnemoflow.llm.structured import RawReply, StructuredRequest, complete_structured
from mnemoflow.llm.usage import CallRecord, LLMUsage, StageTotals

__all__ = [
    "CallRecord",
    "LLMUsage",
    "OpenAIEngine",
    "RawReply",
    "StageTotals",
    "StructuredRequest",
    "complete_structured",
    "schema_name",
    "strict_json_schema",
]
