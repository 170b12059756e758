"""What handling one batch did, and what the wiring must produce before it acknowledges the batch."""

from __future__ import annotations

from dataclasses import dataclass, field

from mnemoflow.config import TOPIC_DEAD_LETTERS, TOPIC_JOBS
from mnemoflow.handlers.records import DeadLetter
from mnemoflow.memory.l1.pipeline import L1RunReply
from mnemoflow.memory.l1.schedule import L1Job, UserKey
from mnemoflow.offload.entries import SessionAppend


@dataclass(frozen=True, slots=True)
class Message:
    """A record to produce: the wiring sends it as it is."""

    topic: str
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]] | None = None


@dataclass
class Outcome:
    """``jobs`` to publish on ``mnemoflow.jobs`` and records ``parked`` with their reasons. ``job_headers``: by
    job key, the trace context a job continues (only when tracing is on)."""

    jobs: list[L1Job] = field(default_factory=list)
    parked: list[DeadLetter] = field(default_factory=list)
    job_headers: dict[str, list[tuple[str, bytes]]] = field(default_factory=dict)

    def messages(self) -> list[Message]:
        """Everything to produce: the jobs, then the dead letters."""
        traced = self.job_headers
        jobs = [
            Message(
                TOPIC_JOBS, job.key.encode(), job.model_dump_json().encode(), traced.get(job.key) if traced else None
            )
            for job in self.jobs
        ]
        dead = [Message(TOPIC_DEAD_LETTERS, d.key.encode() or None, d.model_dump_json().encode()) for d in self.parked]
        return jobs + dead


@dataclass
class TurnsOutcome(Outcome):
    """L0 lines ``written`` and turns ``skipped`` as already applied (a replay)."""

    written: int = 0
    skipped: int = 0


@dataclass
class ToolResultsOutcome(Outcome):
    """The offload entries added, per session."""

    appended: list[SessionAppend] = field(default_factory=list)


@dataclass
class JobsOutcome(Outcome):
    """The L1 passes run for the batch (catch-up runs included), by user, with the extractor's replies."""

    runs: dict[UserKey, list[L1RunReply]] = field(default_factory=dict)
