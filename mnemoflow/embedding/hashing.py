r"""A deterministic, dependency-free embedder: feature hashing of word unigrams and bigrams.

Why: unit tests and the heuristic engine need vectors where shared words mean higher cosine, identical across
processes and machines (so ``hash()``, which is salted per process, is not used), with no model to install.
It knows nothing about synonyms; quality numbers for it are reported as such. Its words are the lexical terms of
:mod:`mnemoflow.lexical` (Chinese segmented; for other scripts the same lower-cased ``\w+`` words as v1, so v1 and
v2 vectors differ only for Chinese and Japanese text).
"""

from __future__ import annotations

import hashlib
import math
from itertools import pairwise

from mnemoflow.lexical import terms

_BIGRAM_WEIGHT = 0.5
"""Bigrams add word order without drowning out the shared-word signal."""
_EMPTY_FEATURE = "\x00empty"
"""Texts without words map to one fixed unit vector instead of a zero vector, which has no direction."""


class HashingEmbedder:
    """The Embedder port by signed feature hashing (blake2b) into ``dim`` buckets, L2-normalised."""

    def __init__(self, dim: int = 384) -> None:
        if dim < 8:
            raise ValueError("HashingEmbedder needs dim >= 8")
        self._dim = dim

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def model_id(self) -> str:
        return f"hashing-uni-bi-v2-{self._dim}"

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self._one(text) for text in texts]

    embed_query = embed  # symmetric

    def _one(self, text: str) -> list[float]:
        words = terms(text)
        features = [(w, 1.0) for w in words] + [(f"{a} {b}", _BIGRAM_WEIGHT) for a, b in pairwise(words)]
        vec = [0.0] * self._dim
        for feature, weight in features or [(_EMPTY_FEATURE, 1.0)]:
            digest = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little")
            vec[(digest >> 1) % self._dim] += weight if digest & 1 else -weight
        norm = math.sqrt(sum(x * x for x in vec))
        if norm == 0.0:  # features cancelled out exactly; fall back to the fixed empty-text direction
            return self._one("")
        return [x / norm for x in vec]
