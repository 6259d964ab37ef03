"""Rebuilding a finished ``psf recipe`` run and sampling from it (``forethought psf sample``).

Nothing here imports the training loop: a run is rebuilt from its folder alone: each model from its stage's
checkpoint (:mod:`forethought.psf.build`: versioned records, manifests checked), the tokenizer from the folder's
copy, ``results.json`` for which stages were trained, ``config.yaml`` for the data settings (:class:`SavedRecipe`;
the corpus is read only for prompts). Every file read is checked, so a corrupt or truncated one is a one-line
error naming it, never a traceback.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from forethought.core.checkpoint import latest_checkpoint
from forethought.core.config import load_config
from forethought.core.errors import ForethoughtError
from forethought.core.io import atomic_write_text, read_json_object
from forethought.core.run import Run
from forethought.core.runtime import pick_device
from forethought.data.corpora import eval_windows
from forethought.models.gpt import GPT, load_gpt
from forethought.psf.ar import ARModelConfig, sample_ar
from forethought.psf.build import (
    STAGE_KEYS,
    load_prior,
    load_psf,
    prompt_lead,
    recipe_tokenizer,
    stage_kind,
    valid_tokens,
)
from forethought.psf.config import PSFDataConfig, RecipeConfig, SampleConfig, prior_stage
from forethought.psf.model import PSFModel, PSFModelConfig, generate_blocks
from forethought.psf.prior import FlowPrior, PriorConfig, leading_known_mask, sample_prior
from forethought.psf.sampling import device_generator

RUN_KEYS = ("stages", "final_stage", "vocab_size", "bos_id")


# ---- run folder files --------------------------------------------------------------------------------------

def read_run_results(run_dir: Path) -> dict:
    """A finished recipe run's results.json, with every stage entry checked."""
    path = run_dir / "results.json"
    fix = "rerun the same 'psf recipe' command with --resume auto to rewrite it"
    results = read_json_object(path, RUN_KEYS, fix)
    stages = results["stages"]
    if not isinstance(stages, dict) or not all(isinstance(v, dict) for v in stages.values()):
        raise ForethoughtError(f"{path} is corrupt (bad 'stages'); {fix}")
    for name, res in stages.items():
        missing = [k for k in STAGE_KEYS[stage_kind(name)] if k not in res]
        if missing:
            raise ForethoughtError(f"{path} is corrupt (stage '{name}' has no {', '.join(missing)}); {fix}")
    return results


@dataclass
class SavedRecipe:
    """The sections of a recipe run's config.yaml that sampling and evaluating its models read."""

    seed: int
    data: PSFDataConfig
    model: PSFModelConfig
    prior: PriorConfig
    ar: ARModelConfig


def read_saved_config(run_dir: Path) -> SavedRecipe:
    """The model and data sections of a recipe run's config.yaml, read by the config loader (every key checked,
    every section validated) like the command's own config."""
    path = run_dir / "config.yaml"
    try:
        cfg = load_config(RecipeConfig, path)
    except ForethoughtError as e:
        raise ForethoughtError(f"{path} is not a 'psf recipe' config this version reads: {e}") from None
    return SavedRecipe(cfg.run.seed, cfg.data, cfg.model, cfg.prior.model, cfg.ar.model)


@dataclass
class RecipeArtifacts:
    """What a finished recipe run holds, ready to sample from."""

    cfg: SavedRecipe
    results: dict
    stage: str
    model: PSFModel
    prior: FlowPrior | None
    ar: GPT | None
    tokenizer: Any
    bos_id: int
    state_only_prior: FlowPrior | None = None  # the paper's state-only variant (prior over states, zero codes)
    _valid: np.ndarray | None = None

    @property
    def valid_tokens(self) -> np.ndarray:
        """The corpus's valid split (prompts, evaluation windows), read on first use: sampling without a prompt
        needs only the run folder."""
        if self._valid is None:
            self._valid = valid_tokens(self.cfg.data, self.cfg.model.seq_len)
        return self._valid


def load_recipe(run_dir: str | Path, stage: str = "", device: str | torch.device = "cpu") -> RecipeArtifacts:
    """Rebuild a ``psf recipe`` run from its folder: the PSF model of ``stage`` ('' = the final model stage), its
    prior (the prior trained after that stage, if any), the AR baseline (if trained), each from its checkpoint
    (:mod:`forethought.psf.build`), and the tokenizer the folder keeps."""
    run_dir = Path(run_dir)
    dev = pick_device(str(device))
    if not (run_dir / "config.yaml").is_file() or not (run_dir / "results.json").is_file():
        raise ForethoughtError(f"{run_dir} is not a finished 'psf recipe' run folder (config.yaml, results.json)")
    cfg = read_saved_config(run_dir)
    results = read_run_results(run_dir)
    stage = stage or results["final_stage"]
    model = load_stage_model(run_dir, results, stage)
    prior = load_stage_prior(run_dir, results, model, stage, prior_stage(stage))
    state_only = load_stage_prior(run_dir, results, model, stage, prior_stage(stage, state_only=True))
    ackpt = latest_checkpoint(run_dir / "ar")
    ar = load_gpt(ackpt)[0].eval() if ackpt is not None else None
    tokenizer = recipe_tokenizer(run_dir, cfg.data, cfg.model.seq_len)
    return RecipeArtifacts(cfg, results, stage, model.to(dev).eval(), prior.to(dev) if prior else None,
                           ar.to(dev) if ar else None, tokenizer, int(results["bos_id"]),
                           state_only.to(dev) if state_only else None)


def load_stage_prior(run_dir: Path, results: dict, model: PSFModel, stage: str, pname: str) -> FlowPrior | None:
    """The prior ``pname`` of a recipe run if it was trained on model stage ``stage`` (else None), in eval mode."""
    pckpt = latest_checkpoint(run_dir / pname)
    if pckpt is None or pname not in results["stages"]:
        return None
    if results["stages"][pname]["blocks"] != model.blocks or stage != prior_source(results, pname):
        return None
    prior = load_prior(pckpt)
    if (prior.state_dim, prior.prompt_lead) != (model.state_dim, prompt_lead(model)):
        raise ForethoughtError(f"{pckpt} models a trajectory layout unlike stage '{stage}''s model")
    return prior.eval()


def load_stage_model(run_dir: Path, results: dict, stage: str) -> PSFModel:
    """The PSF model of one trained model stage of a recipe run (on the CPU, in training mode), from the stage's
    checkpoint, after checking with the run's results (:func:`read_run_results`) that the stage was trained."""
    model_stages = [s for s in results["stages"] if stage_kind(s) == "model"]
    if stage not in model_stages:
        raise ForethoughtError(f"stage '{stage}' was not trained in {run_dir} "
                               f"(model stages: {', '.join(model_stages)})")
    ckpt = latest_checkpoint(run_dir / stage)
    if ckpt is None:
        raise ForethoughtError(f"no checkpoint for stage '{stage}' in {run_dir}")
    return load_psf(ckpt)


def prior_source(results: dict, pname: str) -> str:
    """The model stage a prior was trained on: the model stage just before it in the results."""
    names = list(results["stages"])
    before = [s for s in names[:names.index(pname)] if stage_kind(s) == "model"]
    return before[-1] if before else ""


# ---- sampling ------------------------------------------------------------------------------------------------

@torch.no_grad()
def sample_psf(model: PSFModel, prior: FlowPrior | None, n: int, *, temperature: float = 1.0, top_p: float = 1.0,
               steps: int | None = None, generator: torch.Generator | None = None,
               trajectory: Literal["prior", "mean"] = "prior", prompt: torch.Tensor | None = None,
               batch_size: int = 0, replace: bool = True) -> torch.Tensor:
    """(n, L) token ids from PSF: the prior's Euler sampler writes a (K, dim) state trajectory (``trajectory:
    mean`` uses the stored mean trajectory instead — the ablation), then the decoder writes all K blocks in
    parallel. ``prompt`` (n, m·L/K): the first m blocks are given; the states (and codes) they determine are
    fixed during the flow — by replacement (``replace``), as a conditioned prior's input, or both
    (:func:`forethought.psf.prior.sample_prior`) — and exactly kept, and their tokens are forced. Without a prior
    (``prior=None``) the mean trajectory is impossible too, so a prior is required; codes the prior does not model
    are zero."""
    if prior is None:
        raise ForethoughtError("sampling PSF needs a trained prior (the recipe's prior stage)")
    model.eval()
    prior.eval()
    if batch_size and n > batch_size:
        parts = [sample_psf(model, prior, min(batch_size, n - i), temperature=temperature, top_p=top_p, steps=steps,
                            generator=generator, trajectory=trajectory,
                            prompt=None if prompt is None else prompt[i:i + batch_size], replace=replace)
                 for i in range(0, n, batch_size)]
        return torch.cat(parts)
    states, codes, force, force_blocks = sample_states(model, prior, n, steps=steps, generator=generator,
                                                       trajectory=trajectory, prompt=prompt, replace=replace)
    return generate_blocks(model, states, codes, temperature=temperature, top_p=top_p, generator=generator,
                           force=force, force_blocks=force_blocks)


@torch.no_grad()
def sample_states(model: PSFModel, prior: FlowPrior, n: int, *, steps: int | None = None,
                  generator: torch.Generator | None = None, trajectory: Literal["prior", "mean"] = "prior",
                  prompt: torch.Tensor | None = None, replace: bool = True
                  ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """The first half of :func:`sample_psf` (same arguments): what the decoder is given for ``n`` documents —
    states (n, K, S), codes (n, K, code_dim) or None, and, with a prompt, the tokens and blocks to force (else
    None, None)."""
    dev = next(model.parameters()).device
    K, nb, S = model.blocks, model.block_len, model.state_dim
    if prior.blocks != K:
        raise ForethoughtError(f"the prior models {prior.blocks} states, the model decodes {K} blocks")
    if prior.conditioned and (prior.state_dim, prior.prompt_lead) != (S, prompt_lead(model)):
        raise ValueError("a conditioned prior must know the model's trajectory layout: build it with prior_for()")
    known, mask, force, force_blocks = None, None, None, None
    if prompt is not None:
        prompt = prompt.to(dev).long()
        if prompt.shape[0] != n or prompt.shape[1] % nb or not 0 < prompt.shape[1] <= model.seq_len:
            raise ForethoughtError(f"a prompt must be (n, m·{nb}) tokens with 1 <= m <= {K}")
        m = prompt.shape[1] // nb
        h, feats = model.encode(prompt)  # (n, m, S): block-causal, so these equal the full text's h_1..h_m
        s = torch.cat([model.start.expand(n, 1, S), h], 1)[:, :K] if model.config.states == "predictive" else h
        known = torch.zeros(n, K, prior.dim, device=dev)
        known[:, :s.shape[1], :S] = s
        if prior.dim > S:
            known[:, :m, S:] = model.posterior(feats)[0]
        mask = leading_known_mask(torch.full((n,), m, device=dev), K, prior.dim, S, prompt_lead(model))
        force = torch.zeros(n, model.seq_len, dtype=torch.long, device=dev)
        force[:, :m * nb] = prompt
        force_blocks = (torch.arange(K, device=dev) < m).expand(n, K)
    if trajectory == "mean":
        traj = prior.traj_mean.expand(n, K, prior.dim).clone()
        if known is not None:
            traj = torch.where(mask, known, traj)
    else:
        traj = sample_prior(prior, n, steps, generator, known, mask, replace)  # (n, K, dim)
    states = traj[..., :S]
    if model.config.states == "predictive":
        states = torch.cat([model.start.expand(n, 1, S), states[:, 1:]], 1)  # s_1 is known exactly
    codes = None
    if model.use_codes:
        codes = traj[..., S:] if prior.dim > S else torch.zeros(n, K, model.code_dim, device=dev)
    return states, codes, force, force_blocks


def file_prompts(path: Path, tokenizer, n: int, length: int) -> torch.Tensor:
    """The first ``n`` non-empty lines of ``path``, each tokenised (no special tokens) and cut to ``length``
    tokens: (n, length) long. One-line errors for too few lines or a line too short."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if len(lines) < n:
        raise ForethoughtError(f"prompt_file {path} holds {len(lines)} prompts (non-empty lines); lower n to "
                               f"{len(lines)} or add prompts")
    rows = []
    for i, line in enumerate(lines[:n], 1):
        ids = tokenizer(line, add_special_tokens=False)["input_ids"]
        if len(ids) < length:
            raise ForethoughtError(f"prompt_file {path}: prompt {i} has {len(ids)} tokens; prompt_blocks needs "
                                   f"{length} (lengthen it or lower prompt_blocks)")
        rows.append(ids[:length])
    return torch.tensor(rows, dtype=torch.long)


def sample(cfg: SampleConfig, resume: str | None = None) -> dict:
    """``forethought psf sample``: writes ``<recipe_run>/<name>/samples.jsonl``, ``samples.txt``, ``results.json``."""
    del resume  # sampling has no checkpoints
    cfg.validate()  # also when the config was built in Python rather than loaded
    device = pick_device(cfg.device, "--device")
    art = load_recipe(cfg.recipe_run, cfg.stage, device)
    out_dir = Path(cfg.recipe_run) / cfg.name
    if out_dir.exists() and not out_dir.is_dir():
        raise ForethoughtError(f"name '{cfg.name}': {out_dir} is a file of the recipe run; choose another --name")
    if cfg.name in art.results["stages"] or latest_checkpoint(out_dir) is not None:
        raise ForethoughtError(f"name '{cfg.name}': {out_dir} holds a trained model of the recipe run; choose "
                               "another --name")
    L = art.cfg.model.seq_len
    nb = art.model.block_len
    prompt = None
    if cfg.prompt_blocks:
        if not 0 < cfg.prompt_blocks <= art.model.blocks:
            raise ForethoughtError(f"prompt_blocks must be in 1..{art.model.blocks}")
        if cfg.prompt_file:
            prompt = file_prompts(Path(cfg.prompt_file), art.tokenizer, cfg.n, cfg.prompt_blocks * nb)
        else:
            windows = eval_windows(art.valid_tokens, cfg.n, L)
            if len(windows) < cfg.n:
                raise ForethoughtError(f"the valid split holds only {len(windows)} prompt windows; lower n")
            prompt = windows[:, :cfg.prompt_blocks * nb]
    if cfg.model == "ar" and art.ar is None:
        raise ForethoughtError(f"{cfg.recipe_run} has no AR baseline (train it with baselines: [ar])")
    prior = art.state_only_prior if cfg.prior == "state_only" else art.prior
    if cfg.model == "psf" and prior is None:
        raise ForethoughtError(f"stage '{art.stage}' of {cfg.recipe_run} has no trained "
                               + ("state-only prior (recipe prior.state_only_variant)" if cfg.prior == "state_only"
                                  else "prior"))
    g = device_generator(cfg.seed, device)
    t0 = time.perf_counter()
    if cfg.model == "ar":
        ids = torch.cat([sample_ar(art.ar, min(cfg.batch_size, cfg.n - i), L, art.bos_id, temperature=cfg.temperature,
                                   top_p=cfg.top_p, generator=g,
                                   prompt=None if prompt is None else prompt[i:i + cfg.batch_size])
                         for i in range(0, cfg.n, cfg.batch_size)])
        depth = L - (0 if prompt is None else prompt.shape[1])
    else:
        steps = cfg.prior_steps or prior.config.steps
        ids = sample_psf(art.model, prior, cfg.n, temperature=cfg.temperature, top_p=cfg.top_p, steps=steps,
                         generator=g, trajectory=cfg.trajectory, prompt=prompt, batch_size=cfg.batch_size,
                         replace=cfg.prompt_replace)
        depth = (steps if cfg.trajectory == "prior" else 0) + nb
    wall = time.perf_counter() - t0
    out_dir.mkdir(parents=True, exist_ok=True)
    texts = art.tokenizer.batch_decode(ids.tolist())
    n_prompt = 0 if prompt is None else prompt.shape[1]
    atomic_write_text(out_dir / "samples.jsonl", "".join(
        json.dumps({"index": i, "prompt_tokens": n_prompt, "tokens": row, "text": text}) + "\n"
        for i, (row, text) in enumerate(zip(ids.tolist(), texts, strict=True))))
    atomic_write_text(out_dir / "samples.txt", "\n\n==========\n\n".join(texts) + "\n")
    res = {"model": cfg.model, "stage": art.stage if cfg.model == "psf" else "ar", "n": cfg.n,
           "temperature": cfg.temperature, "top_p": cfg.top_p, "trajectory": cfg.trajectory, "prior": cfg.prior,
           "prompt_tokens": n_prompt, "serial_depth": depth, "wall_s": wall, "settings": asdict(cfg)}
    Run(out_dir).write_results(res)
    print(f"wrote {cfg.n} samples to {out_dir}")
    return res
