"""What a session shard answers the API about one session, as models: typed across the Ray call, and the HTTP
response models of ``/v1/sessions/{session}/compact`` (the session's state is
:class:`~mnemoflow.offload.session_state.SessionState` itself)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from mnemoflow.offload.compact import CompactResult, Removed
from mnemoflow.offload.injector import CanvasText
from mnemoflow.offload.messages import Message
from mnemoflow.offload.reclaim import Level


class CompactReply(BaseModel):
    """One compaction turn: the messages to send, every tool output not in them verbatim and where its raw bytes
    live, the active canvas, how hard the prompt was reclaimed, and its size before and after."""

    model_config = ConfigDict(frozen=True)

    messages: list[Message] = Field(description="The chat array to send, canvas injected and reclaim applied.")
    removed: list[Removed]
    canvas: CanvasText | None = None
    level: Level
    tokens_before: int
    tokens_after: int
    shard_ms: float = Field(
        0.0,
        description="Time the compaction took in the session's shard, ms, from the call's arrival (a wait for the "
        "session's lock included) to its reply; the rest of what a caller waited is the call's hop.",
    )

    @classmethod
    def of(cls, result: CompactResult) -> CompactReply:
        return cls(
            messages=result.messages,
            removed=result.removed,
            canvas=result.canvas,
            level=result.level,
            tokens_before=result.tokens_before,
            tokens_after=result.tokens_after,
        )


class CompactRefused(BaseModel):
    """The shard refused a compaction request before writing anything (a malformed message array): the API
    answers 4xx with ``reason``."""

    model_config = ConfigDict(frozen=True)

    reason: str
