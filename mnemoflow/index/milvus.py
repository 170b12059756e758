"""Milvus VectorStore: one collection, dense FLAT + BM25 full-text, hybrid search with ``RRFRanker(RRF_K)``.

Why: this is the cluster shape of the index; Milvus Lite embeds the same API in a local file, so the same
adapter runs in CI and against a server. Lite 2.5.1 allows one process per file. Layout, and the Lite
limitations it works around, are in :mod:`mnemoflow.index._milvus_schema`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from mnemoflow.errors import StorageError
from mnemoflow.index import _milvus_schema as schema
from mnemoflow.index._common import (
    StoreIdentity,
    candidate_depth,
    check_k,
    check_rows,
    check_scope,
    check_types,
    check_vector,
    check_visible,
    with_vector,
)
from mnemoflow.index._milvus_schema import lit, primary_key, scope_filter, translate
from mnemoflow.lexical import analysed, terms
from mnemoflow.ports.vectors import RRF_K, AtomRow, AtomType, EmbedFn, Hit
from mnemoflow.scopes import SHARED

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FIELDS = [*schema.SCALARS, "dense"]


def _us(ts: datetime) -> int:
    return (ts - _EPOCH) // timedelta(microseconds=1)


def _row(e: dict[str, Any]) -> AtomRow:
    # Trusted: written by upsert after validation; float32 values come back as the floats we wrote.
    return AtomRow.model_construct(
        id=e["atom_id"],
        tenant=e["tenant"],
        user=e["user"],
        type=e["type"],
        priority=int(e["priority"]),
        text=e["text"],
        context=e.get("context", ""),
        vector=[float(x) for x in e["dense"]],
        source_message_ids=json.loads(e["sources"]),
        created=_EPOCH + timedelta(microseconds=e["created_us"]),
        updated=_EPOCH + timedelta(microseconds=e["updated_us"]),
        scope=e.get("scope", SHARED),
    )


def _entity(row: AtomRow) -> dict[str, Any]:
    return {
        "pk": primary_key(row.tenant, row.user, row.id),
        "atom_id": row.id,
        "tenant": row.tenant,
        "user": row.user,
        "type": row.type,
        "priority": row.priority,
        "text": row.text,
        "context": row.context,
        "terms": analysed(row.search_text) or "_",
        "created_us": _us(row.created),
        "updated_us": _us(row.updated),
        "sources": json.dumps(row.source_message_ids),
        "scope": row.scope,
        "dense": row.vector,
    }


class MilvusVectorStore(StoreIdentity):
    """:class:`~mnemoflow.ports.vectors.VectorStore` over Milvus or Milvus Lite. Sync; open with :meth:`open`.

    ``fusion="server"`` runs Milvus' hybrid search with ``RRFRanker(RRF_K)`` (one round trip; the hits carry no
    per-list ranks); ``"client"`` runs both searches and fuses in Python, filling ``dense_rank``/``bm25_rank``.
    """

    def __init__(
        self,
        client: Any,
        name: str,
        *,
        dim: int,
        embedding_model: str,
        candidates: int,
        timeout: float,
        fusion: Literal["server", "client"],
    ) -> None:
        self._client, self._name, self._dim, self._model = client, name, dim, embedding_model
        self._candidates, self._timeout, self._fusion = candidates, timeout, fusion
        self._stored: tuple[str | None, int | None] = (embedding_model, dim)

    @classmethod
    def open(
        cls,
        uri: str,
        *,
        dim: int,
        embedding_model: str,
        collection: str = "mnemoflow_atoms",
        token: str = "",
        candidates: int = 50,
        timeout: float = 30.0,
        fusion: Literal["server", "client"] = "server",
    ) -> MilvusVectorStore:
        """Connect (a ``*.db`` path starts Milvus Lite) and create the collection if it is missing."""
        pymilvus = schema.vendor()
        with translate():
            client = pymilvus.MilvusClient(uri=uri, token=token)
            if not client.has_collection(collection, timeout=timeout):
                schema.create_atoms(client, collection, dim, timeout)
            store = cls(
                client,
                collection,
                dim=dim,
                embedding_model=embedding_model,
                candidates=candidates,
                timeout=timeout,
                fusion=fusion,
            )
            store._stored = schema.ensure_meta(client, collection, embedding_model, dim, timeout)
            present = schema.field_names(client, collection, timeout)
            if not {"terms", "context", "scope"} <= present:
                store._relayout(store._stored[1] or dim, [f for f in _FIELDS if f in present])
        return store

    @staticmethod
    def recorded_model(
        uri: str, *, collection: str = "mnemoflow_atoms", token: str = "", timeout: float = 30.0
    ) -> str | None:
        """The embedding model the collection was built with (None: not built yet), read before choosing the
        embedder that :meth:`open` must be given.

        The client is not closed: pymilvus keys its connection by URI and token, so every client of this process
        for the same server shares it (a store opened before or after), and closing it would cut theirs too."""
        pymilvus = schema.vendor()
        with translate():
            client = pymilvus.MilvusClient(uri=uri, token=token)
            return schema.recorded_model(client, collection, timeout)

    def _read_all(self, fields: list[str] = _FIELDS) -> list[AtomRow]:
        it = self._client.query_iterator(self._name, batch_size=1000, filter='pk != ""', output_fields=fields)
        rows: list[AtomRow] = []
        while batch := it.next():
            rows += [_row(e) for e in batch]
        it.close()
        return rows

    def _relayout(self, dim: int, fields: list[str]) -> None:
        """Recreate a collection of an older layout (BM25 over raw ``text``, or no ``context`` or ``scope``) in the
        current one, rows unchanged (an atom without context gets an empty one, without scope the shared scope it
        had in effect). ``fields``: those the old collection has."""
        rows = self._read_all(fields)
        self._client.drop_collection(self._name, timeout=self._timeout)
        schema.create_atoms(self._client, self._name, dim, self._timeout)
        for start in range(0, len(rows), 1000):
            self._client.upsert(self._name, [_entity(r) for r in rows[start : start + 1000]], timeout=self._timeout)

    def _filter(self, tenant: str, user: str, types: Sequence[str] | None, visible: Sequence[str] | None = None) -> str:
        check_scope(tenant, user)
        expr = scope_filter(tenant, user)
        seen = check_visible(visible)
        if types is not None:
            expr += f" and type in [{', '.join(lit(t) for t in types)}]"
        if seen is not None:
            expr += f" and scope in [{', '.join(lit(v) for v in seen)}]"
        return expr

    def upsert(self, rows: Sequence[AtomRow]) -> None:
        self._fresh()
        data = [_entity(r) for r in check_rows(rows, self._dim)]
        with translate():
            for start in range(0, len(data), 1000):
                self._client.upsert(self._name, data[start : start + 1000], timeout=self._timeout)

    def _query(self, expr: str, fields: list[str]) -> list[dict[str, Any]]:
        with translate():
            return list(self._client.query(self._name, filter=expr, output_fields=fields, timeout=self._timeout))

    def delete(self, tenant: str, user: str, ids: Sequence[str]) -> int:
        if not ids:
            return 0
        expr = f"{self._filter(tenant, user, None)} and atom_id in [{', '.join(lit(i) for i in set(ids))}]"
        pks = [r["pk"] for r in self._query(expr, ["pk"])]
        if pks:
            with translate():
                self._client.delete(self._name, ids=pks, timeout=self._timeout)
        return len(pks)

    def get(self, tenant: str, user: str, ids: Sequence[str]) -> list[AtomRow]:
        if not ids:
            return []
        expr = f"{self._filter(tenant, user, None)} and atom_id in [{', '.join(lit(i) for i in set(ids))}]"
        found = {e["atom_id"]: _row(e) for e in self._query(expr, _FIELDS)}
        return [found[i] for i in ids if i in found]

    def _search(self, data: Any, field: str, metric: str, expr: str, k: int) -> list[tuple[float, AtomRow]]:
        with translate():
            res = self._client.search(
                self._name,
                data=[data],
                anns_field=field,
                filter=expr,
                limit=k,
                search_params={"metric_type": metric},
                output_fields=_FIELDS,
                timeout=self._timeout,
            )
        return [(float(h["distance"]), _row(h["entity"])) for h in res[0]]

    def dense_search(
        self,
        tenant: str,
        user: str,
        query_vector: Sequence[float],
        k: int,
        types: Sequence[AtomType] | None = None,
        visible: Sequence[str] | None = None,
    ) -> list[Hit]:
        self._fresh()
        check_k(k)
        expr, vec = self._filter(tenant, user, check_types(types), visible), check_vector(query_vector, self._dim)
        found = self._search(vec, "dense", "COSINE", expr, k)
        return [Hit(id=r.id, score=s, dense_rank=i, row=r) for i, (s, r) in enumerate(found, start=1)]

    def bm25_search(
        self,
        tenant: str,
        user: str,
        query_text: str,
        k: int,
        types: Sequence[AtomType] | None = None,
        visible: Sequence[str] | None = None,
    ) -> list[Hit]:
        check_k(k)
        expr = self._filter(tenant, user, check_types(types), visible)
        if not terms(query_text):
            return []
        try:
            found = self._search(analysed(query_text), "sparse", "BM25", expr, k)
        except StorageError as exc:
            if not self._no_rows_for_bm25(exc):
                raise
            return []
        return [Hit(id=r.id, score=s, bm25_rank=i, row=r) for i, (s, r) in enumerate(found, start=1)]

    def _no_rows_for_bm25(self, exc: StorageError) -> bool:
        """Milvus keeps BM25's statistics over the whole collection; with no row at all the query's sparse row is
        NaN and the search fails ("Invalid sparse row: NaN or Inf", seen on Milvus Lite 2.5.1 before the first
        atom of a new deployment). An empty index simply has no hit."""
        return "NaN or Inf" in str(exc) and int(self._query('pk != ""', ["count(*)"])[0]["count(*)"]) == 0

    def search(
        self,
        tenant: str,
        user: str,
        query_text: str,
        query_vector: Sequence[float],
        k: int,
        types: Sequence[AtomType] | None = None,
        visible: Sequence[str] | None = None,
    ) -> list[Hit]:
        if self._fusion == "client" or not terms(query_text):
            return super().search(tenant, user, query_text, query_vector, k, types, visible)
        check_k(k)
        depth = candidate_depth(k, self._candidates)
        self._fresh()
        pymilvus = schema.vendor()
        expr = self._filter(tenant, user, check_types(types), visible)
        vec = check_vector(query_vector, self._dim)
        reqs = [
            pymilvus.AnnSearchRequest([vec], "dense", {"metric_type": "COSINE"}, limit=depth, expr=expr),
            pymilvus.AnnSearchRequest(
                [analysed(query_text)], "sparse", {"metric_type": "BM25"}, limit=depth, expr=expr
            ),
        ]
        try:
            with translate():
                res = self._client.hybrid_search(
                    self._name, reqs, pymilvus.RRFRanker(RRF_K), limit=k, output_fields=_FIELDS, timeout=self._timeout
                )
        except StorageError as exc:
            if not self._no_rows_for_bm25(exc):
                raise
            return []
        hits = [(float(h["distance"]), _row(h["entity"])) for h in res[0]]
        hits.sort(key=lambda sr: (-sr[0], sr[1].id))  # same tie-break as rrf_fuse
        return [Hit(id=r.id, score=s, row=r) for s, r in hits]

    def count(self, tenant: str, user: str | None = None) -> int:
        check_scope(tenant, user)
        expr = f"tenant == {lit(tenant)}" if user is None else scope_filter(tenant, user)
        return int(self._query(expr, ["count(*)"])[0]["count(*)"])

    def reembed(self, embed_fn: EmbedFn, batch_size: int = 256) -> int:
        """Read every row, rebuild the collection at the configured dim, write new vectors, record the model.

        Not atomic on Milvus: if it fails midway, run it again (it starts over from the rows it read)."""
        with translate():
            rows = self._read_all()
            if self._stored[1] != self._dim:
                self._client.drop_collection(self._name, timeout=self._timeout)
                schema.create_atoms(self._client, self._name, self._dim, self._timeout)
        for start in range(0, len(rows), batch_size):
            batch = rows[start : start + batch_size]
            vectors = embed_fn([r.search_text for r in batch])
            new = [with_vector(r, check_vector(v, self._dim)) for r, v in zip(batch, vectors, strict=True)]
            with translate():
                self._client.upsert(self._name, [_entity(r) for r in new], timeout=self._timeout)
        with translate():
            schema.write_meta(self._client, self._name, self._model, self._dim, self._timeout)
        self._stored = (self._model, self._dim)
        return len(rows)

    def close(self) -> None:
        try:
            self._client.close()
        except Exception as exc:  # the client raises gRPC and pymilvus types; callers only need to know
            raise StorageError(f"closing milvus vector store: {exc}") from exc
