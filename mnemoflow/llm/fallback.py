"""Where a model stage hands one item to its heuristic engine, so that every stage logs and counts it alike.

Why fall back instead of failing: a reply that is still invalid after the repair try (or, for the offload stages,
a model that does not answer) must not leave a broken file or fail the agent's request; the heuristic engine's
output for that one item is always valid. The count (``StageTotals.fallbacks``, the ``mnemoflow_llm_fallbacks``
metric) is how an operator sees that the model is not doing a stage's work.
"""

from __future__ import annotations

import logging

from mnemoflow.ports.llm import LLM

log = logging.getLogger(__name__)


def fell_back(llm: LLM, stage: str, error: BaseException) -> None:
    """Record that ``stage`` gave an item to its heuristic engine after ``error``."""
    log.warning(
        "stage %s: the model's reply was unusable (%s: %s); the heuristic engine did this item",
        stage,
        type(error).__name__,
        str(error)[:300],
    )
    llm.usage.fallback(stage, error)
