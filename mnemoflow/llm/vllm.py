"""The ``vllm`` engine: vLLM's async engine in-process (inside the Serve ``llm`` deployment on a GPU node).

JSON-schema guided decoding (``StructuredOutputsParams(json=...)``) makes the model emit only schema-valid JSON;
the shared loop in :mod:`mnemoflow.llm.structured` still validates it. vLLM on PyPI is CUDA-only, so this
adapter is kept small; CI exercises the same contract through the ``openai`` engine against an
OpenAI-compatible server (vLLM serves that API too).
"""

from __future__ import annotations

import itertools
from typing import Any

from mnemoflow.errors import ConfigError
from mnemoflow.llm.structured import RawReply, StructuredEngine, StructuredRequest
from mnemoflow.llm.usage import LLMUsage

_ids = itertools.count()


class VLLMEngine(StructuredEngine):
    def __init__(self, model: str, *, usage: LLMUsage | None = None, **engine_args: Any) -> None:
        try:
            from vllm import AsyncEngineArgs, AsyncLLMEngine
        except ImportError as exc:
            raise ConfigError("the vllm engine needs vLLM on a CUDA machine: pip install vllm") from exc
        self.usage = usage if usage is not None else LLMUsage()
        self._engine = AsyncLLMEngine.from_engine_args(AsyncEngineArgs(model=model, **engine_args))
        self._tokenizer: Any = None

    async def _send(self, request: StructuredRequest) -> RawReply:
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        if self._tokenizer is None:
            self._tokenizer = await self._engine.get_tokenizer()
        prompt = self._tokenizer.apply_chat_template(
            [m.model_dump() for m in request.messages], tokenize=False, add_generation_prompt=True
        )
        params = SamplingParams(
            max_tokens=request.max_tokens,
            temperature=request.temperature,
            structured_outputs=StructuredOutputsParams(json=request.schema),
        )
        final = None
        async for output in self._engine.generate(prompt, params, request_id=f"mnemoflow-{next(_ids)}"):
            final = output
        if final is None or not final.outputs:
            return RawReply(text="")
        choice = final.outputs[0]
        return RawReply(
            text=choice.text,
            prompt_tokens=len(final.prompt_token_ids or []),
            completion_tokens=len(choice.token_ids),
            finish_reason=choice.finish_reason,
        )
