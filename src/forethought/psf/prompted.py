"""Prompted continuations on the planted corpus, scored exactly by the true generator (``psf eval
--prompted_blocks``, and ``psf prompted``: a prompt-conditioned prior against replacement).

The first ``n`` documents of the planted **test** split (never trained on) are the prompts: for each prompt
length m (in blocks) their first m blocks are given and every *method* (a sampler: a PSF model and prior, the
prompt's states fixed by replacement and/or as a conditioned prior's input) writes one continuation per prompt.
``true`` is the documents' own continuations (what a perfect model scores on average).

Scores (:func:`forethought.psf.scores.prompted_scores`, the true generator's forward-backward):
``junction_stay`` = p(z_{m+1} = z_m | x) (compare with ``stay_prob``; chance 1/M), ``continuation_nll`` = the exact
NLL per token of the continuation given the prompt, ``continuation_persistence`` = the posterior fraction of
consecutive continued block pairs that keep their topic. Per m: the mean over prompts with a 95 % percentile
bootstrap interval over prompts, and paired bootstrap intervals (the same prompts) of every other method (and
``true``) minus the first method. Prompt length m is sampled with seed ``mix_seed("psf-prompted", seed, m)`` for
every method.

``forethought psf prompted`` (:func:`run`) takes two recipe runs of the same model: ``recipe_run`` with the
unconditional prior (method ``replace``) and ``conditioned_run`` with the prompt-conditioned prior
(``conditioned``: the prompt's states as its input and replaced; ``conditioned_no_replace``: its input only).
With ``unprompted`` it also scores each prior's unconditional samples (seed ``mix_seed("psf-unprompted", seed)``)
beside the test documents: what conditioning costs where nothing is known.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from forethought.core.errors import ForethoughtError
from forethought.core.io import read_json_object
from forethought.core.run import Run
from forethought.core.runtime import mix_seed, pick_device
from forethought.data.planted import (
    PLANTED,
    PlantedConfig,
    PlantedGenerator,
    build_generator,
    persistence,
    planted_split,
    token_nll,
)
from forethought.eval.stats import paired_bootstrap, percentile_interval, resample_indices
from forethought.psf.config import PromptedConfig
from forethought.psf.generate import (
    RecipeArtifacts,
    SavedRecipe,
    load_recipe,
    read_run_results,
    read_saved_config,
    sample_psf,
)
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


def prompt_documents(planted: PlantedConfig, n: int) -> np.ndarray:
    """The first ``n`` documents of the planted test split (never trained on), (n, T) int64: the prompts."""
    docs = planted_split(planted, "test").reshape(-1, planted.blocks * planted.block_tokens).astype(np.int64)
    if len(docs) < n:
        raise ForethoughtError(f"prompts: the planted test split holds {len(docs)} documents, {n} asked "
                               "(data.planted.test_documents)")
    return docs[:n]


def prompted_continuations(gen: PlantedGenerator, docs: np.ndarray, methods: dict[str, Sampler],
                           prompt_blocks: list[int], seed: int, n_boot: int,
                           device: torch.device | None = None) -> dict[str, Any]:
    """Every method's continuations of the prompts ``docs`` (n, T) at every m in ``prompt_blocks``, scored;
    ``{str(m): {method: {metric: summary}, "true": ..., "differences": {"<method> - <first>": {metric: {diff,
    interval}}}}}``. ``device``: where the samplers' generators live (None: the CPU)."""
    device = torch.device("cpu") if device is None else device
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
            x = sample(prompt, device_generator(mix_seed("psf-prompted", seed, m), device)).cpu().numpy()
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


def _recipe(path: Path, key: str, conditioning: str) -> SavedRecipe:
    """A finished recipe run's saved config, checked before any model loads: planted corpus, a prior trained with
    ``conditioning``."""
    results = path / "results.json"
    if not (path / "config.yaml").is_file() or not results.is_file() or "stages" not in read_json_object(results):
        raise ForethoughtError(f"{key}: {path} is not a finished 'psf recipe' run folder (config.yaml, results.json "
                               "with its stages)")
    saved = read_saved_config(path)
    if saved.data.corpus != PLANTED:
        raise ForethoughtError(f"{key}: {path} trained on '{saved.data.corpus}'; prompted continuations are scored by "
                               "the planted corpus's true generator")
    if "prior" not in read_run_results(path)["stages"]:
        raise ForethoughtError(f"{key}: {path} has no trained prior (its recipe's prior stage)")
    if saved.prior.conditioning != conditioning:
        raise ForethoughtError(f"{key}: {path}'s prior was trained with conditioning '{saved.prior.conditioning}'; "
                               f"{key} needs '{conditioning}' (--prior.model.conditioning)")
    return saved


def _sampler(art: RecipeArtifacts, replace: bool, batch_size: int) -> Sampler:
    return lambda prompt, g: sample_psf(art.model, art.prior, len(prompt), generator=g, prompt=prompt,
                                        replace=replace, batch_size=batch_size)


def run(cfg: PromptedConfig, resume: str | None = None) -> dict[str, Any]:
    """``forethought psf prompted``: the two runs checked (no model loaded yet), then the prompted continuations of
    every method and, with ``unprompted``, each prior's unconditional samples, scored; ``<run>/results.json``."""
    del resume  # nothing trains; a rerun evaluates again
    runs = {"unconditional": Path(cfg.recipe_run), "conditioned": Path(cfg.conditioned_run)}
    a = _recipe(runs["unconditional"], "recipe_run", "none")
    b = _recipe(runs["conditioned"], "conditioned_run", "known_mask")
    if (a.data.planted, a.model) != (b.data.planted, b.model):
        raise ForethoughtError("recipe_run and conditioned_run must share the planted corpus and the PSF model's "
                               "settings (train the conditioned one with --stages_from <recipe_run>)")
    planted = a.data.planted
    gen = build_generator(planted)
    check_prompt_blocks(cfg.prompted_blocks, gen.blocks)
    docs = prompt_documents(planted, cfg.prompts)  # (n, T)
    device = pick_device(cfg.run.device, "--run.device")
    arts = {name: load_recipe(path, device=device) for name, path in runs.items()}
    seed, t0 = cfg.run.seed, time.perf_counter()
    res: dict[str, Any] = {
        "recipe_run": str(runs["unconditional"]), "conditioned_run": str(runs["conditioned"]),
        "prompts": len(docs), "split": "test", "prompted_blocks": cfg.prompted_blocks, "n_boot": cfg.n_boot,
        "stay_prob": planted.stay_prob, "chance_stay": 1.0 / planted.topics,
        "sampling": {"temperature": 1.0, "top_p": 1.0,
                     "prior_steps": {name: art.prior.config.steps for name, art in arts.items()}},
        "interval": "95 % percentile bootstrap over prompts; differences: paired (the same prompts), each method "
                    "minus replace"}
    if cfg.prompted_blocks:
        methods = {"replace": _sampler(arts["unconditional"], True, cfg.batch_size),
                   "conditioned": _sampler(arts["conditioned"], True, cfg.batch_size),
                   "conditioned_no_replace": _sampler(arts["conditioned"], False, cfg.batch_size)}
        res["prompted"] = prompted_continuations(gen, docs, methods, cfg.prompted_blocks, seed, cfg.n_boot, device)
    if cfg.unprompted:
        idx = resample_indices(len(docs), cfg.n_boot, np.random.default_rng(seed))  # (n_boot, n)
        sets = {name: sample_psf(art.model, art.prior, len(docs), batch_size=cfg.batch_size,
                                 generator=device_generator(mix_seed("psf-unprompted", seed), device)).cpu().numpy()
                for name, art in arts.items()}  # (n, T) each
        res["unprompted"] = {name: {"nll_per_token": summary(token_nll(gen, x), idx),
                                    "persistence": summary(persistence(gen, x), idx)}
                             for name, x in {**sets, "true": docs}.items()}
    res["eval_wall_s"] = time.perf_counter() - t0
    out = Run.create(cfg.run.out_dir, cfg.run.name, cfg).start()
    out.write_results(res)
    if "prompted" in res:
        print(prompted_table(res["prompted"]))
    for name, u in res.get("unprompted", {}).items():
        print(f"unprompted {name}: NLL/token {u['nll_per_token']['mean']:.3f}, persistence "
              f"{u['persistence']['mean']:.3f}")
    print(f"wrote {out.dir / 'results.json'}")
    return res
