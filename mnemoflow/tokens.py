"""Token counts without a tokenizer: a fast estimate used for sizes in records.

The offload issue replaces this with a calibrated estimator beside one offline tokenizer; until then every
size in tokens is this estimate, which is what ``*_tokens`` fields mean.
"""

from __future__ import annotations

CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)
