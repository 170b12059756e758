"""Per-topic stream handlers: the stream plane's logic, runtime-free, driven by Faust in ``streams/`` and inline
by tests.

A handler takes a batch of raw records and returns a typed outcome: what it wrote, the jobs to publish and the
records to park with their reasons. The wiring produces what the outcome lists, then acknowledges the batch.
Every handler retries and parks through one :class:`~mnemoflow.retry.RetryPolicy`, reads time from the
:class:`~mnemoflow.ports.Clock` port, and does its file work off the event loop (:class:`WriterThread`).
"""

from mnemoflow.handlers.commands import CommandsHandler
from mnemoflow.handlers.context import Blocking, HandlerContext, WriterThread
from mnemoflow.handlers.l1_jobs import L1Done, L1JobsHandler, L1Runner
from mnemoflow.handlers.outcome import JobsOutcome, Message, Outcome, ToolResultsOutcome, TurnsOutcome
from mnemoflow.handlers.records import DeadLetter, RawRecord
from mnemoflow.handlers.tool_results import ShardNotifier, ToolResultsHandler
from mnemoflow.handlers.turns import TurnsHandler

__all__ = [
    "Blocking",
    "CommandsHandler",
    "DeadLetter",
    "HandlerContext",
    "JobsOutcome",
    "L1Done",
    "L1JobsHandler",
    "L1Runner",
    "Message",
    "Outcome",
    "RawRecord",
    "ShardNotifier",
    "ToolResultsHandler",
    "ToolResultsOutcome",
    "TurnsHandler",
    "TurnsOutcome",
    "WriterThread",
]
