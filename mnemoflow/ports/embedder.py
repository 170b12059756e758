"""Embedder port: turns texts into fixed-size, unit-length vectors for the L1 index and recall (docs/DESIGN.md §6).

Contract (every adapter):

* **Sync and CPU-bound.** ``embed`` blocks while it computes (ONNX inference, hashing) or waits for an
  embeddings endpoint. Async callers run it in a worker thread or behind the Serve ``embedder`` deployment
  explicitly; there is no ``async`` twin that only wraps a thread.
* **Batched.** ``embed`` takes a batch and returns one vector per text, in order; adapters split large batches
  internally. An empty list returns an empty list.
* **Shape and norm.** Every vector has ``dim`` floats and unit L2 norm, so cosine similarity is a dot product.
  The empty string is a valid text and gets a valid unit vector.
* **Identified.** ``model_id`` names the model and its weights precisely enough that vectors with equal ids are
  comparable; the vector store records it and refuses to mix ids.
* **Queries apart.** ``embed_query`` embeds search queries, ``embed`` what is searched (atoms). Models trained
  with asymmetric prefixes (e5: ``query:``/``passage:``) differ between the two; symmetric models return the
  same vectors from both.
* **Deterministic per text.** Embedding a text alone or inside a batch gives the same vector up to float
  rounding (int8 models: cosine >= 0.999), so batching is an optimisation, never a change of meaning.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Embedder(Protocol):
    """Texts to unit vectors; see the module docstring for the contract."""

    @property
    def dim(self) -> int: ...

    @property
    def model_id(self) -> str: ...

    def embed(self, texts: list[str]) -> list[list[float]]: ...

    def embed_query(self, texts: list[str]) -> list[list[float]]: ...
