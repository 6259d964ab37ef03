"""Per-sample scores of a sample set and their statistics, and the caches of ``psf eval``
(forethought.psf.evaluate): every metric and every bootstrap resample is a function of a set's :class:`Scores`.

The scores come from the true generator on the planted corpus (exact NLL, persistence, coherence;
``prompted_scores`` for continuations of a prompt) or from a judge LM's pass on a text corpus."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from forethought.core.errors import ForethoughtError
from forethought.core.io import atomic_write_text
from forethought.data.planted import (
    PlantedGenerator,
    block_coherence,
    block_log_emissions,
    forward,
    persistence,
    token_nll,
    topic_posteriors,
)
from forethought.eval.curves import ppl_at_entropy
from forethought.eval.diversity import ngram_repetition
from forethought.eval.judge import JudgePass, unigram_entropy
from forethought.eval.stats import percentile_interval

REPETITION_N = (2, 3, 4)
LEVEL = 0.95

# ---- per-sample scores and their statistics -----------------------------------------------------------------

@dataclass
class Scores:
    """Per-sample measurements of one set; every metric and its bootstrap is a function of these."""

    nll: np.ndarray  # (n,) summed NLL (nats) of each sample's scored tokens
    tokens: np.ndarray  # (n,) scored tokens of each sample
    entropy: np.ndarray  # (n,) unigram entropy (nats)
    repetition: dict[int, np.ndarray]  # n -> (n,) rep-n per sample (nan when shorter than n)
    extra: dict[str, np.ndarray]  # planted: persistence, block_coherence per sample
    features: np.ndarray | None  # (n, d) MAUVE features (text corpora)

    def __len__(self) -> int:
        return len(self.nll)


def id_scores(rows: list[list[int]]) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """Unigram entropy and rep-n of each row of token ids."""
    return (np.array([unigram_entropy(r) for r in rows], dtype=np.float64),
            {n: ngram_repetition(rows, n) for n in REPETITION_N})


def planted_scores(gen: PlantedGenerator, ids: np.ndarray) -> Scores:
    """The true generator's judgement of (n, T) planted documents."""
    entropy, rep = id_scores(np.asarray(ids).tolist())
    T = gen.document_tokens
    return Scores(token_nll(gen, ids) * T, np.full(len(ids), T, dtype=np.int64), entropy, rep,
                  {"persistence": persistence(gen, ids), "block_coherence": block_coherence(gen, ids)}, None)


def prompted_scores(gen: PlantedGenerator, ids: np.ndarray, m: int) -> dict[str, np.ndarray]:
    """How (n, T) planted documents whose first ``m`` blocks were a prompt continue it, per document (n,):

    - ``junction_stay``: p(z_{m+1} = z_m | x), the posterior probability that the first continued block keeps
      the prompt's last topic (true continuations average ``stay_prob``, by the tower rule);
    - ``continuation_nll``: -(log p(x) - log p(blocks 1..m)) / continued tokens, the exact NLL per token of the
      continuation given the prompt (log p(blocks 1..m) from the forward pass: later blocks marginalise out);
    - ``continuation_persistence``: the posterior-expected fraction of consecutive continued block pairs
      (m+1, m+2) .. (K-1, K) that keep their topic (nan when fewer than two blocks are continued)."""
    K, T = gen.blocks, gen.document_tokens
    if not 1 <= m < K:
        raise ForethoughtError(f"a prompt of {m} blocks leaves nothing to continue in {K}-block documents"
                               if m >= K else f"a prompt needs at least one block, got {m}")
    post = topic_posteriors(gen, ids)
    alpha = forward(gen, block_log_emissions(gen, ids))[0]  # (n, K, M)
    a = alpha[:, m - 1]
    top = a.max(-1, keepdims=True)
    log_prompt = (top + np.log(np.exp(a - top).sum(-1, keepdims=True)))[:, 0]
    stays = np.einsum("bkii->bk", post.pairs)  # (n, K-1): p(z_{k+1} = z_k | x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no continued pair: nan
        inside = stays[:, m:].mean(1) if m < K - 1 else np.full(len(stays), np.nan)
    return {"junction_stay": stays[:, m - 1],
            "continuation_nll": -(post.log_px - log_prompt) / (T - m * gen.block_tokens),
            "continuation_persistence": inside}


def judge_scores(jp: JudgePass, cap: int | None, mauve_cap: int | None = None) -> Scores:
    """A judge pass (forethought.eval.judge.JudgePass) cut to ``cap`` judge tokens; the MAUVE features of each
    text cut to ``mauve_cap`` tokens instead when given (MAUVE@N, e.g. the paper's MAUVE@512)."""
    r = jp.result(cap)
    rows = [ids[:cap] if cap is not None else ids for ids in jp.ids]
    entropy, rep = id_scores(rows)
    nll = np.where(r.token_counts > 0, np.nan_to_num(r.nll_per_token) * r.token_counts, 0.0)
    features = r.features if mauve_cap is None else jp.result(mauve_cap).features
    return Scores(nll, r.token_counts, entropy, rep, {}, features)


def metrics(s: Scores, idx: np.ndarray | None = None) -> dict[str, Any]:
    """Every per-sample metric of a set (``idx`` None) or of each of its resamples (``idx`` (B, n): arrays (B,)).
    gen-PPL = exp(token-weighted mean NLL); rep-n = the mean over samples that have n-grams."""
    def take(a: np.ndarray) -> np.ndarray:
        return a[None] if idx is None else a[idx]  # (B, n)

    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a resample with no scored token / no n-gram: nan
        tokens = take(s.tokens).sum(-1)
        nll = take(s.nll).sum(-1) / tokens
        out = {"gen_ppl": np.exp(nll), "nll_per_token": nll, "entropy": take(s.entropy).mean(-1)}
        out.update({f"repetition_{n}": np.nanmean(take(r), -1) for n, r in s.repetition.items()})
        out.update({k: take(v).mean(-1) for k, v in s.extra.items()})
    return {k: float(v[0]) for k, v in out.items()} if idx is None else out


def interval(values: np.ndarray) -> list[float] | None:
    iv = percentile_interval(values, LEVEL)
    return None if iv is None else [iv[0], iv[1]]


def matched(points: list[tuple[float, float]], target: float) -> float:
    """gen-PPL at ``target`` on a sweep, nan when not bracketed (or a point is degenerate)."""
    if not all(math.isfinite(e) and math.isfinite(p) and p > 0 for e, p in points) or not math.isfinite(target):
        return math.nan
    v = ppl_at_entropy(points, target)
    return math.nan if v is None else v


def none_if_nan(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


# ---- caching -------------------------------------------------------------------------------------------------

def cache_key(**fields: Any) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:12]


def run_fingerprint(run: Path) -> str:
    """The trained run a sample set comes from: its results.json (rewritten whenever it trains; a rerun that
    only skips finished stages leaves it as it was)."""
    p = run / "results.json"
    data = p.read_bytes() if p.is_file() else str(sorted(x.name for x in run.glob("step-*"))).encode()
    return hashlib.sha256(data).hexdigest()[:16]


def cached_samples(path: Path, make: Callable[[], tuple[list[list[int]], list[str]]]
                   ) -> tuple[list[list[int]], list[str], float, bool]:
    """(ids, texts, sampling seconds, cached) from ``path`` when present, else ``make()`` written there atomically."""
    if path.is_file():
        try:
            d = json.loads(path.read_text())
            return d["ids"], d["texts"], d["wall_s"], True
        except (ValueError, KeyError, TypeError):
            pass  # a cache file from an older layout or torn: sample again
    t0 = time.perf_counter()
    ids, texts = make()
    wall = time.perf_counter() - t0
    atomic_write_text(path, json.dumps({"ids": ids, "texts": texts, "wall_s": wall}))
    return ids, texts, wall, False


def cached_pass(path: Path, make: Callable[[], Any]) -> tuple[Any, bool]:
    """A judge pass (forethought.eval.judge.JudgePass) from ``path`` when present, else ``make()`` saved there."""
    if path.is_file():
        with contextlib.suppress(ForethoughtError):
            return JudgePass.load(path), True
    jp = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    jp.save(path)
    return jp, False
