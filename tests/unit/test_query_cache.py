"""QueryCache returns exactly what the embedder would, and asks the embedder only for texts it has not seen."""

from mnemoflow.embedding import HashingEmbedder
from mnemoflow.embedding.query_cache import QueryCache
from mnemoflow.ports.embedder import Embedder


class Counting(HashingEmbedder):
    def __init__(self) -> None:
        super().__init__(dim=32)
        self.asked: list[list[str]] = []

    def embed_query(self, texts: list[str]) -> list[list[float]]:
        self.asked.append(list(texts))
        return super().embed_query(texts)


def test_vectors_are_the_embedders_and_each_text_is_embedded_once() -> None:
    inner = Counting()
    cache = QueryCache(inner, capacity=2)
    assert isinstance(cache, Embedder) and (cache.dim, cache.model_id) == (inner.dim, inner.model_id)
    texts = ["where do I live", "tea or coffee", "where do I live"]
    assert cache.embed_query(texts) == HashingEmbedder(dim=32).embed_query(texts)
    assert inner.asked == [["where do I live", "tea or coffee"]]  # duplicates in a batch embedded once
    cache.embed_query(["tea or coffee", "my cat"])
    assert inner.asked[-1] == ["my cat"]  # only the miss
    cache.embed_query(["where do I live"])  # evicted (capacity 2): embedded again
    assert inner.asked[-1] == ["where do I live"]
    cache.embed_query(["where do I live"])[0][0] = 99.0  # a caller changing its copy changes nothing kept
    assert cache.embed_query(["where do I live"]) == HashingEmbedder(dim=32).embed_query(["where do I live"])
    assert cache.embed(["atom text"]) == inner.embed(["atom text"]) and len(inner.asked) == 3
