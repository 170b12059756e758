"""The user owns the memory: operations that edit, delete, remember, erase and import, applied in order with
the turns by the worker that owns the user (:mod:`~mnemoflow.governance.operations`), plus export, reindex and
the reads of the atom management API. Runtime-free: the stream worker and the extractor deployment wire it.
"""
