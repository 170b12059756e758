"""Token counts: one exact offline tokenizer used everywhere, plus a fast calibrated estimator.

Why one tokenizer: TDAM counted with ``o200k_base`` in one place and ``cl100k_base`` in another, with three
heuristics beside (docs/tdam-spec.md §9.14), so thresholds and measurements disagreed. Here every budget decision
(reclaim, injection, benchmarks) goes through :func:`count_tokens`, which is ``o200k_base`` (the GPT-4o family
vocabulary) run by ``tiktoken``.

Where the vocabulary comes from: ``tiktoken`` downloads it at first use, which fails offline, and the ``bpe-openai``
wheel ships it but costs ~140 MB in every process that counts (it decodes every vocabulary it ships on import and
keeps Python dicts of them); ``tiktoken`` with o200k alone holds ~80 MB. Every session shard and API replica counts,
so once per machine a child process writes OpenAI's ``o200k_base.tiktoken`` from the ``bpe-openai`` wheel into
``tiktoken``'s cache (under the models directory unless ``TIKTOKEN_CACHE_DIR`` is set), checked against OpenAI's
published sha256, and every process loads it with ``tiktoken`` from there. The two give equal counts on every
message of the eval trajectories (6,331 strings, 2.36 M tokens). Measured: ~12 MB/s on one core, load ~0.5 s.

:func:`estimate_tokens` is the cheap estimate stored in record sizes (``*_tokens`` fields) and used where a count
must not cost a tokenizer pass. It is linear in four character classes, fitted by least squares against
:func:`count_tokens` on the eval trajectories (OpenHands SWE-bench + tau-bench airline, every message content
and tool-call argument string; ``python -m mnemoflow.tokens`` re-runs the fit)::

    tokens ≈ 0.3426·letters_digits + 0.3390·ascii_punct + 0.0661·whitespace + 1.0·non_ascii

(non-ASCII is pinned at 1 token/char: it is rare in this corpus and its free weight fitted negative). On that corpus
(6,331 distinct strings, 2.36 M exact tokens) the estimated total is +3.1 % (errs high, the safe side for
budgets); per string (≥ 20 tokens) the median relative error is 16.7 % and the 90th percentile 39.6 %. The old
chars/4 rule is -7.9 % in total (errs low) with a 90th percentile of 34.7 %. Use it for sizes, never for budgets.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import subprocess
import sys
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from mnemoflow.config import default_models_dir
from mnemoflow.errors import ConfigError

log = logging.getLogger(__name__)

ENCODING = "o200k_base"
W_ALNUM, W_PUNCT, W_SPACE, W_OTHER = 0.3426, 0.3390, 0.0661, 1.0
MESSAGE_OVERHEAD = 4
"""Tokens a chat template adds per message (role and separators), as OpenAI documents for its chat format."""

_PUNCT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_SPACE = frozenset(" \t\n\r\f\v")


O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
"""The file ``tiktoken`` fetches for o200k and the hash it checks it against (tiktoken_ext/openai_public.py)."""


def vocabulary_cache() -> Path:
    """The directory ``tiktoken`` reads its vocabulary files from: ``TIKTOKEN_CACHE_DIR`` if set, else one in
    the models directory (``MNEMOFLOW_MODELS_DIR`` or its default), so a fresh clone does not write it again."""
    if os.environ.get("TIKTOKEN_CACHE_DIR"):
        return Path(os.environ["TIKTOKEN_CACHE_DIR"])
    models = os.environ.get("MNEMOFLOW_MODELS_DIR")
    return (Path(models) if models else default_models_dir()) / "tiktoken"


def _cached_file(cache: Path) -> Path:
    """Where ``tiktoken`` looks for the o200k file in ``cache`` (its key is the sha1 of the download URL)."""
    return cache / hashlib.sha1(O200K_URL.encode()).hexdigest()


def write_vocabulary(cache: Path) -> None:
    """Write OpenAI's ``o200k_base.tiktoken`` (base64 token, rank, one a line) from the ``bpe-openai`` wheel's
    copy, byte for byte: checked against the published sha256, then renamed into place (a concurrent writer
    writes the same bytes). Run in a child process by :func:`_encoding`, so the wheel's memory goes with it."""
    try:
        import bpe_openai
    except ImportError:  # pragma: no cover - the wheel is a core dependency
        raise ConfigError("token counting needs the bpe-openai wheel: pip install bpe-openai") from None
    ranks = bpe_openai.get_encoding(ENCODING)._mergeable_ranks  # the wheel has no public accessor for them
    data = b"".join(base64.b64encode(token) + b" %d\n" % rank for token, rank in sorted(ranks.items(), key=_rank))
    if hashlib.sha256(data).hexdigest() != O200K_SHA256:
        raise ConfigError(f"the o200k vocabulary rebuilt from bpe-openai {bpe_openai.__version__} is not OpenAI's")
    target = _cached_file(cache)
    cache.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    partial.write_bytes(data)
    partial.replace(target)


def _is_openais(path: Path) -> bool:
    """Whether ``path`` holds OpenAI's file (tiktoken deletes a cached file that does not, then downloads)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest() == O200K_SHA256
    except FileNotFoundError:
        return False


def _rank(item: tuple[bytes, int]) -> int:
    return item[1]


@lru_cache(maxsize=1)
def _encoding() -> Any:
    import tiktoken

    cache = vocabulary_cache()
    target = _cached_file(cache)
    if not _is_openais(target):
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "mnemoflow.tokens", "--write-vocabulary", str(cache)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise ConfigError(f"could not write the o200k vocabulary to {target}: {done.stderr.strip()[-500:]}")
        log.info("wrote the o200k vocabulary to %s in %.1f s", target, time.perf_counter() - started)
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)  # tiktoken's only switch for where it reads from
    return tiktoken.get_encoding(ENCODING)


def load_tokenizer() -> None:
    """Load the vocabulary now rather than at the first count: about half a second of CPU (a few more the first
    time on a machine, to write the file) and ~80 MB of memory, which a process that counts on every request's
    path (the proxy's recall budget, a session shard's compaction) should pay when it starts, not in its first
    request."""
    _encoding()


@lru_cache(maxsize=65536)
def count_tokens(text: str) -> int:
    """Exact ``o200k_base`` token count of ``text`` (special-token strings count as plain text)."""
    if not text:
        return 0
    return len(_encoding().encode_ordinary(text))


def features(text: str) -> tuple[int, int, int, int]:
    """Counts of (letters/digits, ASCII punctuation, whitespace, non-ASCII) characters: the estimator's inputs."""
    alnum = punct = space = other = 0
    for char in text:
        if char.isascii():
            if char in _SPACE:
                space += 1
            elif char in _PUNCT:
                punct += 1
            else:
                alnum += 1
        else:
            other += 1
    return alnum, punct, space, other


def estimate_tokens(text: str) -> int:
    """Fast calibrated estimate of :func:`count_tokens` (see the module docstring for its error)."""
    if not text:
        return 0
    if text.isascii():
        space = sum(text.count(c) for c in _SPACE)
        punct = sum(text.count(c) for c in _PUNCT)
        alnum, other = len(text) - space - punct, 0
    else:
        alnum, punct, space, other = features(text)
    return max(1, round(W_ALNUM * alnum + W_PUNCT * punct + W_SPACE * space + W_OTHER * other))


def message_text(message: dict[str, Any]) -> str:
    """The text of a chat message that a model reads: content plus tool-call names, ids and arguments."""
    content = message.get("content")
    parts = [content if isinstance(content, str) else "" if content is None else str(content)]
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        parts.append(f"{call.get('id', '')} {function.get('name', '')} {function.get('arguments', '')}")
    if message.get("tool_call_id"):
        parts.append(str(message["tool_call_id"]))
    return "\n".join(p for p in parts if p)


def message_tokens(message: dict[str, Any]) -> int:
    """Exact tokens of one chat message including the per-message template overhead."""
    return count_tokens(message_text(message)) + MESSAGE_OVERHEAD


def messages_tokens(messages: list[dict[str, Any]]) -> int:
    """Exact tokens of a chat array: what the budget rules of reclaim compare with the window."""
    return sum(message_tokens(m) for m in messages)


def _fit(directory: str) -> None:  # pragma: no cover - calibration tool, run by hand
    """Refit the estimator's weights on trajectories and print weights and errors."""
    import importlib.util
    import statistics

    import numpy as np

    spec = importlib.util.spec_from_file_location("loaders", f"{directory}/loaders.py")
    assert spec and spec.loader
    loaders = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaders)
    texts = [
        message_text(m)
        for sub in ("trajectories/openhands_swebench_verified", "trajectories/tau_bench_airline")
        for traj in loaders.load_trajectories(f"{directory}/{sub}")
        for m in traj
    ]
    texts = [t for t in dict.fromkeys(texts) if t]
    x = np.array([features(t) for t in texts], dtype=float)
    y = np.array([count_tokens(t) for t in texts], dtype=float)
    # Non-ASCII is rare here (its free weight fits negative); it is pinned at 1 token/char, the rest fitted.
    # Unweighted least squares: it gets totals (what budgets add up) right; weighting rows by 1/tokens was tried
    # and cut the per-string p90 to 29 % but under-counted the total by 13 %.
    fitted, *_ = np.linalg.lstsq(x[:, :3], y - x[:, 3] * W_OTHER, rcond=None)
    weights = [*fitted, W_OTHER]
    pred = x @ np.array(weights)
    big = y >= 20
    rel = np.abs(pred[big] - y[big]) / y[big]
    old = np.abs(np.array([len(t) / 4 for t in texts])[big] - y[big]) / y[big]
    print("weights", [round(float(w), 4) for w in weights], "strings", len(texts), "tokens", int(y.sum()))
    print(
        "total error",
        round(float(pred.sum() / y.sum() - 1), 4),
        "median",
        round(statistics.median(rel), 4),
        "p90",
        round(float(np.quantile(rel, 0.9)), 4),
    )
    print("chars/4 total", round(sum(len(t) for t in texts) / 4 / y.sum() - 1, 4), "p90", np.quantile(old, 0.9))


if __name__ == "__main__":  # pragma: no cover
    if len(sys.argv) == 3 and sys.argv[1] == "--write-vocabulary":
        write_vocabulary(Path(sys.argv[2]))
        sys.exit(0)
    if len(sys.argv) != 2:
        sys.exit(
            "usage: python -m mnemoflow.tokens EVAL_DIR   (refit the estimator on the folder holding loaders.py)\n"
            "       python -m mnemoflow.tokens --write-vocabulary DIR   (what count_tokens runs once a machine)"
        )
    _fit(sys.argv[1])
