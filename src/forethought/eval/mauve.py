"""MAUVE (Pillutla et al.) on judge features, through the mauve-text package (offline: features in, no text mode).

p = references (human text), q = model samples, both featurised by the same judge pass
(forethought.eval.judge.judge_texts) with the same ``max_tokens`` cap, so lengths are matched. mauve-text's
text mode would download gpt2-large; we never use it.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np

from forethought.core.errors import ForethoughtError


def mauve_available() -> bool:
    try:
        import mauve  # noqa: F401
    except ImportError:
        return False
    return True


def num_clusters(n_p: int, n_q: int) -> int:
    """Histogram size for MAUVE's k-means quantisation: one cluster per 10 points of the smaller set (the
    package's own 'auto' rule), at least 2 — so a few hundred samples give a few dozen clusters, not 500."""
    return max(2, round(min(n_p, n_q) / 10))


def mauve_score(p_features: np.ndarray, q_features: np.ndarray, seed: int = 0, num_buckets: int | None = None,
                scaling_factor: float = 5.0) -> float:
    """MAUVE between reference features p (n_p, d) and sample features q (n_q, d); 1 = indistinguishable.

    Seeded (PCA + k-means in the package); ``num_buckets`` defaults to :func:`num_clusters`; the scaling factor
    5 is the package's (and paper's) default. Runs on CPU (faiss-cpu).
    """
    try:
        import mauve
    except ImportError as e:
        raise ForethoughtError("MAUVE needs the packages mauve-text and faiss-cpu: pip install 'forethought[eval]' "
                               "(or pip install mauve-text==0.4.0 faiss-cpu==1.15.1)") from e
    p = np.asarray(p_features, dtype=np.float32)
    q = np.asarray(q_features, dtype=np.float32)
    if p.ndim != 2 or q.ndim != 2 or p.shape[1] != q.shape[1]:
        raise ForethoughtError(f"MAUVE needs two (n, d) feature arrays of the same d, got {p.shape} and {q.shape}")
    if min(len(p), len(q)) < 2:
        raise ForethoughtError("MAUVE needs at least 2 references and 2 samples")
    k = num_buckets if num_buckets is not None else num_clusters(len(p), len(q))
    with contextlib.redirect_stdout(io.StringIO()):  # the package prints progress even when not verbose
        out = mauve.compute_mauve(p_features=p, q_features=q, num_buckets=k, seed=seed, verbose=False,
                                  device_id=-1, mauve_scaling_factor=scaling_factor)
    return float(out.mauve)
