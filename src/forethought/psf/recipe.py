"""``forethought psf recipe``: the multi-stage PSF recipe.

Stages (each a sub-run folder of the run folder, each warm-started from the previous stage's checkpoint):

1. ``base``           — encoder + decoder, teacher forced on real text, clean predictive states;
2. ``landing``        — + landing targets;
3. ``self_realized``  — + self-realized prefix (rollout states replace clean ones per block with ``rollout.prob``);
4. ``codes``          — + realization codes (free-bits KL);
5. ``prior``          — the rectified-flow prior on the final model's detached states (+ codes);
6. ``blocks<K'>`` / ``prior_blocks<K'>`` for each ``longer_blocks.blocks`` entry — the model at K' blocks
   (longer blocks), warm-started from the previous model stage, and its prior warm-started from the previous
   prior (network weights; the data statistics are recomputed).

Features are cumulative in stage order: a stage uses its own feature and those of every earlier stage, also when
an earlier stage is disabled (``enabled: false`` only skips training it). With ``baselines: [ar]`` the
autoregressive baseline trains in ``ar/`` on the same windows (same seed, tokenizer and L); ``ar.train.steps:
0`` gives it the same number of training tokens as all PSF model stages together.

``--resume auto`` continues every unfinished stage from its newest checkpoint and skips every finished one (its
final checkpoint and results.json present) — the AR baseline and the priors as well as the PSF model stages —
without writing into its folder. The results.json files a rerun will reuse are read and checked before anything
trains or is written. ``<stage>.train.eval_every N`` evaluates that stage every N steps on the first
``EVAL_WINDOWS`` validation windows (PSF stages: teacher-forced CE and KL; priors: flow loss; AR: CE).

With ``data.corpus planted`` (:mod:`forethought.data.planted`) every window is one whole document (training
windows start at document starts, and ``model.seq_len`` / ``model.blocks`` must equal the documents' length and
blocks), and results.json adds ``true_val_nll``: the true generator's exact NLL per token of the validation windows.

Sampling and rebuilding a finished run live in :mod:`forethought.psf.generate`.
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from forethought.core.checkpoint import latest_checkpoint, load_checkpoint, load_weights
from forethought.core.config import field
from forethought.core.errors import ForethoughtError
from forethought.core.io import atomic_write_text, read_json_object
from forethought.core.run import Run, RunConfig
from forethought.core.runtime import Runtime, runtime_for, step_generator, unwrap
from forethought.core.trainer import TrainConfig, TrainHooks, train
from forethought.data.corpora import eval_windows, random_windows, vocab_size_for
from forethought.data.planted import PLANTED, build_generator, token_nll
from forethought.psf.ar import ARModelConfig, ar_loss, build_ar
from forethought.psf.generate import (
    MODEL_STAGES,
    STAGE_KEYS,
    STATE_ONLY_PRIOR,
    PSFDataConfig,
    build_psf,
    check_planted_shape,
    configure,
    load_data,
    prior_for,
)
from forethought.psf.model import (
    PSFModel,
    PSFModelConfig,
    calibrate_states,
    check_blocks,
    realized_summaries,
    start_codes,
)
from forethought.psf.prior import FlowPrior, PriorConfig
from forethought.psf.sampling import device_generator

BASELINES = ("ar",)
# Validation windows evaluated during training (eval_every): a small fixed set, the first of the valid split.
EVAL_WINDOWS = 64


@dataclass
class StageConfig:
    enabled: bool = field(True, "train this stage (its feature stays on in later stages either way)")
    train: TrainConfig = field(TrainConfig(steps=100, batch_size=16, lr=1e-3, log_every=10), "optimisation")


@dataclass
class RolloutConfig:
    prob: float = field(0.5, "per block: probability of feeding the self-realized state instead of the clean one")
    temperature: float = field(0.65, "rollout sampling temperature (0 = greedy)")
    top_p: float = field(0.95, "rollout nucleus, in (0, 1]")

    def validate(self) -> None:
        if not 0 <= self.prob <= 1:
            raise ForethoughtError(f"prob must be in [0, 1], got {self.prob}")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ForethoughtError(f"temperature must be a number >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ForethoughtError(f"top_p must be in (0, 1], got {self.top_p}")


@dataclass
class PriorStageConfig:
    enabled: bool = field(True, "train the flow prior")
    model: PriorConfig = field(PriorConfig(), "prior network, time sampling, sampler")
    train: TrainConfig = field(TrainConfig(steps=200, batch_size=32, lr=1e-3, log_every=10), "optimisation")
    state_only_variant: bool = field(
        False, "also train a second prior, over the states only, on the same code-trained decoder (stage "
        "prior_state_only; the decoder then gets zero codes): the paper's state-only configuration beside the "
        "main one (prior over states + codes). Needs the codes stage and no longer_blocks")


@dataclass
class LongerBlocksConfig:
    blocks: list[int] = field([], "after the main stages, retrain at these block counts K' (< K: longer blocks)")
    train: TrainConfig = field(TrainConfig(steps=100, batch_size=16, lr=5e-4, log_every=10), "model stages")
    prior_train: TrainConfig = field(TrainConfig(steps=100, batch_size=32, lr=5e-4, log_every=10), "prior stages")


@dataclass
class ARStageConfig:
    model: ARModelConfig = field(ARModelConfig(), "autoregressive GPT")
    train: TrainConfig = field(TrainConfig(steps=0, batch_size=16, lr=1e-3, log_every=10),
                               "optimisation (steps 0 = as many training tokens as the PSF model stages)")


@dataclass
class RecipeConfig:
    run: RunConfig = field(RunConfig(name="psf-recipe"), "run folder, seed, device")
    data: PSFDataConfig = field(PSFDataConfig(), "corpus and tokenisation")
    model: PSFModelConfig = field(PSFModelConfig(), "PSF encoder/decoder (vocab_size from the tokenizer)")
    rollout: RolloutConfig = field(RolloutConfig(), "self-realized prefix rollouts")
    base: StageConfig = field(StageConfig(), "stage 1: base model")
    landing: StageConfig = field(StageConfig(), "stage 2: + landing targets")
    self_realized: StageConfig = field(StageConfig(), "stage 3: + self-realized prefix")
    codes: StageConfig = field(StageConfig(), "stage 4: + realization codes")
    prior: PriorStageConfig = field(PriorStageConfig(), "stage 5: rectified-flow prior")
    longer_blocks: LongerBlocksConfig = field(LongerBlocksConfig(), "optional: longer blocks")
    baselines: list[Literal["ar"]] = field([], "baselines to train beside PSF: ar")
    ar: ARStageConfig = field(ARStageConfig(), "autoregressive baseline")

    def validate(self) -> None:
        """Every stage's settings (models, optimisation, sampling), so that a bad one fails before anything
        trains or is written — not when its stage comes. Messages name the section (``prior.model: ...``)."""
        sections: dict[str, Any] = {"data": self.data, "model": self.model, "rollout": self.rollout,
                                    "prior.model": self.prior.model, "ar.model": self.ar.model}
        sections.update({f"{s}.train": getattr(self, s).train for s in MODEL_STAGES})
        sections.update({"prior.train": self.prior.train, "longer_blocks.train": self.longer_blocks.train,
                         "longer_blocks.prior_train": self.longer_blocks.prior_train, "ar.train": self.ar.train})
        longer = bool(self.longer_blocks.blocks)
        trained = {**{f"{s}.train": getattr(self, s).enabled for s in MODEL_STAGES}, "prior.train": self.prior.enabled,
                   "longer_blocks.train": longer, "longer_blocks.prior_train": longer and self.prior.enabled,
                   "ar.train": "ar" in self.baselines}
        for key, section in sections.items():
            check = getattr(section, "validate", None)
            try:
                if check is not None:
                    check()
                least = 0 if key == "ar.train" else 1  # ar: 0 = as many tokens as the model stages
                if trained.get(key) and section.steps < least:
                    raise ForethoughtError(f"steps must be at least {least}, got {section.steps}")
            except ForethoughtError as e:
                raise ForethoughtError(f"{key}: {e}") from None
        check_planted_shape(self.data, self.model.seq_len, self.model.blocks)
        planted = self.data.planted.blocks if self.data.corpus == PLANTED else 0
        for k in self.longer_blocks.blocks:
            if planted and k > 0 and planted % k:
                raise ForethoughtError(f"longer_blocks.blocks: K'={k} must divide data.planted.blocks ({planted}), "
                                       "so that each longer block is whole planted blocks")
            try:
                check_blocks(self.model.seq_len, k)
            except ForethoughtError as e:
                raise ForethoughtError(f"longer_blocks.blocks: {e}") from None
            if k > max(self.model.max_blocks, self.model.blocks):
                raise ForethoughtError(f"longer_blocks.blocks: K'={k} exceeds model.blocks; set model.max_blocks "
                                       f">= {k} to size the decoder for it")
        for b in self.baselines:
            if b not in BASELINES:
                raise ForethoughtError(f"baselines: unknown baseline '{b}' (choose from {', '.join(BASELINES)})")
        if not any(getattr(self, s).enabled for s in MODEL_STAGES):
            raise ForethoughtError("every PSF model stage is disabled; enable at least one")
        if self.prior.state_only_variant:
            if not (self.prior.enabled and self.codes.enabled) or self.prior.model.state_only:
                raise ForethoughtError("prior.state_only_variant needs the codes stage and the prior enabled, "
                                       "and prior.model.state_only false (the main prior models states + codes)")
            if self.longer_blocks.blocks:
                raise ForethoughtError("prior.state_only_variant is not supported with longer_blocks.blocks "
                                       "(the variant's prior belongs to the codes stage); set longer_blocks.blocks []")


# ---- the plan ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Stage:
    """One sub-run of the recipe, in training order."""

    name: str
    kind: Literal["model", "prior", "ar"]
    train: TrainConfig  # with the AR baseline's steps resolved
    blocks: int = 0  # model stages: K
    seed_index: int = 0  # model stages: position among all model stages, enabled or not (seeds the stage)


def plan_stages(cfg: RecipeConfig) -> list[Stage]:
    """The stages ``cfg`` trains, in order."""
    K = cfg.model.blocks
    model_stages = [(s, K, getattr(cfg, s)) for s in MODEL_STAGES]
    model_stages += [(f"blocks{k}", k, StageConfig(True, cfg.longer_blocks.train)) for k in cfg.longer_blocks.blocks]
    last_main = [s for s in MODEL_STAGES if getattr(cfg, s).enabled][-1]
    plan: list[Stage] = []
    for index, (name, blocks, stage) in enumerate(model_stages):
        if not stage.enabled:
            continue
        plan.append(Stage(name, "model", stage.train, blocks, index))
        if cfg.prior.enabled and name == last_main:
            plan.append(Stage("prior", "prior", cfg.prior.train))
            if cfg.prior.state_only_variant:
                plan.append(Stage(STATE_ONLY_PRIOR, "prior", cfg.prior.train))
        elif cfg.prior.enabled and name.startswith("blocks"):
            plan.append(Stage(f"prior_{name}", "prior", cfg.longer_blocks.prior_train))
    if "ar" in cfg.baselines:
        tcfg = copy.deepcopy(cfg.ar.train)
        tcfg.steps = _ar_steps(cfg, model_tokens(plan, cfg.model.seq_len))
        plan.append(Stage("ar", "ar", tcfg))
    return plan


def model_tokens(plan: list[Stage], seq_len: int) -> int:
    """Training tokens of all PSF model stages together (the AR baseline's default budget)."""
    return sum(s.train.steps * s.train.batch_size * seq_len for s in plan if s.kind == "model")


def _ar_steps(cfg: RecipeConfig, tokens: int) -> int:
    if cfg.ar.train.steps > 0:
        return cfg.ar.train.steps
    return max(1, math.ceil(tokens / (cfg.ar.train.batch_size * cfg.model.seq_len)))


def finished_stages(run_dir: Path, plan: list[Stage], resume: str | None) -> dict[str, dict]:
    """The results of every stage that ``--resume auto`` will skip (final checkpoint and results.json present),
    read and checked now, so that a corrupt one stops the recipe before it trains or writes anything. Without
    ``--resume``, a stage folder that already holds checkpoints is refused here for the same reason."""
    if resume not in (None, "", "none", "never", "auto"):
        raise ForethoughtError(f"psf recipe takes --resume auto (every stage continues from its own newest "
                               f"checkpoint), not --resume {resume}")
    done = {}
    for s in plan:
        sub = run_dir / s.name
        ckpt = latest_checkpoint(sub)
        if resume != "auto" and ckpt is not None:
            raise ForethoughtError(f"{sub} already holds checkpoints; pass --resume auto to continue that run, "
                                   "or choose another --run.name / --run.out_dir")
        if resume == "auto" and ckpt is not None and ckpt.name == f"step-{s.train.steps:06d}" \
                and (sub / "results.json").is_file():
            done[s.name] = read_json_object(sub / "results.json", STAGE_KEYS[s.kind],
                                        "delete it and rerun with --resume auto to recompute it from the stage's "
                                        "final checkpoint")
    return done


# ---- stage helpers -------------------------------------------------------------------------------------------

def stage_features(name: str) -> dict[str, bool]:
    """Cumulative feature switches of a model stage."""
    i = MODEL_STAGES.index(name) if name in MODEL_STAGES else len(MODEL_STAGES) - 1  # blocks<K'>: all on
    return {"landing": i >= 1, "self_realized": i >= 2, "codes": i >= 3}


def trajectory_dim(model: PSFModel, prior_cfg: PriorConfig) -> int:
    return model.state_dim + (0 if prior_cfg.state_only or not model.use_codes else model.code_dim)


@torch.no_grad()
def trajectories(model: PSFModel, tokens: torch.Tensor, with_codes: bool) -> torch.Tensor:
    """(B, L) real text -> (B, K, S [+ code_dim]) detached states (and posterior-sampled codes): prior data."""
    h, feats = model.encode(tokens)
    s = model.states_from(h)
    if not with_codes:
        return s
    mu, logvar = model.posterior(feats)
    return torch.cat([s, mu + (0.5 * logvar).exp() * torch.randn_like(mu)], dim=-1)


@torch.no_grad()
def evaluate_psf(model: PSFModel, windows: torch.Tensor, batch: int = 16, seed: int = 0) -> dict[str, float]:
    """Teacher-forced validation cross-entropy (nats/token, given the clean states of the real text — not a
    likelihood of the generative model) and raw KL per token. The codes' noise comes from a generator seeded
    with ``seed`` (not the global RNG), so every evaluation of the same model gives the same numbers and
    evaluating does not move the training's random stream."""
    model.eval()
    noise, model.code_noise = model.code_noise, True  # sampled codes, also during the deterministic warm-up
    dev = next(model.parameters()).device
    gen = device_generator(seed, dev)
    ce, kl, n = 0.0, 0.0, 0
    for i in range(0, len(windows), batch):
        w = windows[i:i + batch].to(dev)
        out = model(w, code_generator=gen)
        ce += out["ce"].item() * len(w)
        kl += out["kl"].item() * len(w) if "kl" in out else 0.0
        n += len(w)
    model.train()
    model.code_noise = noise
    return {"val_ce": ce / max(n, 1), "val_kl": kl / max(n, 1)}


@torch.no_grad()
def prior_val_loss(prior: FlowPrior, model: PSFModel, windows: torch.Tensor, with_codes: bool, seed: int) -> float:
    """Flow loss on the trajectories of validation windows, with the same code noise, times and flow noise at
    every call (the global RNG is seeded), so values compare across steps and stages."""
    torch.manual_seed(seed)
    prior.eval()
    loss = prior.loss(trajectories(model, windows.to(next(prior.parameters()).device), with_codes)).item()
    prior.train()
    return loss


@torch.no_grad()
def ar_val_ce(model: torch.nn.Module, windows: torch.Tensor, bos_id: int, batch: int = 16) -> float:
    """Mean next-token cross-entropy of the AR model over validation windows."""
    model.eval()
    dev = next(model.parameters()).device
    total = sum(ar_loss(model, windows[i:i + batch].to(dev), bos_id).item() * len(windows[i:i + batch])
                for i in range(0, len(windows), batch))
    model.train()
    return total / max(len(windows), 1)


# ---- the recipe ----------------------------------------------------------------------------------------------

def run(cfg: RecipeConfig, resume: str | None = None) -> dict:
    cfg.validate()  # also when the config was built in Python rather than loaded
    rt = runtime_for(cfg.run)
    if rt.world_size > 1:  # stages leave some parameters unused and rollouts run outside the DDP forward
        raise ForethoughtError("psf recipe runs in one process (CPU or one GPU); multi-process training is not "
                               "supported yet")
    plan = plan_stages(cfg)
    done = finished_stages(Path(cfg.run.out_dir) / cfg.run.name, plan, resume)
    train_tokens, valid_tokens, tokenizer = load_data(cfg.data, cfg.model.seq_len)
    parent = Run.create(cfg.run.out_dir, cfg.run.name, cfg, is_main=rt.is_main)
    vocab = vocab_size_for(train_tokens, valid_tokens, tokenizer=tokenizer)
    L, K = cfg.model.seq_len, cfg.model.blocks
    planted = cfg.data.corpus == PLANTED
    align = window_align(cfg)
    windows = eval_windows(valid_tokens, cfg.data.eval_sequences, L)
    # training windows on which every model stage recalibrates its state normalisation when it ends
    calibration = random_windows(train_tokens, cfg.prior.model.stats_sequences, L,
                                 step_generator(cfg.run.seed, 0, salt=3), align)
    t0 = time.perf_counter()

    def batch_fn_for(batch_size: int) -> Callable[[int], dict]:
        return recipe_batches(cfg, train_tokens, batch_size)

    results: dict[str, Any] = {"corpus": cfg.data.corpus, "tokenizer": "token ids" if planted else cfg.data.tokenizer,
                               "vocab_size": vocab, "bos_id": tokenizer.eos_token_id, "seq_len": L, "blocks": K,
                               "stages": {}, "eval_sequences": len(windows)}
    if planted:  # what the validation cross-entropies compare with: the exact NLL of the same windows
        results["true_val_nll"] = float(token_nll(build_generator(cfg.data.planted), windows.numpy()).mean())
    # Each stage seeds the global RNG (dropout, code noise) itself, so a stage that starts fresh after earlier
    # ones were skipped as complete trains exactly as in an uninterrupted run.
    prev_ckpt: Path | None = None
    prev_prior: Path | None = None
    model = build_psf(cfg.model, vocab, cfg.run.seed)
    results["params"] = {"psf": model.num_params()}
    final_stage = None
    for stage in plan:
        sub = Run.create(parent.dir, stage.name, is_main=rt.is_main)
        if stage.kind == "model":
            feats = stage_features(stage.name)
            configure(model, feats, stage.blocks)
            torch.manual_seed(cfg.run.seed + 1000 * (stage.seed_index + 1))
            res = _train_model_stage(model, stage, feats, sub, rt, cfg, batch_fn_for(stage.train.batch_size),
                                     windows, resume, prev_ckpt, calibration, done.get(stage.name))
            prev_ckpt, final_stage = latest_checkpoint(sub.dir), stage.name
        elif stage.kind == "prior":
            res = _train_prior_stage(model, stage, sub, rt, cfg, train_tokens, batch_fn_for(stage.train.batch_size),
                                     windows, resume, prev_prior, done.get(stage.name))
            results["params"][stage.name] = res["params"]
            prev_prior = latest_checkpoint(sub.dir)
        else:
            res, results["params"]["ar"] = _train_ar(stage, cfg, vocab, tokenizer.eos_token_id, sub, rt,
                                                     batch_fn_for(stage.train.batch_size), windows, resume,
                                                     done.get(stage.name))
        results["stages"][stage.name] = res
    results["final_stage"] = final_stage
    results["model_training_tokens"] = model_tokens(plan, L)
    previous = _previous_results(parent.dir) if len(done) == len(plan) else None
    if previous is not None and previous == {**results, "wall_s": previous.get("wall_s")}:
        # Nothing trained and nothing changed: the folder stays as the training invocation left it (its
        # env.json, and the results.json whose hash keys the benchmark's evaluation cache).
        print(report_markdown(previous))
        return previous
    results["wall_s"] = time.perf_counter() - t0
    if rt.is_main:
        parent.write_results(results)
        atomic_write_text(parent.path("report.md"), report_markdown(results))
        print(report_markdown(results))
    return results


def recipe_batches(cfg: RecipeConfig, train_tokens: torch.Tensor, batch_size: int) -> Callable[[int], dict]:
    """The training batches of every stage of a recipe run (and of the token-flow baseline trained beside it,
    forethought.psf.token_flow_run): step s -> ``{"tokens": (batch_size, L), "step": s}``, windows drawn by
    ``step_generator(seed, s)``, a pure function of the step, so models trained for the same steps and batch
    size see exactly the same windows."""
    L, seed, align = cfg.model.seq_len, cfg.run.seed, window_align(cfg)

    def batch_fn(step: int) -> dict:
        return {"tokens": random_windows(train_tokens, batch_size, L, step_generator(seed, step), align),
                "step": step}
    return batch_fn


def window_align(cfg: RecipeConfig) -> int:
    """Training windows start at multiples of this: the planted corpus's document starts, else anywhere."""
    return cfg.model.seq_len if cfg.data.corpus == PLANTED else 1


def _previous_results(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / "results.json").read_text())
    except (OSError, ValueError):  # missing or damaged: this invocation rewrites it
        return None


def _model_config(model: PSFModel, feats: dict[str, bool]) -> dict:
    return {"model_type": "forethought-psf", **asdict(model.config), "blocks_now": model.blocks, **feats}


def _train_model_stage(model: PSFModel, stage: Stage, feats: dict[str, bool], sub: Run, rt: Runtime,
                       cfg: RecipeConfig, batch_fn: Any, windows: torch.Tensor, resume: str | None,
                       prev_ckpt: Path | None, calibration: torch.Tensor, finished: dict | None) -> dict:
    tcfg = stage.train
    if finished is not None:
        load_checkpoint(latest_checkpoint(sub.dir), model)
        if rt.is_main:
            print(f"{stage.name}: complete, skipped")
        return finished
    fresh = latest_checkpoint(sub.dir) is None
    if fresh and prev_ckpt is not None:
        load_checkpoint(prev_ckpt, model)  # warm start (trainer state of the previous stage is not used)
    if fresh and stage.name == "codes":  # the code input's start (a resumed stage has it in its checkpoint)
        start_codes(model, cfg.model.code_in_init, step_generator(cfg.run.seed, 0, salt=7), cfg.model.code_init_sigma)
    ro = cfg.rollout
    warmup = cfg.model.code_warmup_steps if stage.name == "codes" else 0
    lr_scales = {id(p): cfg.model.code_lr_factor for p in model.code_layers()} \
        if feats["codes"] and cfg.model.code_lr_factor != 1.0 else None

    def after_step(m: torch.nn.Module, step: int) -> None:
        if step + 1 == tcfg.steps:  # before the final checkpoint is written
            calibrate_states(unwrap(m), calibration)

    def loss_fn(m: torch.nn.Module, batch: dict) -> tuple[torch.Tensor, dict]:
        tokens = batch["tokens"]
        unwrap(m).code_noise = batch["step"] >= warmup  # the deterministic warm-up, then sampled codes
        realized, gen = None, None
        if feats["self_realized"]:
            seed = int(torch.randint(0, 2**62, (1,), generator=step_generator(cfg.run.seed, batch["step"], salt=1)))
            gen = device_generator(seed, tokens.device)
            realized = realized_summaries(unwrap(m), tokens, ro.temperature, ro.top_p, gen)
        out = m(tokens, realized=realized, mix_prob=ro.prob, generator=gen)
        metrics = {"ce": out["ce"].detach()}
        if "kl" in out:
            metrics["kl"] = out["kl"].detach()
        return out["loss"], metrics

    out = train(model, loss_fn, batch_fn, tcfg, sub, rt, resume=resume, desc=stage.name,
                model_config=_model_config(model, feats),
                hooks=TrainHooks(after_step=after_step, lr_scales=lr_scales,
                                 eval_fn=lambda m, step: evaluate_psf(m, windows[:EVAL_WINDOWS])))
    model.code_noise = True
    res = {"blocks": model.blocks, "features": feats, "steps": tcfg.steps, "train_wall_s": out["wall_s"],
           "final_loss": out.get("final_loss"), "curve": out["curve"], **evaluate_psf(model, windows)}
    sub.write_results(res)
    return res


def _train_prior_stage(model: PSFModel, stage: Stage, sub: Run, rt: Runtime, cfg: RecipeConfig,
                       train_tokens: np.ndarray, batch_fn: Any, windows: torch.Tensor, resume: str | None,
                       prev_prior: Path | None, finished: dict | None) -> dict:
    pcfg, tcfg = cfg.prior.model, stage.train
    if stage.name == STATE_ONLY_PRIOR:  # the paper's state-only variant: the same decoder, states only
        pcfg = replace(pcfg, state_only=True)
    with_codes = model.use_codes and not pcfg.state_only
    torch.manual_seed(cfg.run.seed + 1)
    prior = prior_for(model, pcfg, trajectory_dim(model, pcfg), model.blocks)
    n_params = sum(p.numel() for p in prior.parameters())
    model.to(rt.device).eval()
    if finished is not None:
        load_checkpoint(latest_checkpoint(sub.dir), prior)
        if rt.is_main:
            print(f"{stage.name}: complete, skipped")
        return finished
    if latest_checkpoint(sub.dir) is None:
        if prev_prior is not None:  # longer blocks: the network's weights carry over, the statistics do not
            from safetensors.torch import load_file

            w = {k: v for k, v in load_file(str(prev_prior / "model.safetensors")).items()
                 if k.startswith(("net.", "time_mlp.")) and prior.state_dict()[k].shape == v.shape}
            load_weights(prior, w, strict=False, where=str(prev_prior))
        stats_windows = random_windows(train_tokens, pcfg.stats_sequences, cfg.model.seq_len,
                                       step_generator(cfg.run.seed, 0, salt=2), window_align(cfg))
        data = torch.cat([trajectories(model, stats_windows[i:i + 64].to(rt.device), with_codes).cpu()
                          for i in range(0, len(stats_windows), 64)])
        prior.set_stats(data)

    def loss_fn(p: torch.nn.Module, batch: dict) -> tuple[torch.Tensor, dict]:
        return unwrap(p).loss(trajectories(model, batch["tokens"], with_codes)), {}

    def eval_fn(p: torch.nn.Module, step: int) -> dict[str, float]:
        return {"val_flow_loss": prior_val_loss(p, model, windows[:EVAL_WINDOWS], with_codes, cfg.run.seed)}

    out = train(prior, loss_fn, batch_fn, tcfg, sub, rt, resume=resume, desc=stage.name,
                hooks=TrainHooks(eval_fn=eval_fn),
                model_config={"model_type": "forethought-psf-prior", **asdict(pcfg), "dim": prior.dim,
                              "blocks": prior.blocks, "with_codes": with_codes})
    val = prior_val_loss(prior, model, windows[:EVAL_WINDOWS], with_codes, cfg.run.seed)
    res = {"params": n_params, "blocks": prior.blocks, "dim": prior.dim, "with_codes": with_codes, "steps": tcfg.steps,
           "train_wall_s": out["wall_s"], "final_loss": out.get("final_loss"), "curve": out["curve"],
           "val_flow_loss": val}
    sub.write_results(res)
    return res


def _train_ar(stage: Stage, cfg: RecipeConfig, vocab: int, bos_id: int, sub: Run, rt: Runtime, batch_fn: Any,
              windows: torch.Tensor, resume: str | None, finished: dict | None) -> tuple[dict, int]:
    tcfg = stage.train
    torch.manual_seed(cfg.run.seed)
    model = build_ar(cfg.ar.model, vocab, cfg.model.seq_len)
    n_params = model.num_params()
    if finished is not None:
        if rt.is_main:
            print("ar: complete, skipped")
        return finished, n_params

    def loss_fn(m: torch.nn.Module, batch: dict) -> tuple[torch.Tensor, dict]:
        return ar_loss(m, batch["tokens"], bos_id), {}

    out = train(model, loss_fn, batch_fn, tcfg, sub, rt, resume=resume, desc="ar",
                model_config={**model.config_dict(), "bos_id": bos_id},
                hooks=TrainHooks(eval_fn=lambda m, step: {"val_ce": ar_val_ce(m, windows[:EVAL_WINDOWS], bos_id)}))
    res = {"steps": tcfg.steps, "training_tokens": tcfg.steps * tcfg.batch_size * cfg.model.seq_len,
           "train_wall_s": out["wall_s"], "final_loss": out.get("final_loss"), "curve": out["curve"],
           "val_ce": ar_val_ce(model, windows, bos_id)}
    sub.write_results(res)
    return res, n_params


def report_markdown(results: dict) -> str:
    def num(x: float | None) -> str:
        return "-" if x is None else f"{x:.4f}"

    lines = ["# PSF recipe", "", f"{results['corpus']} ({results['tokenizer']}), L={results['seq_len']}, "
             f"K={results['blocks']}", "", "| stage | steps | final loss | validation | train wall (s) |",
             "|---|---|---|---|---|"]
    for name, r in results["stages"].items():
        val = r.get("val_ce", r.get("val_flow_loss"))
        lines.append(f"| {name} | {r['steps']} | {num(r.get('final_loss'))} | {num(val)} | {r['train_wall_s']:.1f} |")
    if "true_val_nll" in results:
        lines.append(f"\nthe true generator's exact NLL of the validation windows: {results['true_val_nll']:.4f}")
    lines.append("\nvalidation: teacher-forced cross-entropy given the real text's states (PSF stages), next-token "
                 "cross-entropy (ar), flow loss (prior stages).")
    lines += ["", "parameters: " + json.dumps(results["params"]), ""]
    return "\n".join(lines)
