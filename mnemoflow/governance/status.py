"""Where operations' outcomes live: ``<tenant>/operations/<id>.json``, one small file per operation.

The API writes ``pending`` before it publishes the event (so an id it answered with is never unknown), the
worker that applies the operation writes ``applied`` or ``failed``. A file holds the kind, the body's digest and
counts or ids, never memory content: it stays after an erase without keeping anything of the user.
"""

from __future__ import annotations

from mnemoflow.governance.operations import OperationStatus
from mnemoflow.ids import check_id
from mnemoflow.ports import FileStore


def status_path(tenant: str, operation_id: str) -> str:
    return f"{check_id(tenant)}/operations/{check_id(operation_id)}.json"


class OperationLog:
    def __init__(self, files: FileStore) -> None:
        self._files = files

    def get(self, tenant: str, operation_id: str) -> OperationStatus | None:
        data = self._files.read_bytes(status_path(tenant, operation_id))
        return OperationStatus.model_validate_json(data) if data is not None else None

    def put(self, tenant: str, status: OperationStatus) -> None:
        self._files.write_atomic(status_path(tenant, status.id), status.model_dump_json().encode())
