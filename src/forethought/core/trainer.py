"""A plain training loop shared by every system: AdamW, warmup + cosine learning rate, gradient clipping,
accelerate for devices and DDP, atomic checkpoints, exact ``--resume auto``, progress bar, metrics log.

The loop is method-agnostic: a system passes ``batch_fn(step) -> global batch`` (a pure function of the step,
so an interrupted run sees exactly the same data after resuming, and every rank can take its own slice) and
``loss_fn(model, batch) -> (loss, metrics)``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from tqdm.auto import tqdm

from forethought.core.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from forethought.core.config import field
from forethought.core.errors import ForethoughtError
from forethought.core.io import atomic_write_text
from forethought.core.run import Run
from forethought.core.runtime import Runtime


@dataclass
class TrainConfig:
    steps: int = field(100, "optimizer steps")
    batch_size: int = field(16, "global batch size (split evenly across processes)")
    lr: float = field(1e-3, "peak learning rate")
    min_lr_ratio: float = field(0.1, "final learning rate as a fraction of lr (cosine schedule)")
    warmup_steps: int = field(0, "linear warmup steps")
    schedule: Literal["cosine", "constant"] = field("cosine", "learning-rate schedule after warmup")
    weight_decay: float = field(0.0, "AdamW weight decay")
    beta2: float = field(0.999, "AdamW beta2")
    grad_clip: float = field(1.0, "max gradient norm (0 = off)")
    checkpoint_every: int = field(0, "save a checkpoint every N steps (0 = only at the end)")
    keep_checkpoints: int = field(2, "how many recent checkpoints to keep")
    log_every: int = field(10, "log the training loss every N steps")
    eval_every: int = field(0, "run the evaluation callback every N steps (0 = only at the end)")


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
    if world == 1:
        return batch
    if isinstance(batch, torch.Tensor):
        n = batch.shape[0]
        if n % world:
            raise ForethoughtError(f"global batch size {n} is not divisible by the {world} processes")
        per = n // world
        return batch[rank * per:(rank + 1) * per]
    if isinstance(batch, dict):
        return {k: shard(v, rank, world) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(shard(v, rank, world) for v in batch)
    return batch


def _to(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: _to(v, device) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(_to(v, device) for v in batch)
    return batch


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


def train(model: torch.nn.Module, loss_fn: Callable[[torch.nn.Module, Any], tuple[torch.Tensor, dict]],
          batch_fn: Callable[[int], Any], cfg: TrainConfig, run: Run, rt: Runtime, *,
          resume: str | None = None, desc: str = "train", params: list[torch.nn.Parameter] | None = None,
          eval_fn: Callable[[torch.nn.Module, int], dict] | None = None,
          model_config: dict | None = None,
          after_step: Callable[[torch.nn.Module, int], None] | None = None) -> dict[str, Any]:
    """Train ``model`` in place for ``cfg.steps`` steps; returns the loss curve and timings. ``after_step(model,
    step)`` runs after each optimizer step, while the gradients are still there (AdaLoRA's rank allocation)."""
    acc = rt.accelerator
    model.to(rt.device)
    trainable = params if params is not None else [p for p in model.parameters() if p.requires_grad]
    partial = sum(p.numel() for p in trainable) < sum(p.numel() for p in model.parameters())
    decay = [p for p in trainable if p.dim() >= 2]
    no_decay = [p for p in trainable if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, cfg.beta2))
    start, wall_before = 0, 0.0
    ckpt = resolve_resume(run.dir, resume)
    if ckpt is None and resume in (None, "", "none", "never") and latest_checkpoint(run.dir) is not None:
        raise ForethoughtError(f"{run.dir} already holds checkpoints; pass --resume auto to continue that run, "
                               "or choose another --run.name / --run.out_dir")
    if ckpt is not None:
        state = load_checkpoint(ckpt, model)
        opt.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        start = int(state["step"])
        wall_before = float(state.get("train_wall_s", 0.0))
        _truncate_metrics(run, start)
        if rt.is_main:
            print(f"resumed from {ckpt} at step {start}")
    wrapped, opt = acc.prepare(model, opt)
    curve: list[tuple[int, float]] = [(r["step"], r["loss"]) for r in run.metrics() if "loss" in r]
    t0 = time.perf_counter()
    bar = tqdm(range(start, cfg.steps), desc=desc, initial=start, total=cfg.steps,
               disable=None if rt.is_main else True, dynamic_ncols=True)
    for step in bar:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, cfg)
        batch = _to(shard(batch_fn(step), rt.rank, rt.world_size), rt.device)
        wrapped.train()
        loss, metrics = loss_fn(wrapped, batch)
        if not torch.isfinite(loss):
            raise ForethoughtError(f"{desc}: loss became {loss.item()} at step {step}; lower the learning rate")
        opt.zero_grad(set_to_none=True)
        acc.backward(loss)
        if cfg.grad_clip > 0:
            acc.clip_grad_norm_(trainable, cfg.grad_clip)
        opt.step()
        if after_step is not None:
            after_step(wrapped, step)
        done = step + 1
        if done % cfg.log_every == 0 or done == cfg.steps:
            mean_loss = acc.reduce(loss.detach(), reduction="mean").item()
            curve.append((done, mean_loss))
            rec = {"step": done, "loss": mean_loss, "lr": lr_at(step, cfg), **{k: float(v) for k, v in metrics.items()}}
            run.log(rec)
            bar.set_postfix(loss=f"{mean_loss:.4f}")
        if eval_fn is not None and cfg.eval_every and done % cfg.eval_every == 0 and done != cfg.steps:
            run.log({"step": done, **eval_fn(acc.unwrap_model(wrapped), done)})
        if (cfg.checkpoint_every and done % cfg.checkpoint_every == 0) or done == cfg.steps:
            acc.wait_for_everyone()
            if rt.is_main:
                state = {"step": done, "optimizer": opt.state_dict(), "torch_rng": torch.get_rng_state(),
                         "data_position": done, "train_wall_s": wall_before + time.perf_counter() - t0}
                save_checkpoint(run.dir, done, acc.unwrap_model(wrapped), state, model_config,
                                keep=cfg.keep_checkpoints, trainable_only=partial)
            acc.wait_for_everyone()
    bar.close()
    # Training wall time over every invocation that trained this model (kept in the checkpoints).
    wall = wall_before + time.perf_counter() - t0
    out: dict[str, Any] = {"curve": curve, "steps": cfg.steps, "resumed_from": start, "wall_s": wall,
                           "world_size": rt.world_size}
    if curve:
        out["final_loss"] = curve[-1][1]
    if eval_fn is not None:
        final = eval_fn(acc.unwrap_model(wrapped), cfg.steps)
        run.log({"step": cfg.steps, **final})
        out["eval"] = final
    return out


def _truncate_metrics(run: Run, step: int) -> None:
    """Drop metric lines logged after the checkpoint we resume from: those steps will be redone."""
    if not run.is_main:
        return
    kept = [r for r in run.metrics() if r.get("step", 0) <= step]
    atomic_write_text(run.dir / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in kept))
