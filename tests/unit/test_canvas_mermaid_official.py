"""Cross-check generated canvases against the official Mermaid parser (npm ``mermaid`` + ``jsdom`` in Node).

The Python subset check proves we read back what we write; this proves real Mermaid parses it. One seeded corpus
of 200 canvases (many with hostile text) plus known-bad controls goes to ``tools/mermaid-check/check.mjs`` in a
single Node run. Without ``tools/mermaid-check/node_modules`` the test is skipped locally, but fails when ``CI``
is set (CI runs ``npm ci --prefix tools/mermaid-check`` first).
"""

from __future__ import annotations

import os
import random
import time
from datetime import UTC, datetime, timedelta

import pytest

from mnemoflow.offload.canvas import STATUSES, Canvas, CanvasEdge, CanvasNode, to_mermaid, validate_mermaid
from mnemoflow.offload.canvas._text import clean
from tests.services import official_mermaid_check

pytestmark = pytest.mark.integration

CORPUS_SIZE = 200
SEED = 20250131
FRAGMENTS = [
    '"',
    "'",
    "[",
    "]",
    "(",
    ")",
    "{",
    "}",
    "<br>",
    "<br/>",
    '<b x="1">',
    "#",
    "#quot;",
    "#35;",
    "&amp;",
    "&",
    ";",
    "%%",
    "%%{init: {}}%%",
    "}%%",
    "end",
    "END",
    "`",
    "```",
    "|",
    "-->",
    "---",
    "\\",
    "\n",
    "\r\n",
    "\t",
    "\x00",
    "\u2028",
    "\ud800",
    "😀",
    "👩‍👩‍👧",
    "中文",
    "Ω",
    "\u200b",
    "\ufeff",
    "graph TD",
    "subgraph",
    "style:#f00;",
    "classDef",
    ":::",
    ": ",
    "status: done",
    "<br/>status: doing",
    "@{ shape: rect }",
    "fix ",
    "test ",
    "error: ",
    "ok",
]
HEADER = '%%{ taskGoal: "g", progress: 0, createdTime: "2025-01-01T00:00:00Z", updatedTime: "2025-01-01T00:00:00Z" }%%'
BAD = [  # negative controls: both checkers must reject these, or the cross-check proves nothing
    HEADER
    + '\nflowchart TD\n    N1["a: say "hi"<br/>status: doing<br/>summary: <br/>Timestamp: 2025-01-01T00:00:00Z"]\n',
    '%%{ "taskGoal": "g", "progress": 0 }%%\nflowchart TD\n    N1["a: b"]\n',
    HEADER + '\nflowchart TD\n    N1["a: b<br/>status: doing<br/>summary: x"]"]\n',
]


def _text(rng: random.Random, limit: int, *, nonempty: bool = False) -> str:
    kind = rng.random()
    if kind < 0.2:
        text = "".join(rng.choice("abc xyz_-.") for _ in range(rng.randint(0, 30)))
    elif kind < 0.9:
        text = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 12)))
    else:  # very long: clipped to the field's bound with an ellipsis
        text = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(200, 600)))
    return text if not nonempty or clean(text, limit) else "x" + text


def make_corpus(size: int = CORPUS_SIZE, seed: int = SEED) -> list[Canvas]:
    """``size`` canvases, reproducible from ``seed``."""
    rng = random.Random(seed)
    t0 = datetime(2025, 1, 31, tzinfo=UTC)
    corpus = []
    for index in range(size):
        prefix = rng.choice([None, f"{index % 1000:03d}"])
        ids = [f"{prefix}-N{k}" if prefix else f"N{k}" for k in range(1, rng.randint(0, 12) + 1)]
        calls = iter(f"call_{index}_{k}" for k in range(1000))
        nodes = [
            CanvasNode(
                id=node_id,
                stage=_text(rng, 40, nonempty=True),
                action=_text(rng, 120, nonempty=True),
                status=rng.choice(STATUSES),
                summary=_text(rng, 200),
                timestamp=t0 + timedelta(seconds=rng.randint(0, 10**6)),
                tool_call_ids=[next(calls) for _ in range(rng.randint(0, 3))],
            )
            for node_id in ids
        ]
        pairs = {(rng.choice(ids), rng.choice(ids)) for _ in range(rng.randint(0, 2 * len(ids)))} if ids else set()
        edges = [
            CanvasEdge(src=s, dst=d, label=rng.choice([None, _text(rng, 60, nonempty=True)])) for s, d in sorted(pairs)
        ]
        corpus.append(
            Canvas(
                task_goal=_text(rng, 200),
                created=t0,
                updated=t0 + timedelta(days=30),
                prefix=prefix,
                nodes=nodes,
                edges=edges,
            )
        )
    return corpus


def official_check(texts: list[str]) -> list[dict[str, object]]:
    """Parse ``texts`` with the official Mermaid parser; skip locally without Node packages, fail under CI."""
    try:
        return official_mermaid_check(texts)
    except FileNotFoundError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{exc} (CI is set, so this must run)")
        pytest.skip(str(exc))


def test_every_generated_canvas_parses_in_official_mermaid() -> None:
    texts = [to_mermaid(canvas) for canvas in make_corpus()]
    assert all(validate_mermaid(text) == [] for text in texts)
    hostile = sum(any(code in text for code in ("#quot;", "#lt;", "#96;", "#37;")) for text in texts)
    assert hostile > CORPUS_SIZE // 2, "the corpus lost its hostile text"
    started = time.perf_counter()
    results = official_check(texts + BAD)
    elapsed = time.perf_counter() - started
    corpus, controls = results[: len(texts)], results[len(texts) :]
    failures = [(i, r["error"], texts[i]) for i, r in enumerate(corpus) if not r["ok"]]
    assert not failures, f"{len(failures)} of {len(texts)} canvases rejected by Mermaid; first: {failures[0]}"
    assert [r["ok"] for r in controls] == [False] * len(BAD), "the official parser accepted a known-bad text"
    assert all(validate_mermaid(text) != [] for text in BAD)
    print(f"official Mermaid accepted {len(texts)}/{len(texts)} canvases in {elapsed:.2f}s (one node run)")
