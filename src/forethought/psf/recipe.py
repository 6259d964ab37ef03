"""``forethought psf recipe`` and ``forethought psf sample``: the multi-stage PSF recipe and its sampler.

Stages (each a sub-run folder of the run folder, each warm-started from the previous stage's checkpoint,
resumable with ``--resume auto`` and skipped when already complete):

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
"""

from __future__ import annotations

import copy
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from forethought.core.checkpoint import latest_checkpoint, load_checkpoint, load_weights
from forethought.core.config import field, load_config
from forethought.core.env import cache_dir
from forethought.core.errors import ForethoughtError
from forethought.core.io import atomic_write_text
from forethought.core.run import Run, RunConfig
from forethought.core.runtime import Runtime, compute_init, step_generator, unwrap
from forethought.core.trainer import TrainConfig, train
from forethought.data.corpora import eval_windows, load_token_splits, random_windows, vocab_size_for
from forethought.models.gpt import GPT
from forethought.psf.ar import ARModelConfig, ar_loss, build_ar, sample_ar
from forethought.psf.model import (
    PSFModel,
    PSFModelConfig,
    calibrate_states,
    check_blocks,
    generate_blocks,
    realized_states,
)
from forethought.psf.prior import FlowPrior, PriorConfig, sample_prior
from forethought.psf.sampling import device_generator

MODEL_STAGES = ("base", "landing", "self_realized", "codes")
BASELINES = ("ar",)


@dataclass
class PSFDataConfig:
    corpus: str = field("wikitext-2", "corpus name (wikitext-2, tinyshakespeare, tinystories, generated), a .txt "
                        "path, or hf:<dataset>")
    tokenizer: str = field("gpt2", "gpt2 | bpe:<N> | an HF tokenizer id")
    eval_sequences: int = field(256, "validation windows (non-overlapping, from the start of the valid split)")
    cache_dir: str = field("", "token/tokenizer cache ('' = FORETHOUGHT_CACHE or ~/.cache/forethought)")


@dataclass
class StageConfig:
    enabled: bool = field(True, "train this stage (its feature stays on in later stages either way)")
    train: TrainConfig = field(TrainConfig(steps=100, batch_size=16, lr=1e-3, log_every=10), "optimisation")


@dataclass
class RolloutConfig:
    prob: float = field(0.5, "per block: probability of feeding the self-realized state instead of the clean one")
    temperature: float = field(0.65, "rollout sampling temperature")
    top_p: float = field(0.95, "rollout nucleus")


@dataclass
class PriorStageConfig:
    enabled: bool = field(True, "train the flow prior")
    model: PriorConfig = field(PriorConfig(), "prior network, time sampling, sampler")
    train: TrainConfig = field(TrainConfig(steps=200, batch_size=32, lr=1e-3, log_every=10), "optimisation")


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
    baselines: list[str] = field([], "baselines to train beside PSF: ar")
    ar: ARStageConfig = field(ARStageConfig(), "autoregressive baseline")

    def validate(self) -> None:
        check_blocks(self.model.seq_len, self.model.blocks)
        self.model.validate()
        for k in self.longer_blocks.blocks:
            check_blocks(self.model.seq_len, k)
            if k > max(self.model.max_blocks, self.model.blocks):
                raise ForethoughtError(f"longer_blocks.blocks: K'={k} exceeds model.blocks; set model.max_blocks "
                                       f">= {k} to size the decoder for it")
        for b in self.baselines:
            if b not in BASELINES:
                raise ForethoughtError(f"baselines: unknown baseline '{b}' (choose from {', '.join(BASELINES)})")


# ---- data ----------------------------------------------------------------------------------------------------

def load_data(cfg: PSFDataConfig, seq_len: int) -> tuple[np.ndarray, np.ndarray, Any]:
    """Train/valid token arrays and the tokenizer."""
    from forethought.data.corpora import load_corpus_text
    from forethought.data.tokenizers import load_tokenizer

    cache = cache_dir(cfg.cache_dir)
    tr, va = load_token_splits(cfg.corpus, cfg.tokenizer, cache, seq_len + 1, f"model.seq_len {seq_len}")
    text = load_corpus_text(cfg.corpus, "train") if cfg.tokenizer.startswith("bpe:") else None
    tok = load_tokenizer(cfg.tokenizer, corpus_text=text, cache_dir=cache / "tokenizers")
    return tr, va, tok


# ---- stage helpers -------------------------------------------------------------------------------------------

def stage_features(name: str) -> dict[str, bool]:
    """Cumulative feature switches of a model stage."""
    i = MODEL_STAGES.index(name) if name in MODEL_STAGES else len(MODEL_STAGES) - 1  # blocks<K'>: all on
    return {"landing": i >= 1, "self_realized": i >= 2, "codes": i >= 3}


def build_psf(cfg: RecipeConfig, vocab: int, seed: int) -> PSFModel:
    torch.manual_seed(seed)
    mcfg = copy.deepcopy(cfg.model)
    mcfg.vocab_size = vocab
    return PSFModel(mcfg)


def configure(model: PSFModel, feats: dict[str, bool], blocks: int) -> PSFModel:
    model.landing, model.use_codes = feats["landing"], feats["codes"]
    model.set_blocks(blocks)
    return model


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
def evaluate_psf(model: PSFModel, windows: torch.Tensor, batch: int = 16) -> dict[str, float]:
    """Teacher-forced validation cross-entropy (nats/token, given the clean states of the real text — not a
    likelihood of the generative model) and raw KL per token."""
    model.eval()
    dev = next(model.parameters()).device
    ce, kl, n = 0.0, 0.0, 0
    for i in range(0, len(windows), batch):
        w = windows[i:i + batch].to(dev)
        out = model(w)
        ce += out["ce"].item() * len(w)
        kl += out["kl"].item() * len(w) if "kl" in out else 0.0
        n += len(w)
    model.train()
    return {"val_ce": ce / max(n, 1), "val_kl": kl / max(n, 1)}


def _complete(sub: Run, steps: int) -> bool:
    ckpt = latest_checkpoint(sub.dir)
    return (sub.dir / "results.json").is_file() and ckpt is not None and ckpt.name == f"step-{steps:06d}"


# ---- the recipe ----------------------------------------------------------------------------------------------

def run(cfg: RecipeConfig, resume: str | None = None) -> dict:
    rt = compute_init(cfg.run.device, cfg.run.seed)
    if rt.world_size > 1:  # stages leave some parameters unused and rollouts run outside the DDP forward
        raise ForethoughtError("psf recipe runs in one process (CPU or one GPU); multi-process training is not "
                               "supported yet")
    parent = Run.create(cfg.run.out_dir, cfg.run.name, cfg, is_main=rt.is_main)
    train_tokens, valid_tokens, tokenizer = load_data(cfg.data, cfg.model.seq_len)
    vocab = vocab_size_for(train_tokens, valid_tokens, tokenizer=tokenizer)
    L, K = cfg.model.seq_len, cfg.model.blocks
    windows = eval_windows(valid_tokens, cfg.data.eval_sequences, L)
    # training windows on which every model stage recalibrates its state normalisation when it ends
    calibration = random_windows(train_tokens, cfg.prior.model.stats_sequences, L,
                                 step_generator(cfg.run.seed, 0, salt=3))
    t0 = time.perf_counter()

    def batch_fn_for(batch_size: int) -> Any:
        def batch_fn(step: int) -> dict:
            return {"tokens": random_windows(train_tokens, batch_size, L, step_generator(cfg.run.seed, step)),
                    "step": step}
        return batch_fn

    results: dict[str, Any] = {"corpus": cfg.data.corpus, "tokenizer": cfg.data.tokenizer, "vocab_size": vocab,
                               "bos_id": tokenizer.eos_token_id, "seq_len": L, "blocks": K, "stages": {},
                               "eval_sequences": len(windows)}
    plan: list[tuple[str, int, StageConfig | TrainConfig]] = [(s, K, getattr(cfg, s)) for s in MODEL_STAGES]
    plan += [(f"blocks{k}", k, cfg.longer_blocks.train) for k in cfg.longer_blocks.blocks]
    # Each stage seeds the global RNG (dropout, code noise) itself, so a stage that starts fresh after earlier
    # ones were skipped as complete trains exactly as in an uninterrupted run.
    prev_ckpt: Path | None = None
    prev_prior: Path | None = None
    model_tokens = 0
    model = build_psf(cfg, vocab, cfg.run.seed)
    results["params"] = {"psf": model.num_params()}
    final_stage = None
    for index, (name, blocks, stage) in enumerate(plan):
        enabled = stage.enabled if isinstance(stage, StageConfig) else True
        tcfg = stage.train if isinstance(stage, StageConfig) else stage
        feats = stage_features(name)
        if not enabled:
            continue
        model_tokens += tcfg.steps * tcfg.batch_size * L
        configure(model, feats, blocks)
        torch.manual_seed(cfg.run.seed + 1000 * (index + 1))
        sub = Run.create(parent.dir, name, is_main=rt.is_main)
        res = _train_model_stage(model, name, feats, tcfg, sub, rt, cfg, batch_fn_for(tcfg.batch_size), windows,
                                 resume, prev_ckpt, calibration)
        results["stages"][name] = res
        prev_ckpt, final_stage = latest_checkpoint(sub.dir), name
        if cfg.prior.enabled and (name.startswith("blocks") or name == _last_main_stage(cfg)):
            pname = "prior" if not name.startswith("blocks") else f"prior_{name}"
            psub = Run.create(parent.dir, pname, is_main=rt.is_main)
            ptcfg = cfg.prior.train if pname == "prior" else cfg.longer_blocks.prior_train
            res = _train_prior_stage(model, pname, ptcfg, psub, rt, cfg, train_tokens,
                                     batch_fn_for(ptcfg.batch_size), windows, resume, prev_prior)
            results["stages"][pname] = res
            results["params"][pname] = res["params"]
            prev_prior = latest_checkpoint(psub.dir)
    if final_stage is None:
        raise ForethoughtError("every PSF model stage is disabled; enable at least one")
    results["final_stage"] = final_stage
    results["model_training_tokens"] = model_tokens
    if "ar" in cfg.baselines:
        results["stages"]["ar"], results["params"]["ar"] = _train_ar(cfg, vocab, tokenizer.eos_token_id, model_tokens,
                                                                     parent, rt, batch_fn_for, windows, resume)
    results["wall_s"] = time.perf_counter() - t0
    if rt.is_main:
        parent.write_results(results)
        _report(results, parent)
    return results


def _last_main_stage(cfg: RecipeConfig) -> str | None:
    enabled = [s for s in MODEL_STAGES if getattr(cfg, s).enabled]
    return enabled[-1] if enabled else None


def _model_config(model: PSFModel, feats: dict[str, bool]) -> dict:
    return {"model_type": "forethought-psf", **asdict(model.config), "blocks_now": model.blocks, **feats}


def _train_model_stage(model: PSFModel, name: str, feats: dict[str, bool], tcfg: TrainConfig, sub: Run, rt: Runtime,
                       cfg: RecipeConfig, batch_fn: Any, windows: torch.Tensor, resume: str | None,
                       prev_ckpt: Path | None, calibration: torch.Tensor) -> dict:
    if resume == "auto" and _complete(sub, tcfg.steps):
        load_checkpoint(latest_checkpoint(sub.dir), model)
        if rt.is_main:
            print(f"{name}: complete, skipped")
        return json.loads((sub.dir / "results.json").read_text())
    if latest_checkpoint(sub.dir) is None and prev_ckpt is not None:
        load_checkpoint(prev_ckpt, model)  # warm start (trainer state of the previous stage is not used)
    ro = cfg.rollout

    def after_step(m: torch.nn.Module, step: int) -> None:
        if step + 1 == tcfg.steps:  # before the final checkpoint is written
            calibrate_states(unwrap(m), calibration)

    def loss_fn(m: torch.nn.Module, batch: dict) -> tuple[torch.Tensor, dict]:
        tokens = batch["tokens"]
        realized, gen = None, None
        if feats["self_realized"]:
            seed = int(torch.randint(0, 2**62, (1,), generator=step_generator(cfg.run.seed, batch["step"], salt=1)))
            gen = device_generator(seed, tokens.device)
            realized = realized_states(unwrap(m), tokens, ro.temperature, ro.top_p, gen)
        out = m(tokens, realized=realized, mix_prob=ro.prob, generator=gen)
        metrics = {"ce": out["ce"].detach()}
        if "kl" in out:
            metrics["kl"] = out["kl"].detach()
        return out["loss"], metrics

    out = train(model, loss_fn, batch_fn, tcfg, sub, rt, resume=resume, desc=name,
                model_config=_model_config(model, feats), after_step=after_step)
    res = {"blocks": model.blocks, "features": feats, "steps": tcfg.steps, "train_wall_s": out["wall_s"],
           "final_loss": out.get("final_loss"), "curve": out["curve"], **evaluate_psf(model, windows)}
    sub.write_results(res)
    return res


def _load_prior_shell(model: PSFModel, cfg: RecipeConfig) -> FlowPrior:
    return FlowPrior(cfg.prior.model, trajectory_dim(model, cfg.prior.model), model.blocks)


def _train_prior_stage(model: PSFModel, name: str, tcfg: TrainConfig, sub: Run, rt: Runtime, cfg: RecipeConfig,
                       train_tokens: np.ndarray, batch_fn: Any, windows: torch.Tensor, resume: str | None,
                       prev_prior: Path | None) -> dict:
    pcfg = cfg.prior.model
    with_codes = model.use_codes and not pcfg.state_only
    torch.manual_seed(cfg.run.seed + 1)
    prior = _load_prior_shell(model, cfg)
    n_params = sum(p.numel() for p in prior.parameters())
    model.to(rt.device).eval()
    if resume == "auto" and _complete(sub, tcfg.steps):
        load_checkpoint(latest_checkpoint(sub.dir), prior)
        if rt.is_main:
            print(f"{name}: complete, skipped")
        return json.loads((sub.dir / "results.json").read_text())
    if latest_checkpoint(sub.dir) is None:
        if prev_prior is not None:  # longer blocks: the network's weights carry over, the statistics do not
            from safetensors.torch import load_file

            w = {k: v for k, v in load_file(str(prev_prior / "model.safetensors")).items()
                 if k.startswith(("net.", "time_mlp.")) and prior.state_dict()[k].shape == v.shape}
            load_weights(prior, w, strict=False, where=str(prev_prior))
        stats_windows = random_windows(train_tokens, pcfg.stats_sequences, cfg.model.seq_len,
                                       step_generator(cfg.run.seed, 0, salt=2))
        data = torch.cat([trajectories(model, stats_windows[i:i + 64].to(rt.device), with_codes).cpu()
                          for i in range(0, len(stats_windows), 64)])
        prior.set_stats(data)

    def loss_fn(p: torch.nn.Module, batch: dict) -> tuple[torch.Tensor, dict]:
        return unwrap(p).loss(trajectories(model, batch["tokens"], with_codes)), {}

    out = train(prior, loss_fn, batch_fn, tcfg, sub, rt, resume=resume, desc=name,
                model_config={"model_type": "forethought-psf-prior", **asdict(pcfg), "dim": prior.dim,
                              "blocks": prior.blocks, "with_codes": with_codes})
    torch.manual_seed(cfg.run.seed)  # validation noise and times: the same for every stage
    with torch.no_grad():
        prior.eval()
        val = prior.loss(trajectories(model, windows[:64].to(rt.device), with_codes)).item()
        prior.train()
    res = {"params": n_params, "blocks": prior.blocks, "dim": prior.dim, "with_codes": with_codes, "steps": tcfg.steps,
           "train_wall_s": out["wall_s"], "final_loss": out.get("final_loss"), "curve": out["curve"],
           "val_flow_loss": val}
    sub.write_results(res)
    return res


def _ar_steps(cfg: RecipeConfig, model_tokens: int) -> int:
    if cfg.ar.train.steps > 0:
        return cfg.ar.train.steps
    return max(1, math.ceil(model_tokens / (cfg.ar.train.batch_size * cfg.model.seq_len)))


def _train_ar(cfg: RecipeConfig, vocab: int, bos_id: int, model_tokens: int, parent: Run, rt: Runtime,
              batch_fn_for: Any, windows: torch.Tensor, resume: str | None) -> tuple[dict, int]:
    tcfg = copy.deepcopy(cfg.ar.train)
    tcfg.steps = _ar_steps(cfg, model_tokens)
    torch.manual_seed(cfg.run.seed)
    model = build_ar(cfg.ar.model, vocab, cfg.model.seq_len)
    n_params = model.num_params()
    sub = Run.create(parent.dir, "ar", is_main=rt.is_main)
    if resume == "auto" and _complete(sub, tcfg.steps):
        if rt.is_main:
            print("ar: complete, skipped")
        return json.loads((sub.dir / "results.json").read_text()), n_params

    def loss_fn(m: torch.nn.Module, batch: dict) -> tuple[torch.Tensor, dict]:
        return ar_loss(m, batch["tokens"], bos_id), {}

    out = train(model, loss_fn, batch_fn_for(tcfg.batch_size), tcfg, sub, rt, resume=resume, desc="ar",
                model_config={**model.config_dict(), "bos_id": bos_id})
    model.eval()
    with torch.no_grad():
        dev = next(model.parameters()).device
        total = sum(ar_loss(model, windows[i:i + 16].to(dev), bos_id).item() * len(windows[i:i + 16])
                    for i in range(0, len(windows), 16))
        val = total / max(len(windows), 1)
    res = {"steps": tcfg.steps, "training_tokens": tcfg.steps * tcfg.batch_size * cfg.model.seq_len,
           "train_wall_s": out["wall_s"], "final_loss": out.get("final_loss"), "curve": out["curve"], "val_ce": val}
    sub.write_results(res)
    return res, n_params


def _report(results: dict, run: Run) -> None:
    def num(x: float | None) -> str:
        return "-" if x is None else f"{x:.4f}"

    lines = ["# PSF recipe", "", f"{results['corpus']} ({results['tokenizer']}), L={results['seq_len']}, "
             f"K={results['blocks']}", "", "| stage | steps | final loss | validation | train wall (s) |",
             "|---|---|---|---|---|"]
    for name, r in results["stages"].items():
        val = r.get("val_ce", r.get("val_flow_loss"))
        lines.append(f"| {name} | {r['steps']} | {num(r.get('final_loss'))} | {num(val)} | {r['train_wall_s']:.1f} |")
    lines.append("\nvalidation: teacher-forced cross-entropy given the real text's states (PSF stages), next-token "
                 "cross-entropy (ar), flow loss (prior stages).")
    lines += ["", "parameters: " + json.dumps(results["params"]), ""]
    atomic_write_text(run.path("report.md"), "\n".join(lines))
    print("\n".join(lines))


# ---- sampling ------------------------------------------------------------------------------------------------

@torch.no_grad()
def sample_psf(model: PSFModel, prior: FlowPrior | None, n: int, *, temperature: float = 1.0, top_p: float = 1.0,
               steps: int | None = None, generator: torch.Generator | None = None,
               trajectory: Literal["prior", "mean"] = "prior", prompt: torch.Tensor | None = None,
               batch_size: int = 0) -> torch.Tensor:
    """(n, L) token ids from PSF: the prior's Euler sampler writes a (K, dim) state trajectory (``trajectory:
    mean`` uses the stored mean trajectory instead — the ablation), then the decoder writes all K blocks in
    parallel. ``prompt`` (n, m·L/K): the first m blocks are given; their states (and codes) are fixed during the
    flow (replacement) and their tokens are forced. Without a prior (``prior=None``) the mean trajectory is
    impossible too, so a prior is required; codes the prior does not model are zero."""
    if prior is None:
        raise ForethoughtError("sampling PSF needs a trained prior (the recipe's prior stage)")
    model.eval()
    prior.eval()
    if batch_size and n > batch_size:
        parts = [sample_psf(model, prior, min(batch_size, n - i), temperature=temperature, top_p=top_p, steps=steps,
                            generator=generator, trajectory=trajectory,
                            prompt=None if prompt is None else prompt[i:i + batch_size])
                 for i in range(0, n, batch_size)]
        return torch.cat(parts)
    dev = next(model.parameters()).device
    K, nb, S = model.blocks, model.block_len, model.state_dim
    if prior.blocks != K:
        raise ForethoughtError(f"the prior models {prior.blocks} states, the model decodes {K} blocks")
    known, mask, force, force_blocks = None, None, None, None
    if prompt is not None:
        prompt = prompt.to(dev).long()
        if prompt.shape[0] != n or prompt.shape[1] % nb or not 0 < prompt.shape[1] <= model.seq_len:
            raise ForethoughtError(f"a prompt must be (n, m·{nb}) tokens with 1 <= m <= {K}")
        m = prompt.shape[1] // nb
        h, feats = model.encode(prompt)  # (n, m, S): block-causal, so these equal the full text's h_1..h_m
        s = torch.cat([model.start.expand(n, 1, S), h], 1)[:, :K] if model.config.states == "predictive" else h
        known = torch.zeros(n, K, prior.dim, device=dev)
        mask = torch.zeros(n, K, prior.dim, dtype=torch.bool, device=dev)
        known[:, :s.shape[1], :S], mask[:, :s.shape[1], :S] = s, True
        if prior.dim > S:
            known[:, :m, S:], mask[:, :m, S:] = model.posterior(feats)[0], True
        force = torch.zeros(n, model.seq_len, dtype=torch.long, device=dev)
        force[:, :m * nb] = prompt
        force_blocks = (torch.arange(K, device=dev) < m).expand(n, K)
    if trajectory == "mean":
        traj = prior.traj_mean.expand(n, K, prior.dim).clone()
        if known is not None:
            traj = torch.where(mask, known, traj)
    else:
        traj = sample_prior(prior, n, steps, generator, known, mask)  # (n, K, dim)
    states = traj[..., :S]
    if model.config.states == "predictive":
        states = torch.cat([model.start.expand(n, 1, S), states[:, 1:]], 1)  # s_1 is known exactly
    codes = None
    if model.use_codes:
        codes = traj[..., S:] if prior.dim > S else torch.zeros(n, K, model.code_dim, device=dev)
    return generate_blocks(model, states, codes, temperature=temperature, top_p=top_p, generator=generator,
                           force=force, force_blocks=force_blocks)


@dataclass
class RecipeArtifacts:
    """What a finished recipe run holds, ready to sample from."""

    cfg: RecipeConfig
    results: dict
    stage: str
    model: PSFModel
    prior: FlowPrior | None
    ar: GPT | None
    tokenizer: Any
    bos_id: int
    valid_tokens: np.ndarray


def load_recipe(run_dir: str | Path, stage: str = "", device: str = "cpu") -> RecipeArtifacts:
    """Rebuild a ``psf recipe`` run: the PSF model of ``stage`` ('' = the final model stage), its prior (the
    prior trained after that stage, if any) and the AR baseline (if trained)."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file() or not (run_dir / "results.json").is_file():
        raise ForethoughtError(f"{run_dir} is not a finished 'psf recipe' run folder (config.yaml, results.json)")
    cfg = load_config(RecipeConfig, run_dir / "config.yaml")
    results = json.loads((run_dir / "results.json").read_text())
    stage = stage or results["final_stage"]
    model_stages = [s for s in results["stages"] if s in MODEL_STAGES or s.startswith("blocks")]
    if stage not in model_stages:
        raise ForethoughtError(f"stage '{stage}' was not trained in {run_dir} "
                               f"(model stages: {', '.join(model_stages)})")
    ckpt = latest_checkpoint(run_dir / stage)
    if ckpt is None:
        raise ForethoughtError(f"no checkpoint for stage '{stage}' in {run_dir}")
    info = results["stages"][stage]
    model = configure(build_psf(cfg, results["vocab_size"], cfg.run.seed), info["features"], info["blocks"])
    load_checkpoint(ckpt, model)
    prior = None
    pname = f"prior_{stage}" if stage.startswith("blocks") else "prior"
    pckpt = latest_checkpoint(run_dir / pname)
    if pckpt is not None and pname in results["stages"]:
        pinfo = results["stages"][pname]
        if pinfo["blocks"] == model.blocks and (stage == _prior_source(results, pname)):
            prior = FlowPrior(cfg.prior.model, pinfo["dim"], pinfo["blocks"])
            load_checkpoint(pckpt, prior)
            prior.eval()
    ar = None
    ackpt = latest_checkpoint(run_dir / "ar")
    if ackpt is not None:
        ar = build_ar(cfg.ar.model, results["vocab_size"], cfg.model.seq_len)
        load_checkpoint(ackpt, ar)
        ar.eval()
    _, valid, tokenizer = load_data(cfg.data, cfg.model.seq_len)
    dev = torch.device(device)
    return RecipeArtifacts(cfg, results, stage, model.to(dev).eval(), prior.to(dev) if prior else None,
                           ar.to(dev) if ar else None, tokenizer, int(results["bos_id"]), valid)


def _prior_source(results: dict, pname: str) -> str:
    """The model stage a prior was trained on: the model stage just before it in the results."""
    names = list(results["stages"])
    before = [s for s in names[:names.index(pname)] if s in MODEL_STAGES or s.startswith("blocks")]
    return before[-1] if before else ""


@dataclass
class SampleConfig:
    recipe_run: str = field("", "the 'psf recipe' run folder to sample from (required)")
    name: str = field("samples", "output folder name inside the recipe run")
    model: Literal["psf", "ar"] = field("psf", "which model writes the samples")
    stage: str = field("", "PSF model stage ('' = the final one)")
    n: int = field(16, "number of samples")
    batch_size: int = field(16, "samples per batch")
    temperature: float = field(1.0, "decoder temperature")
    top_p: float = field(1.0, "decoder nucleus")
    prior_steps: int = field(0, "Euler steps (0 = the prior's configured steps)")
    trajectory: Literal["prior", "mean"] = field("prior", "sampled state trajectories, or the mean one (ablation)")
    prompt_blocks: int = field(0, "prompted generation: the first m blocks of validation windows are given")
    seed: int = field(0, "sampling seed")
    device: str = field("auto", "auto | cpu | cuda | mps")

    def validate(self) -> None:
        if not self.recipe_run:
            raise ForethoughtError("psf sample needs --recipe_run <folder of a 'psf recipe' run>")
        if self.n <= 0 or self.batch_size <= 0:
            raise ForethoughtError("n and batch_size must be > 0")


def sample(cfg: SampleConfig, resume: str | None = None) -> dict:
    """``forethought psf sample``: writes ``<recipe_run>/<name>/samples.jsonl``, ``samples.txt``, ``results.json``."""
    del resume  # sampling has no checkpoints
    device = cfg.device if cfg.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    art = load_recipe(cfg.recipe_run, cfg.stage, device)
    L = art.cfg.model.seq_len
    nb = art.model.block_len
    prompt = None
    if cfg.prompt_blocks:
        if not 0 < cfg.prompt_blocks <= art.model.blocks:
            raise ForethoughtError(f"prompt_blocks must be in 1..{art.model.blocks}")
        windows = eval_windows(art.valid_tokens, cfg.n, L)
        if len(windows) < cfg.n:
            raise ForethoughtError(f"the valid split holds only {len(windows)} prompt windows; lower n")
        prompt = windows[:, :cfg.prompt_blocks * nb]
    g = device_generator(cfg.seed, device)
    t0 = time.perf_counter()
    if cfg.model == "ar":
        if art.ar is None:
            raise ForethoughtError(f"{cfg.recipe_run} has no AR baseline (train it with baselines: [ar])")
        ids = torch.cat([sample_ar(art.ar, min(cfg.batch_size, cfg.n - i), L, art.bos_id, temperature=cfg.temperature,
                                   top_p=cfg.top_p, generator=g,
                                   prompt=None if prompt is None else prompt[i:i + cfg.batch_size])
                         for i in range(0, cfg.n, cfg.batch_size)])
        depth = L - (0 if prompt is None else prompt.shape[1])
    else:
        if art.prior is None:
            raise ForethoughtError(f"stage '{art.stage}' of {cfg.recipe_run} has no trained prior")
        steps = cfg.prior_steps or art.prior.config.steps
        ids = sample_psf(art.model, art.prior, cfg.n, temperature=cfg.temperature, top_p=cfg.top_p, steps=steps,
                         generator=g, trajectory=cfg.trajectory, prompt=prompt, batch_size=cfg.batch_size)
        depth = (steps if cfg.trajectory == "prior" else 0) + nb
    wall = time.perf_counter() - t0
    out_dir = Path(cfg.recipe_run) / cfg.name
    out_dir.mkdir(parents=True, exist_ok=True)
    texts = art.tokenizer.batch_decode(ids.tolist())
    n_prompt = 0 if prompt is None else prompt.shape[1]
    atomic_write_text(out_dir / "samples.jsonl", "".join(
        json.dumps({"index": i, "prompt_tokens": n_prompt, "tokens": row, "text": text}) + "\n"
        for i, (row, text) in enumerate(zip(ids.tolist(), texts))))
    atomic_write_text(out_dir / "samples.txt", "\n\n==========\n\n".join(texts) + "\n")
    res = {"model": cfg.model, "stage": art.stage if cfg.model == "psf" else "ar", "n": cfg.n,
           "temperature": cfg.temperature, "top_p": cfg.top_p, "trajectory": cfg.trajectory,
           "prompt_tokens": n_prompt, "serial_depth": depth, "wall_s": wall, "settings": asdict(cfg)}
    Run(out_dir).write_results(res)
    print(f"wrote {cfg.n} samples to {out_dir}")
    return res
