"""A plain training loop shared by every system: AdamW, warmup + cosine learning rate, gradient clipping,
accelerate for devices, DDP / FSDP and mixed precision, gradient accumulation, activation checkpointing, atomic
checkpoints, ``--resume auto``, progress bar, metrics log (and optionally a tracker), and an evaluation callback
every ``eval_every`` steps. Before training it prints the model's size and memory estimate (and stops with a
clear error when that cannot fit the GPU).

The loop is method-agnostic: a system passes ``batch_fn(step) -> global batch`` (a pure function of the step,
so an interrupted run sees exactly the same data after resuming, and every rank can take its own slice; each
rank's slice is split again into ``grad_accum`` micro-batches), ``loss_fn(model, batch) -> (loss, metrics)``
(``loss``: a mean over the batch's rows, or an :class:`~forethought.core.accumulate.AveragedLoss` for averages
over a varying number of items, such as answer tokens: see core/accumulate.py) and optionally
:class:`TrainHooks` (an evaluation callback, a per-step callback, gradient-norm groups, learning-rate factors).

With ``ema_decay`` > 0 the loop keeps an exponential moving average of the trained parameters (fp32, updated after
every optimizer step, starting from the weights training starts from), saved in every checkpoint beside the raw
weights and restored on resume; sampling and evaluation load it (core/checkpoint.py: ``load_pretrained``).

Resume restores the weights, the optimizer and every RNG stream (torch CPU and all CUDA devices, numpy,
Python), so a resumed run takes the same steps as an uninterrupted one. On the CPU this gives bit-identical
weights (tested); on a GPU it is as exact as the kernels are deterministic (cuDNN / atomics may not be). Under
several processes each rank draws its own dropout masks from the start of training (core/runtime.py:
``seed_rank_streams``); rank 0's streams are the ones checkpointed, so after a resume the ranks' dropout streams
are drawn again from them.

However training ends (finished, an error, Ctrl-C), the trackers are ended and the model is given back as it came:
each module's train/eval mode, activation checkpointing as it was, its own forward (no autocast wrapper).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from forethought.core.accumulate import accumulate_gradients, split_batch
from forethought.core.checkpoint import latest_checkpoint, load_checkpoint, read_ema, save_checkpoint
from forethought.core.config import to_dict
from forethought.core.errors import ForethoughtError
from forethought.core.io import atomic_write_text
from forethought.core.memory import (
    activation_checkpointing_on,
    check_fits,
    describe_memory,
    estimate_training_memory,
    resident_bytes,
    set_activation_checkpointing,
)
from forethought.core.plots import line_plot
from forethought.core.run import Run
from forethought.core.runtime import Runtime, rng_state, seed_rank_streams, set_rng_state
from forethought.core.trackers import log_row, start_trackers, stop_trackers
from forethought.core.train_config import TrainConfig  # its home imports no torch; importable from here too


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate for optimizer step ``step`` (0-based): linear warmup then cosine to min_lr_ratio·lr."""
    if cfg.warmup_steps > 0 and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return cfg.lr
    span = max(1, cfg.steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def shard(batch: Any, rank: int, world: int) -> Any:
    """This rank's slice of a global batch (tensors split on dim 0; dicts/tuples recursively)."""
    return split_batch(batch, rank, world, "processes")


def to_device(batch: Any, device: torch.device) -> Any:
    """A batch (tensors, dicts / tuples / lists of them) on ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


def ema_update(shadow: list[torch.Tensor], params: list[torch.Tensor], decay: float) -> None:
    """In place, for each pair: shadow <- decay·shadow + (1 − decay)·param (the EMA of the trained weights)."""
    with torch.no_grad():
        for s, p in zip(shadow, params, strict=True):
            s.lerp_(p.detach().to(s.dtype), 1.0 - decay)


def resolve_resume(run_dir: Path, resume: str | None) -> Path | None:
    """``None``/'none' -> fresh; 'auto' -> newest complete checkpoint if any; else a checkpoint path."""
    if resume in (None, "", "none", "never"):
        return None
    if resume == "auto":
        return latest_checkpoint(run_dir)
    p = Path(resume)
    if not p.is_dir():
        raise ForethoughtError(f"--resume: no checkpoint folder at {p}")
    return p


@dataclass(frozen=True)
class TrainHooks:
    """The optional ways a system plugs into :func:`train`, in one object so the loop's signature stays fixed as
    features arrive (a new hook is a new field here, not a new parameter at every call site).

    ``params``: what the optimizer trains (default: every parameter with ``requires_grad``).
    ``eval_fn(model, step) -> {name: number}``: every ``cfg.eval_every`` steps and at the end (RNG forked, logged
    with ``eval: true``, plotted to eval_curve.png).
    ``after_step(model, step)``: after each optimizer step, while the gradients are still there (AdaLoRA's rank
    allocation, PSF's code-noise warm-up).
    ``grad_groups``: on every logged step, ``grad_norm_<name>`` — the L2 norm of that group's gradient (the whole
    batch's, before clipping) — joins the metrics row (not under FSDP, whose gradients are sharded).
    ``lr_scales``: ``id(parameter) -> factor`` on the scheduled learning rate (e.g. a head at 10x the body's)."""

    params: list[torch.nn.Parameter] | None = None
    eval_fn: Callable[[torch.nn.Module, int], dict] | None = None
    after_step: Callable[[torch.nn.Module, int], None] | None = None
    grad_groups: dict[str, list[torch.nn.Parameter]] | None = None
    lr_scales: dict[int, float] | None = None


def train(model: torch.nn.Module, loss_fn: Callable[[torch.nn.Module, Any], tuple[Any, dict]],
          batch_fn: Callable[[int], Any], cfg: TrainConfig, run: Run, rt: Runtime,
          hooks: TrainHooks = TrainHooks(), *, resume: str | None = None, desc: str = "train",
          model_config: dict | None = None) -> dict[str, Any]:
    """Train ``model`` in place for ``cfg.steps`` steps; returns the loss curve and timings. ``hooks``: the
    optional callbacks and parameter settings (:class:`TrainHooks`); ``model_config``: saved beside each
    checkpoint's weights."""
    acc = rt.accelerator
    k = cfg.grad_accum
    if cfg.batch_size % (k * rt.world_size):
        raise ForethoughtError(f"{desc}: batch_size {cfg.batch_size} is not divisible by grad_accum {k} x "
                               f"{rt.world_size} process(es)")
    fsdp = acc.distributed_type == "FSDP"  # accelerate's DistributedType is a str enum
    if fsdp and cfg.ema_decay:
        raise ForethoughtError(f"{desc}: ema_decay is not supported under FSDP (each process holds a shard of the "
                               "weights); set ema_decay 0")
    trainable = hooks.params if hooks.params is not None else [p for p in model.parameters() if p.requires_grad]
    partial = sum(p.numel() for p in trainable) < sum(p.numel() for p in model.parameters())
    trained_ids = {id(p) for p in trainable}
    trained_named = [(n, p) for n, p in model.named_parameters() if id(p) in trained_ids]
    trained_names = {n for n, _ in trained_named}  # FSDP checkpoints keep these
    cost = estimate_training_memory(model, rt.precision, trainable, shards=rt.world_size if fsdp else 1)
    if rt.is_main:
        print(f"{desc}: {describe_memory(cost, rt.precision)}")
    check_fits(cost, rt.device, resident_bytes(model, rt.device))
    # What the loop switches on the caller's model is put back however it ends (finished, a non-finite loss,
    # Ctrl-C), since recipes train or evaluate the same model next: each module's train/eval mode, activation
    # checkpointing, accelerate's autocast wrapper on forward; and the run's trackers are ended.
    modes = [(m, m.training) for m in model.modules()]
    switch_checkpointing = cfg.activation_checkpointing and not activation_checkpointing_on(model)
    tracking, wrapped, bar = False, None, None
    try:
        if switch_checkpointing:
            set_activation_checkpointing(model, True)
        model.to(rt.device)
        scales = hooks.lr_scales or {}
        groups = []
        for scale in dict.fromkeys([1.0, *scales.values()]):  # one pair of groups (decay / none) per lr factor
            mine = [p for p in trainable if scales.get(id(p), 1.0) == scale]
            decayed = [p for p in mine if cfg.decay_all or p.dim() >= 2]
            groups += [{"params": decayed, "weight_decay": cfg.weight_decay, "lr_scale": scale},
                       {"params": [p for p in mine if not (cfg.decay_all or p.dim() >= 2)], "weight_decay": 0.0,
                        "lr_scale": scale}]
        opt = torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, cfg.beta2))
        start, wall_before = 0, 0.0
        ckpt = resolve_resume(run.dir, resume)
        if ckpt is None and resume in (None, "", "none", "never") and latest_checkpoint(run.dir) is not None:
            raise ForethoughtError(f"{run.dir} already holds checkpoints; pass --resume auto to continue that run, "
                                   "or choose another --run.name / --run.out_dir")
        if ckpt is not None:
            state = load_checkpoint(ckpt, model)
            if state.get("optimizer") is None:
                raise ForethoughtError(f"{ckpt} holds no optimizer state (FSDP shards it; resuming FSDP runs is not "
                                       "supported yet): start a new run, warm-started from its weights")
            opt.load_state_dict(state["optimizer"])
            set_rng_state(state["rng"] if "rng" in state else {"torch": state["torch_rng"]})
            if acc.scaler is not None and state.get("scaler"):
                acc.scaler.load_state_dict(state["scaler"])  # fp16: the loss scale continues where it was
            start = int(state["step"])
            wall_before = float(state.get("train_wall_s", 0.0))
            _truncate_metrics(run, start)
            if rt.is_main:
                print(f"resumed from {ckpt} at step {start}")
        ema = None
        if cfg.ema_decay:  # fp32 averages; a checkpoint without them (EMA newly on) starts them at its weights
            saved = (read_ema(ckpt) if ckpt is not None else None) or {}
            ema = {n: saved.get(n, p.detach()).to(device=rt.device, dtype=torch.float32, copy=True)
                   for n, p in trained_named}
        # every rank has drawn alike so far (equal initial weights, or rank 0's restored streams): from here on
        # each rank draws its own dropout masks
        seed_rank_streams(rt.rank, rt.world_size)
        run.start()  # inputs are valid and any checkpoint loaded: from here on the run writes
        tracking = start_trackers(acc, str(run.dir), str(run.dir), to_dict(run.cfg) if run.cfg is not None else None)
        wrapped, opt = acc.prepare(model, opt)
        # FSDP's own clip computes the norm over every shard (accelerate uses it when given all the parameters)
        clip = list(wrapped.parameters()) if fsdp else trainable
        curve: list[tuple[int, float]] = [(r["step"], r["loss"]) for r in run.metrics() if "loss" in r]

        def check(loss: torch.Tensor) -> None:
            if not all_finite(loss, acc):  # every rank learns it, so all stop together instead of hanging
                raise ForethoughtError(f"{desc}: loss became non-finite at step {step} (on at least one process); "
                                       "lower the learning rate")

        def log(row: dict[str, Any]) -> None:
            run.log(row)
            log_row(acc, row)

        t0 = time.perf_counter()
        bar = tqdm(range(start, cfg.steps), desc=desc, initial=start, total=cfg.steps,
                   disable=None if rt.is_main else True, dynamic_ncols=True)
        for step in bar:
            for g in opt.param_groups:
                g["lr"] = lr_at(step, cfg) * g.get("lr_scale", 1.0)  # (checkpoints before lr_scale: 1)
            batch = to_device(shard(batch_fn(step), rt.rank, rt.world_size), rt.device)
            micro = [split_batch(batch, i, k, "grad_accum micro-batches") for i in range(k)]
            wrapped.train()
            opt.zero_grad(set_to_none=True)
            step_out = accumulate_gradients(wrapped, loss_fn, micro, acc, check)
            done = step + 1
            logged = done % cfg.log_every == 0 or done == cfg.steps
            norms = grad_norms(hooks.grad_groups) if logged and hooks.grad_groups and not fsdp else {}
            if cfg.grad_clip > 0:
                acc.clip_grad_norm_(clip, cfg.grad_clip)
            opt.step()
            if hooks.after_step is not None:
                hooks.after_step(wrapped, step)
            if ema is not None:  # of the weights as the step leaves them
                ema_update(list(ema.values()), [p for _, p in trained_named], cfg.ema_decay)
            if logged:
                mean_loss = acc.reduce(step_out.loss.detach(), reduction="mean").item()
                curve.append((done, mean_loss))
                log({"step": done, "loss": mean_loss, "lr": lr_at(step, cfg),
                     **{name: float(v) for name, v in step_out.metrics.items()}, **norms})
                bar.set_postfix(loss=f"{mean_loss:.4f}")
            if hooks.eval_fn is not None and cfg.eval_every and (done % cfg.eval_every == 0 or done == cfg.steps):
                log({"step": done, "eval": True, **run_eval(hooks.eval_fn, acc.unwrap_model(wrapped), done)})
                wrapped.train()
            if (cfg.checkpoint_every and done % cfg.checkpoint_every == 0) or done == cfg.steps:
                acc.wait_for_everyone()
                # FSDP: every process takes part in gathering the full weights; its optimizer states stay sharded
                weights = None
                if fsdp:
                    weights = {k: v for k, v in acc.get_state_dict(wrapped).items()
                               if not partial or k in trained_names}
                if rt.is_main:
                    # The data position is the step itself (batch_fn is a pure function of it).
                    state = {"step": done, "optimizer": None if fsdp else opt.state_dict(), "rng": rng_state(),
                             "train_wall_s": wall_before + time.perf_counter() - t0,
                             "scaler": acc.scaler.state_dict() if acc.scaler is not None else None}
                    save_checkpoint(run.dir, done, acc.unwrap_model(wrapped), state, model_config,
                                    keep=cfg.keep_checkpoints, trainable_only=partial, weights=weights, ema=ema)
                acc.wait_for_everyone()
    finally:
        if bar is not None:
            bar.close()
        if tracking:
            stop_trackers(acc)
        if wrapped is not None:
            acc.unwrap_model(wrapped, keep_fp32_wrapper=False)  # the model's own forward again, without autocast
        if switch_checkpointing:
            set_activation_checkpointing(model, False)
        for m, training in modes:
            m.train(training)
    # Training wall time over every invocation that trained this model (kept in the checkpoints).
    wall = wall_before + time.perf_counter() - t0
    out: dict[str, Any] = {"curve": curve, "steps": cfg.steps, "resumed_from": start, "wall_s": wall,
                           "world_size": rt.world_size, "grad_accum": k, "precision": rt.precision,
                           "memory_estimate": cost}
    if curve:
        out["final_loss"] = curve[-1][1]
    evals = eval_records(run)
    if evals:
        out["eval_curve"] = evals
        if rt.is_main:
            plot_eval_curve(evals, run.path("eval_curve.png"), title=desc)
    return out


def grad_norms(groups: dict[str, list[torch.nn.Parameter]]) -> dict[str, float]:
    """``grad_norm_<name>``: the L2 norm of each group's current gradients (parameters without one count 0)."""
    out = {}
    for name, params in groups.items():
        sq = [p.grad.detach().float().pow(2).sum() for p in params if p.grad is not None]
        out[f"grad_norm_{name}"] = float(torch.stack(sq).sum().sqrt()) if sq else 0.0
    return out


def all_finite(loss: torch.Tensor, acc: Any) -> bool:
    """Whether the loss is finite on every process (one tiny all-reduce under DDP)."""
    bad = (~torch.isfinite(loss.detach())).float().reshape(1)
    if acc.num_processes > 1:
        bad = acc.reduce(bad, reduction="sum")
    return bool(bad.item() == 0)


def run_eval(eval_fn: Callable[[torch.nn.Module, int], dict], model: torch.nn.Module, step: int) -> dict[str, float]:
    """Call the evaluation callback without touching the training RNG streams (so evaluating does not change
    what is trained) and check that it returns numbers."""
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        out = eval_fn(model, step)
    try:
        return {k: float(v) for k, v in out.items()}
    except (TypeError, ValueError, AttributeError):
        raise TypeError(f"eval_fn must return a dict of numbers, got {out!r}") from None


def eval_records(run: Run) -> list[dict[str, float]]:
    """The evaluation rows of a run's metrics.jsonl (this invocation's and, after a resume, the earlier ones)."""
    return [{k: v for k, v in r.items() if k != "eval"} for r in run.metrics() if r.get("eval")]


def plot_eval_curve(evals: list[dict[str, float]], path: Path, title: str = "") -> Path:
    names = sorted({k for r in evals for k in r if k != "step"})
    series = {n: ([r["step"] for r in evals if n in r], [r[n] for r in evals if n in r]) for n in names}
    return line_plot(series, path, title=f"evaluation during training ({title})", xlabel="step", ylabel="value")


def _truncate_metrics(run: Run, step: int) -> None:
    """Drop metric lines logged after the checkpoint we resume from: those steps will be redone."""
    if not run.is_main:
        return
    kept = [r for r in run.metrics() if r.get("step", 0) <= step]
    atomic_write_text(run.dir / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in kept))
