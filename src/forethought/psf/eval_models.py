"""The models ``forethought psf eval`` compares, each a :class:`Candidate` built from a run folder: the recipe
run's own (PSF on its prior, on the prior's mean trajectory, with the state-only prior; the AR baseline) and the
folders in ``compare`` (other recipe runs, token-flow runs), checked against the run's data; with each model's
sampler at a sweep point, its prompted sampler (PSF), and its analytic FLOPs per document.
The sweep, the judge, the bootstrap tables and the cost measurement are :mod:`forethought.psf.evaluate`'s.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from forethought.core.errors import ForethoughtError
from forethought.data.planted import PLANTED
from forethought.eval.cost import analytic_cached_decode, analytic_flops, matmul_params
from forethought.psf.ar import sample_ar
from forethought.psf.config import OWN_MODELS, STATE_ONLY_PRIOR, EvalConfig
from forethought.psf.generate import RecipeArtifacts, load_recipe, sample_psf
from forethought.psf.model import PSFModel
from forethought.psf.prior import FlowPrior
from forethought.psf.token_flow import TokenFlow, check_knobs, is_token_flow_run, load_token_flow, sample_token_flow

KNOB_NEUTRAL = {"step_temperature": 1.0, "noise": 0.0}  # the plain sampler (guidance: the flow's own scale)
TEMPERATURE_RANGE = (0.05, 5.0)  # where densification looks for a decoder's temperature


@dataclass(frozen=True)
class Knob:
    """The one setting a sweep densifies (psf eval ``densify``): its name, the settings held fixed beside it,
    the range searched, and whether the entropy rises with it (the prior direction before two points decide)."""

    name: str
    fixed: dict[str, float]
    low: float
    high: float
    increasing: bool
    start: float

    def point(self, value: float) -> dict[str, float]:
        return {self.name: float(value), **self.fixed}

    def matches(self, point: dict[str, float]) -> bool:
        return set(point) == {self.name, *self.fixed} and all(point[k] == v for k, v in self.fixed.items())


@dataclass
class Candidate:
    """One evaluated model: ``sample(n, point, generator)`` -> (n, L) ids at one sweep point, and its cost facts."""

    name: str
    kind: Literal["psf", "psf_mean_trajectory", "ar", "token_flow"]
    run: Path  # its run folder (its results.json keys the cache)
    points: list[dict[str, float]]  # the sweep point settings
    sample: Callable[[int, dict[str, float], torch.Generator], torch.Tensor]
    neutral: dict[str, float]  # the setting at which cost is measured
    depth_modules: list[torch.nn.Module]  # modules whose forward calls are the sequential steps of sampling
    analytic: int  # analytic FLOPs per document
    params: int
    info: dict[str, Any]  # sizes, training facts and settings, copied into the results row
    # PSF models: (prompt (n, m·L/K), generator, replace) -> (n, L) continuations; None for the others
    prompted: Callable[[torch.Tensor, torch.Generator, bool], torch.Tensor] | None = None
    conditioned: bool = False  # its prior takes the prompt's states as input (conditioning known_mask)
    knob: Knob | None = None  # what densification bisects (None: the sweep stays as given)


def analytic_psf(model: PSFModel, prior: FlowPrior, steps: int, mean: bool) -> int:
    """Analytic FLOPs of one PSF document: the prior's ``steps`` passes over K states (none for the mean
    trajectory), the state / code / landing projections, and K KV-cached decodes of K + 1 prefix slots and
    L/K - 1 further steps."""
    K, n, d = model.blocks, model.block_len, model.config.n_embd
    dec = model.decoder
    flops = K * analytic_cached_decode(matmul_params(dec), dec.config.n_layer, d, K + 1, n - 1)
    flops += 2 * model.state_in.weight.numel() * K  # states -> memory slots
    if model.use_codes:
        flops += 2 * model.code_in.weight.numel() * K
    if model.landing:
        flops += 2 * model.land_proj.weight.numel() * (K - 1)
    if not mean:
        pc = prior.config
        per_step = analytic_flops(matmul_params(prior.net), K, pc.n_layer, pc.n_embd)
        per_step += 2 * matmul_params(prior.time_mlp)  # the time MLP runs once per document and step
        flops += steps * per_step
    return int(flops)


def analytic_ar(ar: torch.nn.Module, L: int) -> int:
    """Analytic FLOPs of one KV-cached AR document of L tokens."""
    return analytic_cached_decode(matmul_params(ar), ar.config.n_layer, ar.config.n_embd, 0, L)


def analytic_token_flow(tf: TokenFlow) -> int:
    """Analytic FLOPs of one token-flow document: ``steps`` dense passes over L positions (+ softmax·E), and with
    ``rounding: decoder`` one more pass and the decoder head."""
    c = tf.config
    per_step = analytic_flops(matmul_params(tf.net), c.seq_len, c.n_layer, c.n_embd)
    if c.head == "logits":
        per_step += 2 * c.seq_len * tf.vocab_size * tf.dim  # x̂ = softmax(logits) · E
    flops = c.steps * per_step
    if c.rounding == "decoder":
        head = tf.dec_proj.weight.numel() + tf.dec_out.weight.numel()
        flops += analytic_flops(matmul_params(tf.net), c.seq_len, c.n_layer, c.n_embd) + 2 * c.seq_len * head
    return int(flops)


def psf_training(results: dict) -> dict[str, Any]:
    """Training facts of a recipe run's PSF model: tokens of all model stages, wall time of all PSF stages."""
    stages = {k: v for k, v in results["stages"].items() if k != "ar"}
    return {"train_tokens": results.get("model_training_tokens"),
            "train_wall_s": sum(v["train_wall_s"] for v in stages.values()),
            "prior_train_steps": sum(v["steps"] for k, v in stages.items() if k.startswith("prior")),
            "stages": list(stages)}


def psf_candidate(name: str, art: RecipeArtifacts, run: Path, trajectory: Literal["prior", "mean"],
                  cfg: EvalConfig, enc_dec: int, state_only: bool = False) -> Candidate:
    prior = art.state_only_prior if state_only else art.prior
    if prior is None:
        what = ("state-only prior (recipe prior.state_only_variant)" if state_only
                else "prior (the recipe's prior stage)")
        raise ForethoughtError(f"{name}: stage '{art.stage}' of {run} has no trained {what}, so PSF cannot sample")
    model, steps = art.model, prior.config.steps

    def sample(n: int, point: dict[str, float], g: torch.Generator) -> torch.Tensor:
        return sample_psf(model, prior, n, temperature=point["temperature"], top_p=point["top_p"], steps=steps,
                          generator=g, trajectory=trajectory, batch_size=cfg.batch_size)

    counts = model.num_params()
    n_prior = sum(p.numel() for p in prior.parameters())
    mean = trajectory == "mean"
    info = {"params_encoder_decoder": counts["encoder"] + counts["decoder"],
            "params_breakdown": {**counts, "prior": n_prior}, "prior_steps": 0 if mean else steps,
            "blocks": model.blocks, "block_len": model.block_len, "states": model.config.states,
            "trajectory": trajectory, "final_stage": art.stage, **psf_training(art.results),
            "codes": "none" if not model.use_codes else "zero (state-only prior)" if prior.dim == model.state_dim
            else "sampled with the states"}
    if mean:
        info["note"] = "the psf model and prior (no training of its own)"
    if enc_dec != info["params_encoder_decoder"]:
        info["params_ratio_to_psf_encoder_decoder"] = info["params_encoder_decoder"] / enc_dec
    def prompted(prompt: torch.Tensor, g: torch.Generator, replace: bool = True) -> torch.Tensor:
        dev = next(model.parameters()).device
        return sample_psf(model, prior, len(prompt), steps=steps, generator=g, prompt=prompt.to(dev),
                          replace=replace, batch_size=cfg.batch_size)

    return Candidate(name, "psf_mean_trajectory" if mean else "psf", run, points_of(cfg.sweep), sample,
                     {"temperature": 1.0, "top_p": 1.0}, ([] if mean else [prior]) + [model.decoder],
                     analytic_psf(model, prior, steps, mean), counts["total"] + n_prior, info,
                     None if mean else prompted, bool(getattr(prior, "conditioned", False)), temperature_knob(cfg))


def temperature_knob(cfg: EvalConfig) -> Knob:
    """A decoder's densified knob: its temperature, top-p fixed at ``densify_top_p``."""
    return Knob("temperature", {"top_p": float(cfg.densify_top_p)}, *TEMPERATURE_RANGE, increasing=True, start=1.0)


def ar_candidate(art: RecipeArtifacts, run: Path, cfg: EvalConfig, enc_dec: int) -> Candidate:
    ar, L, b = art.ar, art.cfg.model.seq_len, cfg.batch_size

    def sample(n: int, point: dict[str, float], g: torch.Generator) -> torch.Tensor:
        return torch.cat([sample_ar(ar, min(b, n - i), L, art.bos_id, temperature=point["temperature"],
                                    top_p=point["top_p"], generator=g) for i in range(0, n, b)])

    res = art.results["stages"]["ar"]
    info = {"kv_cache": True, "params_ratio_to_psf_encoder_decoder": ar.num_params() / enc_dec,
            "train_tokens": res["training_tokens"], "train_wall_s": res["train_wall_s"]}
    return Candidate("ar", "ar", run, points_of(cfg.sweep), sample, {"temperature": 1.0, "top_p": 1.0}, [ar],
                     analytic_ar(ar, L), ar.num_params(), info, knob=temperature_knob(cfg))


def token_flow_candidate(name: str, tf: TokenFlow, results: dict, run: Path, cfg: EvalConfig,
                         enc_dec: int) -> Candidate:
    knob, b = cfg.token_flow_knob, cfg.batch_size
    neutral = {**KNOB_NEUTRAL, "guidance": tf.config.guidance_scale}  # guidance: the flow's own sampling scale
    for v in cfg.token_flow_sweep:  # before anything is sampled: e.g. step_temperature needs a logits head
        check_knobs(tf, **{**KNOB_NEUTRAL, knob: v})

    def sample(n: int, point: dict[str, float], g: torch.Generator) -> torch.Tensor:
        return sample_token_flow(tf, n, None, g, temperature=cfg.token_flow_temperature, batch_size=b,
                                 **{knob: point[knob]})

    info = {"steps": tf.config.steps, "params_ratio_to_psf_encoder_decoder": tf.num_params() / enc_dec,
            "config": asdict(tf.config), "knob": knob, "rounding_temperature": cfg.token_flow_temperature,
            "top_p": "none (no nucleus)", "frozen_table_params": tf.table.numel(),
            "train_tokens": results.get("training_tokens"), "train_wall_s": results.get("train_wall_s"),
            "optimizer": results.get("optimizer")}
    # every knob is expected to lower the entropy as it grows (the data decide once two points are in); noise
    # beyond steps/8 per unit time stops doing so
    low, high = {"step_temperature": (0.05, 20.0), "noise": (0.0, tf.config.steps / 8),
                 "guidance": (0.05, 20.0)}[knob]
    return Candidate(name, "token_flow", run, [{knob: float(v)} for v in cfg.token_flow_sweep], sample,
                     {knob: neutral[knob]}, [tf], analytic_token_flow(tf), tf.num_params(), info,
                     knob=Knob(knob, {}, low, high, increasing=False, start=neutral[knob]))


def points_of(sweep: list[list[float]]) -> list[dict[str, float]]:
    return [{"temperature": float(t), "top_p": float(p)} for t, p in sweep]


def data_signature(art: RecipeArtifacts) -> dict[str, Any]:
    """What a run models: the corpus, its tokenizer (planted: the generator's settings), L and the vocabulary."""
    d = art.cfg.data
    return {"corpus": d.corpus, "tokenizer": asdict(d.planted) if d.corpus == PLANTED else d.tokenizer,
            "seq_len": art.cfg.model.seq_len, "vocab_size": art.results["vocab_size"]}


def build_candidates(cfg: EvalConfig, device: torch.device) -> tuple[RecipeArtifacts, dict[str, Candidate]]:
    """The evaluated run and every model to evaluate, checked (nothing is written)."""
    run = Path(cfg.recipe_run)
    names = [Path(os.path.abspath(f)).name for f in cfg.compare]  # a symlink keeps its own name
    # a compared run with a state-only prior adds <name>_state_only: every model name checked before any loads
    models = [*zip(names, cfg.compare, strict=True),
              *((f"{n}_state_only", f) for n, f in zip(names, cfg.compare, strict=True)
                if (Path(f) / STATE_ONLY_PRIOR).is_dir())]  # (model name, its folder)
    for folder in cfg.compare:
        if not Path(folder).is_dir():
            raise ForethoughtError(f"compare: {folder} is not a folder")
    taken = [name for name, _ in models]
    for name, folder in models:
        if name in OWN_MODELS or taken.count(name) > 1:
            raise ForethoughtError(f"compare: the name '{name}' of {folder} names another model too (models are "
                                   f"named by their folders, a state-only prior <folder>_state_only; "
                                   f"{', '.join(OWN_MODELS)} are the run's own)")
    art = load_recipe(run, device=device)
    counts = art.model.num_params()
    enc_dec = counts["encoder"] + counts["decoder"]
    has = {"ar": art.ar is not None, "psf_state_only": art.state_only_prior is not None}
    wanted = list(cfg.models) or [m for m in OWN_MODELS if has.get(m, True)]
    if "ar" in wanted and art.ar is None:
        raise ForethoughtError(f"models: {run} has no AR baseline (train it with baselines: [ar])")
    cands: dict[str, Candidate] = {}
    for name in wanted:
        if name == "ar":
            cands[name] = ar_candidate(art, run, cfg, enc_dec)
        else:
            cands[name] = psf_candidate(name, art, run, "mean" if name == "psf_mean_trajectory" else "prior", cfg,
                                        enc_dec, state_only=name == "psf_state_only")
    L, vocab = art.cfg.model.seq_len, art.results["vocab_size"]
    for folder, name in zip(cfg.compare, names, strict=True):
        path = Path(folder)
        if is_token_flow_run(path):
            tf, results = load_token_flow(path, device)
            if tf.vocab_size != vocab or tf.config.seq_len != L:
                raise ForethoughtError(f"compare: the token flow {path} models {tf.config.seq_len} tokens over "
                                       f"{tf.vocab_size} ids, the run {L} over {vocab}")
            cands[name] = token_flow_candidate(name, tf, results, path, cfg, enc_dec)
        elif (path / "config.yaml").is_file() and (path / "results.json").is_file():
            other = load_recipe(path, device=device)
            mine, theirs = data_signature(art), data_signature(other)
            if mine != theirs:
                diff = "; ".join(f"{k} {theirs[k]} vs {mine[k]}" for k in mine if mine[k] != theirs[k])
                raise ForethoughtError(f"compare: {path} models other data than {run} ({diff})")
            cands[name] = psf_candidate(name, other, path, "prior", cfg, enc_dec)
            if other.state_only_prior is not None:  # its state-only configuration beside it, as for the run's own
                so = f"{name}_state_only"
                cands[so] = psf_candidate(so, other, path, "prior", cfg, enc_dec, state_only=True)
        else:
            raise ForethoughtError(f"compare: {path} is neither a finished 'psf recipe' run (config.yaml, "
                                   "results.json) nor a token-flow run (a step-NNNNNN/ token-flow checkpoint)")
    return art, cands
