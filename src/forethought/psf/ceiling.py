"""``forethought psf ceiling``: what a PSF-style parallel decoder can reach at best on the planted corpus.

The decoder here is not trained: it is the Bayes-optimal one, built from the planted corpus's true generator
(:mod:`forethought.data.planted`). Each source document is drawn from the generator; branch k of the decoder gets

- its **predictive state** exactly: the filtered topic distribution of block k given the source's blocks before
  it, ``p(z_k | x_<k) = p(z_{k-1} | x_<k) · T`` (block 1: the initial distribution), the most a state that never
  sees block k can tell;
- optionally the **landing token**: the first token that branch k+1 wrote at decode step 1 (as PSF's decoder reads
  it from step 2 on), which enters through ``p(f_{k+1} | z_k) = Σ_j T[z_k, j] · start[j, f_{k+1}]``;
- optionally a **code**: the source block's own topic posterior ``p(z_k | x)`` (the channel realization codes
  provide; a block identifies its topic almost surely on the default corpus).

Every branch then writes its block token by token from the exact predictive distribution: its belief over its
own topic (state · code · landing likelihood · the likelihood of the tokens it has written), mixed over the topics'
start or bigram rows. Branches never see each other's other tokens. The written documents are judged exactly
(true NLL per token, topic persistence, block coherence), against the source documents themselves.

``exact_states_landing`` is the reference level for PSF without codes: no decoder that gets no code keeps topics
better (up to the Monte Carlo error, reported as a standard error over documents). The randomness is a numpy
generator seeded with ``mix_seed("psf-ceiling", seed)``.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from forethought.core.run import Run
from forethought.core.runtime import mix_seed
from forethought.data.planted import (
    PlantedGenerator,
    block_coherence,
    block_log_emissions,
    build_generator,
    forward,
    persistence,
    sample_documents,
    token_nll,
    topic_posteriors,
)
from forethought.psf.config import CeilingConfig

CHUNK = 2048  # documents decoded at once (the bigram rows gathered per step: M·CHUNK·K·V floats)
# decoder variant -> (landing token, code)
VARIANTS = {"exact_states": (False, False), "exact_states_landing": (True, False),
            "exact_states_landing_codes": (True, True)}


def predictive_states(gen: PlantedGenerator, docs: np.ndarray) -> np.ndarray:
    """(N, T) documents -> (N, K, M) p(z_k | x_<k): the forward filter of the blocks before k, moved one step by
    the topic chain (block 1: the initial distribution)."""
    alpha, log_px = forward(gen, block_log_emissions(gen, docs))  # (N, K, M) log p(x_<=k, z_k)
    del log_px
    filt = np.exp(alpha - alpha.max(-1, keepdims=True))
    filt /= filt.sum(-1, keepdims=True)  # p(z_k | x_<=k)
    ahead = filt[:, :-1] @ gen.transition  # (N, K-1, M)
    return np.concatenate([np.broadcast_to(gen.initial, (len(docs), 1, gen.topics)), ahead], axis=1)


def draw_rows(p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One index per row of (..., C) probabilities (rows need not be normalised): (...)."""
    c = np.cumsum(p, axis=-1)
    u = rng.random(c.shape[:-1] + (1,)) * c[..., -1:]
    return np.minimum((c < u).sum(-1), p.shape[-1] - 1)


def parallel_decode(gen: PlantedGenerator, belief: np.ndarray, landing: bool, rng: np.random.Generator
                    ) -> np.ndarray:
    """The Bayes-optimal parallel decoder: (N, K, M) each branch's belief over its block's topic before it writes
    (state, times the code's posterior with codes) -> (N, K·n) documents, every block written by its own branch."""
    N, K, M = belief.shape
    n = gen.block_tokens
    log_b = np.log(np.clip(belief, 1e-300, None))
    first = draw_rows(np.exp(log_b) @ gen.start, rng)  # (N, K): decode step 1 of every branch
    log_b = log_b + np.log(gen.start[:, first]).transpose(1, 2, 0)  # (N, K, M): + log start[z, f_k]
    if landing:  # from step 2 on, branch k knows branch k+1's first token (the last branch has none)
        land = np.log(gen.transition @ gen.start)  # (M, V): log p(next block's first token | this block's topic)
        log_b[:, :-1] += land[:, first[:, 1:]].transpose(1, 2, 0)
    docs = np.empty((N, K, n), dtype=np.int64)
    docs[:, :, 0] = first
    for i in range(1, n):
        w = np.exp(log_b - log_b.max(-1, keepdims=True))
        w /= w.sum(-1, keepdims=True)  # (N, K, M)
        rows = gen.bigram[:, docs[:, :, i - 1]]  # (M, N, K, V): each topic's row after the previous token
        docs[:, :, i] = draw_rows(np.einsum("nkm,mnkv->nkv", w, rows), rng)
        log_b += np.log(np.take_along_axis(rows, docs[None, :, :, i, None], -1)[..., 0]).transpose(1, 2, 0)
    return docs.reshape(N, K * n)


def mean_se(x: np.ndarray) -> dict[str, float]:
    x = np.asarray(x, dtype=np.float64)
    return {"mean": float(x.mean()), "se": float(x.std(ddof=1) / math.sqrt(len(x)))}


def measures(gen: PlantedGenerator, docs: np.ndarray) -> dict[str, Any]:
    return {"persistence": mean_se(persistence(gen, docs)), "true_nll": mean_se(token_nll(gen, docs)),
            "block_coherence": mean_se(block_coherence(gen, docs))}


def ceiling(gen: PlantedGenerator, documents: int, seed: int) -> dict[str, Any]:
    """Source documents and every decoder variant's documents (:data:`VARIANTS`), each measured exactly."""
    rng = np.random.default_rng(mix_seed("psf-ceiling", seed))
    src = sample_documents(gen, documents, rng)[0]  # (N, T)
    states = predictive_states(gen, src)
    codes = topic_posteriors(gen, src).topics  # (N, K, M) p(z_k | x)
    out: dict[str, Any] = {"data": measures(gen, src)}
    for name, (landing, with_codes) in VARIANTS.items():
        belief = states * codes if with_codes else states
        docs = np.concatenate([parallel_decode(gen, belief[i:i + CHUNK], landing, rng)
                               for i in range(0, documents, CHUNK)])
        out[name] = measures(gen, docs)
    return out


def run(cfg: CeilingConfig, resume: str | None = None) -> dict[str, Any]:
    """``forethought psf ceiling``: ``<run>/results.json``."""
    del resume  # nothing trains
    cfg.validate()
    gen = build_generator(cfg.planted)
    t0 = time.perf_counter()
    res = {"documents": cfg.documents, "stay_prob": cfg.planted.stay_prob, "chance_stay": 1.0 / gen.topics,
           "variants": {name: {"landing": land, "codes": code} for name, (land, code) in VARIANTS.items()},
           **ceiling(gen, cfg.documents, cfg.run.seed)}
    res["wall_s"] = time.perf_counter() - t0
    Run.create(cfg.run.out_dir, cfg.run.name, cfg).start().write_results(res)
    print(report(res))
    return res


def report(res: dict[str, Any]) -> str:
    lines = [f"Bayes-optimal parallel decoders on the planted corpus ({res['documents']} documents; mean ± s.e.):",
             f"{'decoder':<28} {'persistence':>18} {'true NLL':>18} {'coherence':>18}"]
    for name in ("data", *VARIANTS):
        r = res[name]
        lines.append(f"{name:<28} " + " ".join(f"{r[k]['mean']:>10.3f} ± {r[k]['se']:.3f}"
                                                for k in ("persistence", "true_nll", "block_coherence")))
    return "\n".join(lines)
