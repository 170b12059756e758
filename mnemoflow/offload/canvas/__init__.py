"""The task canvas: a typed graph a model edits through validated operations, rendered to Mermaid and parsed back."""

from mnemoflow.offload.canvas.model import STATUSES, Canvas, CanvasEdge, CanvasEngine, CanvasNode, Status
from mnemoflow.offload.canvas.ops import (
    MAX_OPS,
    AddEdge,
    AddNode,
    AssignToolCalls,
    CanvasOp,
    CanvasOps,
    SetStatus,
    UpdateNode,
    apply_ops,
)
from mnemoflow.offload.canvas.parse import from_mermaid, validate_mermaid
from mnemoflow.offload.canvas.render import fingerprint, to_mermaid

__all__ = [
    "MAX_OPS",
    "STATUSES",
    "AddEdge",
    "AddNode",
    "AssignToolCalls",
    "Canvas",
    "CanvasEdge",
    "CanvasEngine",
    "CanvasNode",
    "CanvasOp",
    "CanvasOps",
    "SetStatus",
    "Status",
    "UpdateNode",
    "apply_ops",
    "fingerprint",
    "from_mermaid",
    "to_mermaid",
    "validate_mermaid",
]
