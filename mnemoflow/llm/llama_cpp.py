"""The ``llama_cpp`` engine: a GGUF model in-process on CPU, for single-machine self-hosting.

Each reply's JSON schema becomes a llama.cpp grammar (:mod:`mnemoflow.llm.grammar`), so the sampler can only emit
JSON of that shape (pydantic still validates what the schema cannot say). Inference is
CPU-bound and blocking, so each call runs in a worker thread and calls are serialised (one context). Needs
``pip install 'mnemoflow[llama]'`` (llama-cpp-python builds from source: about 10 minutes on 2 cores).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from mnemoflow.errors import ConfigError
from mnemoflow.llm.grammar import schema_grammar
from mnemoflow.llm.structured import RawReply, StructuredEngine, StructuredRequest
from mnemoflow.llm.usage import LLMUsage

REPAIR_REPEAT_PENALTY = 1.15
"""llama.cpp's repetition penalty on the repair try only. The first try decodes greedily with none, so ids a reply
must repeat (source message ids, atom ids) are not pushed away; the repair try follows a reply that failed
validation, which on the packaged Qwen2.5 models was mostly a loop (a persona line written 16 times). Measured on
the 0.5B with one thread, a one-scene persona: no penalty, or 1.05, or temperature 0.7, looped again; 1.15 wrote
a valid persona in 19 s."""


class LlamaCppEngine(StructuredEngine):
    def __init__(
        self, model_path: str | Path, *, n_ctx: int = 4096, threads: int | None = None, usage: LLMUsage | None = None
    ) -> None:
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise ConfigError("the llama_cpp engine needs llama-cpp-python: pip install 'mnemoflow[llama]'") from exc
        if not Path(model_path).is_file():
            raise ConfigError(f"GGUF model not found: {model_path}")
        self.usage = usage if usage is not None else LLMUsage()
        self._llm = Llama(model_path=str(model_path), n_ctx=n_ctx, n_threads=threads, verbose=False)
        self._lock = asyncio.Lock()
        self._grammars: dict[str, Any] = {}

    def _grammar(self, schema: dict[str, Any]) -> Any:
        """The parsed grammar of a schema, built once per output model (a few per stage)."""
        from llama_cpp import LlamaGrammar

        key = json.dumps(schema, sort_keys=True)
        if key not in self._grammars:
            text = schema_grammar(schema)
            self._check_grammar(text)
            self._grammars[key] = LlamaGrammar.from_string(text, verbose=False)
        return self._grammars[key]

    def _check_grammar(self, text: str) -> None:
        """Refuse a grammar llama.cpp cannot parse: the sampler would drop it and decode unconstrained text."""
        import llama_cpp

        sampler = llama_cpp.llama_sampler_init_grammar(self._llm._model.vocab, text.encode(), b"root")
        if not sampler:
            raise ConfigError(f"llama.cpp refused the grammar of an output schema:\n{text[:2000]}")
        llama_cpp.llama_sampler_free(sampler)

    def _complete(self, request: StructuredRequest) -> dict[str, Any]:
        reply: dict[str, Any] = self._llm.create_chat_completion(
            messages=[m.model_dump() for m in request.messages],
            max_tokens=request.max_tokens,
            temperature=request.temperature,
            grammar=self._grammar(request.schema),
            repeat_penalty=1.0 if request.attempt == 1 else REPAIR_REPEAT_PENALTY,
        )
        return reply

    async def _send(self, request: StructuredRequest) -> RawReply:
        async with self._lock:
            reply = await asyncio.to_thread(self._complete, request)
        choice, usage = reply["choices"][0], reply.get("usage") or {}
        return RawReply(
            text=choice["message"].get("content") or "",
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            finish_reason=choice.get("finish_reason"),
        )
