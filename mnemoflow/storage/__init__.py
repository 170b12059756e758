"""Where the layers live on disk: the folder layout and the local FileStore adapter."""

from mnemoflow.storage.layout import Layout
from mnemoflow.storage.local import LocalFileStore

__all__ = ["Layout", "LocalFileStore"]
