"""The optimisation settings every training command shares (``--train.*``), in a module that imports no torch, so
that a command's config can be read and checked before the heavy libraries load. The loop that uses them is
:mod:`forethought.core.trainer`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from forethought.core.config import field, finite
from forethought.core.errors import ForethoughtError


@dataclass
class TrainConfig:
    steps: int = field(100, "optimizer steps")
    batch_size: int = field(16, "global batch size per optimizer step (split evenly across processes, then into "
                            "grad_accum micro-batches)")
    grad_accum: int = field(1, "gradient accumulation: micro-batches per optimizer step (micro-batch = batch_size "
                            "/ (grad_accum x processes)); the same update as one big batch, in less memory")
    activation_checkpointing: bool = field(False, "recompute each transformer block in the backward pass instead "
                                           "of keeping its activations (less memory, about a third more compute)")
    lr: float = field(1e-3, "peak learning rate")
    min_lr_ratio: float = field(0.1, "final learning rate as a fraction of lr (cosine schedule)")
    warmup_steps: int = field(0, "linear warmup steps")
    schedule: Literal["cosine", "constant"] = field("cosine", "learning-rate schedule after warmup")
    weight_decay: float = field(0.0, "AdamW weight decay")
    decay_all: bool = field(False, "apply weight_decay to every parameter, biases and norms too, as a plain "
                            "AdamW(model.parameters()) does (default: matrices only)")
    beta2: float = field(0.999, "AdamW beta2")
    grad_clip: float = field(1.0, "max gradient norm (0 = off)")
    checkpoint_every: int = field(0, "save a checkpoint every N steps (0 = only at the end)")
    keep_checkpoints: int = field(2, "how many recent checkpoints to keep")
    log_every: int = field(10, "log the training loss every N steps")
    eval_every: int = field(0, "evaluate every N steps and at the last step, logged to metrics.jsonl and plotted "
                            "to eval_curve.png (0 = off)")
    ema_decay: float = field(0.0, "keep an exponential moving average of the trained weights, ema <- decay x ema + "
                             "(1 - decay) x weights after every optimizer step (0 = off; e.g. 0.9999): saved beside "
                             "the weights in every checkpoint (ema.safetensors), restored on resume, and the weights "
                             "that sampling and evaluation load")

    def validate(self) -> None:
        for name in ("batch_size", "log_every", "grad_accum"):
            if getattr(self, name) < 1:
                raise ForethoughtError(f"{name} must be at least 1, got {getattr(self, name)}")
        # steps 0 is allowed: some recipes read it as "choose for me" (e.g. the PSF AR baseline's budget)
        for name in ("steps", "warmup_steps", "checkpoint_every", "eval_every", "keep_checkpoints", "weight_decay",
                     "grad_clip"):
            if getattr(self, name) < 0:
                raise ForethoughtError(f"{name} must not be negative, got {getattr(self, name)}")
        finite(self, "weight_decay", "grad_clip")  # NaN slips through '< 0'
        if not self.lr > 0 or not math.isfinite(self.lr):
            raise ForethoughtError(f"lr must be a positive number, got {self.lr}")
        if not 0 <= self.min_lr_ratio <= 1:  # also rejects NaN
            raise ForethoughtError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if not 0 <= self.ema_decay < 1:  # also rejects NaN
            raise ForethoughtError(f"ema_decay must be in [0, 1) (0 = off), got {self.ema_decay}")
        if not 0 <= self.beta2 < 1:
            raise ForethoughtError(f"beta2 must be in [0, 1), got {self.beta2}")
        if self.batch_size % self.grad_accum:
            raise ForethoughtError(f"batch_size {self.batch_size} is not divisible by grad_accum {self.grad_accum}")
