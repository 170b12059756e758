"""Choose each long-term stage's engine: the model behind the LLM port when one is configured, else the
deterministic heuristic of that stage. One place, so every process picks the same engines."""

from __future__ import annotations

from mnemoflow.memory.l1.dedup import DedupJudge, LLMDedupJudge
from mnemoflow.memory.l1.extract import Extractor, LLMExtractor
from mnemoflow.memory.l1.heuristic import HeuristicExtractor, HeuristicJudge
from mnemoflow.ports.llm import LLM


def l1_engines(llm: LLM | None) -> tuple[Extractor, DedupJudge]:
    if llm is None:
        return HeuristicExtractor(), HeuristicJudge()
    return LLMExtractor(llm, fallback=HeuristicExtractor()), LLMDedupJudge(llm, fallback=HeuristicJudge())
