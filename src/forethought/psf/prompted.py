"""Prompted continuations on the planted corpus, scored exactly by the true generator (``psf eval
--prompted_blocks``; benchmarks/psf_prompted.py).

The first ``n`` documents of the planted **test** split (never trained on) are the prompts: for each prompt
length m (in blocks) their first m blocks are given and every *method* (a sampler: a PSF model and prior, the
prompt's states fixed by replacement and/or as a conditioned prior's input) writes one continuation per prompt.
``true`` is the documents' own continuations (what a perfect model scores on average).

Scores (:func:`forethought.psf.scores.prompted_scores`, the true generator's forward-backward):
``junction_stay`` = p(z_{m+1} = z_m | x) (compare with ``stay_prob``; chance 1/M), ``continuation_nll`` = the exact
NLL per token of the continuation given the prompt, ``continuation_persistence`` = the posterior fraction of
consecutive continued block pairs that keep their topic. Per m: the mean over prompts with a 95 % percentile
bootstrap interval over prompts, and paired bootstrap intervals (the same prompts) of every other method (and
``true``) minus the first method. Prompt length m is sampled with seed ``1000·seed + m`` for every method.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from forethought.core.errors import ForethoughtError
from forethought.data.planted import PlantedGenerator
from forethought.eval.stats import paired_bootstrap, percentile_interval, resample_indices
from forethought.psf.sampling import device_generator
from forethought.psf.scores import prompted_scores

METRICS = ("junction_stay", "continuation_nll", "continuation_persistence")
# a method: (prompt (n, m·L/K) ids, generator) -> (n, L) ids whose first m blocks are the prompt
Sampler = Callable[[torch.Tensor, torch.Generator], torch.Tensor]


def summary(values: np.ndarray, idx: np.ndarray) -> dict[str, Any]:
    """(n,) per-prompt values -> their mean and its bootstrap interval over ``idx`` (n_boot, n) resamples (nan
    entries left out; ``mean`` None when none is finite)."""
    if not np.isfinite(values).any():
        return {"mean": None, "interval": None}
    with np.errstate(invalid="ignore"):
        boot = np.nanmean(values[idx], axis=1)  # (n_boot,)
    iv = percentile_interval(boot)
    return {"mean": float(np.nanmean(values)), "interval": list(iv) if iv else None}


def _nanmean_last(v: np.ndarray, _targets: Any = None) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.nanmean(v, axis=-1)


def check_prompt_blocks(prompt_blocks: list[int], blocks: int) -> None:
    bad = [m for m in prompt_blocks if not 1 <= m < blocks]
    if bad:
        raise ForethoughtError(f"prompted_blocks: every m must be in 1..{blocks - 1} (the documents have {blocks} "
                               f"blocks), got {bad}")


def prompted_continuations(gen: PlantedGenerator, docs: np.ndarray, methods: dict[str, Sampler],
                           prompt_blocks: list[int], seed: int, n_boot: int,
                           device: torch.device = torch.device("cpu")) -> dict[str, Any]:
    """Every method's continuations of the prompts ``docs`` (n, T) at every m in ``prompt_blocks``, scored;
    ``{str(m): {method: {metric: summary}, "true": ..., "differences": {"<method> - <first>": {metric: {diff,
    interval}}}}}``."""
    check_prompt_blocks(prompt_blocks, gen.blocks)
    if not methods:
        raise ForethoughtError("prompted evaluation needs at least one PSF model to prompt")
    nb = gen.block_tokens
    idx = resample_indices(len(docs), n_boot, np.random.default_rng(seed))  # (n_boot, n): shared by all methods
    first = next(iter(methods))
    out: dict[str, Any] = {}
    for m in prompt_blocks:
        prompt = torch.from_numpy(docs[:, :m * nb])  # (n, m·nb)
        ids = {"true": docs}
        for name, sample in methods.items():
            x = sample(prompt, device_generator(1000 * seed + m, device)).cpu().numpy()
            if not np.array_equal(x[:, :m * nb], docs[:, :m * nb]):
                raise AssertionError(f"{name} did not keep its prompt")  # a sampler bug, not a user error
            ids[name] = x
        scores = {name: prompted_scores(gen, x, m) for name, x in ids.items()}
        row: dict[str, Any] = {name: {k: summary(v, idx) for k, v in s.items()} for name, s in scores.items()}
        row["differences"] = {}
        for name in [n for n in ids if n != first]:
            diffs = {}
            for k in METRICS:
                a, b = scores[name][k], scores[first][k]
                if np.isfinite(a).any() and np.isfinite(b).any():
                    pb = paired_bootstrap(_nanmean_last, a, b, n_boot=n_boot, seed=seed)
                    diffs[k] = {"diff": pb["observed"], "interval": list(pb["interval"]) if pb["interval"] else None}
            row["differences"][f"{name} - {first}"] = diffs
        out[str(m)] = row
    return out


def prompted_table(prompted: dict[str, Any]) -> str:
    """Markdown: one row per prompt length and method, the three scores with their intervals."""
    lines = ["| m | method | junction stay | continuation NLL/token | continuation persistence |",
             "|---|---|---|---|---|"]
    for m, row in prompted.items():
        for name, s in row.items():
            if name == "differences":
                continue
            cells = []
            for k in METRICS:
                e = s[k]
                iv = e["interval"]
                cells.append("—" if e["mean"] is None else f"{e['mean']:.3f}"
                             + (f" [{iv[0]:.3f}, {iv[1]:.3f}]" if iv else ""))
            lines.append(f"| {m} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
