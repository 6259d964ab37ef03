"""Within-sample repetition of token ids: distinct-n and n-gram repetition, per sample.

Low-entropy samples often get there by repeating themselves; these measures say how much, beside the unigram
entropy (forethought.eval.judge.unigram_entropy). They take ragged rows (lists of ids) as well as (N, T) arrays.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def _rows(ids: np.ndarray | Sequence[Sequence[int]]) -> list[list[int]]:
    return np.asarray(ids).tolist() if isinstance(ids, np.ndarray) else [list(map(int, r)) for r in ids]


def distinct_ngrams(ids: np.ndarray | Sequence[Sequence[int]], n: int) -> np.ndarray:
    """Per row: distinct n-grams / n-grams (1 = no n-gram repeats within the row; nan for a row shorter than n)."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    out = []
    for row in _rows(ids):
        grams = [tuple(row[i:i + n]) for i in range(len(row) - n + 1)]
        out.append(len(set(grams)) / len(grams) if grams else math.nan)
    return np.array(out, dtype=np.float64)


def ngram_repetition(ids: np.ndarray | Sequence[Sequence[int]], n: int) -> np.ndarray:
    """Per row: the fraction of its n-grams that repeat an n-gram seen earlier in the same row, i.e.
    1 - distinct-n (0 = no repeats; (T - n) / (T - n + 1) for one token repeated; nan for a row shorter
    than n). ``rep-n`` of Welleck et al. (2020), per sample."""
    return 1.0 - distinct_ngrams(ids, n)
