"""Rectified-flow prior over the K states of a sequence (Predictive State Flow: the states are generated first,
by a flow, then decoded in parallel), jointly, with full attention between them.

Convention: ``x_t = (1 - t)·noise + t·x`` — t = 0 is noise, t = 1 is data. The network predicts the clean
``x̂`` from ``(x_t, t)`` (x-prediction); the loss compares the implied velocity ``v̂ = (x̂ - x_t)/(1 - t)``
with the true one ``v = x - noise = (x - x_t)/(1 - t)``. Both use the same denominator ``c = max(1 - t,
min_gap)`` (default 0.05): for 1 - t >= min_gap it is exactly the velocity loss, and near t = 1 — where
logit-normal time puts mass and 1/(1 - t) explodes — the weight on the x-error is capped at 1/min_gap².
Time: logit-normal, ``t = sigmoid(mu + sigma·z)``, defaults mu = 0, sigma = 1 (symmetric around t = 0.5 in this
convention; a positive mu spends more training on the data end). Sampling: Euler on the probability-flow ODE
from t = 0 to 1 in ``steps`` uniform steps (the last step lands on x̂ exactly).

Inputs are standardised per dimension with the mean/std of training states (buffers saved with the weights),
and samples are un-standardised. With codes the per-block vector is ``[state, code]``; the state-only variant
models states alone and the decoder gets zero codes (the mean of the codes' N(0, I) prior).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from forethought.core.config import field
from forethought.core.errors import ForethoughtError
from forethought.models.gpt import GPT, GPTConfig
from forethought.psf.sampling import randn


@dataclass
class PriorConfig:
    n_embd: int = field(256, "prior transformer width")
    n_layer: int = field(4, "prior transformer blocks")
    n_head: int = field(4, "prior attention heads")
    time_mu: float = field(0.0, "logit-normal time: mean of the logit (t = 1 is data)")
    time_sigma: float = field(1.0, "logit-normal time: std of the logit")
    min_gap: float = field(0.05, "clamp 1 - t below at this value in the velocity loss")
    steps: int = field(50, "Euler steps at sampling")
    state_only: bool = field(False, "model states only; the decoder then gets zero codes")
    stats_sequences: int = field(256, "training sequences for the standardisation statistics and mean trajectory")

    def validate(self) -> None:
        if self.n_head < 1 or self.n_embd % self.n_head:
            raise ForethoughtError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        for key in ("n_layer", "steps", "stats_sequences"):
            if getattr(self, key) < 1:
                raise ForethoughtError(f"{key} must be at least 1, got {getattr(self, key)}")
        if not 0 < self.min_gap <= 1:
            raise ForethoughtError(f"min_gap must be in (0, 1], got {self.min_gap}")
        if not self.time_sigma > 0:
            raise ForethoughtError(f"time_sigma must be > 0, got {self.time_sigma}")


# ---- pure functions ----------------------------------------------------------------------------------------

def logit_normal_t(n: int, mu: float = 0.0, sigma: float = 1.0, generator: torch.Generator | None = None,
                   device: torch.device | str = "cpu") -> torch.Tensor:
    """(n,) times in the open interval (0, 1): sigmoid(mu + sigma·z), z ~ N(0, 1)."""
    z = torch.randn(n, generator=generator, dtype=torch.float64)
    t = torch.sigmoid(mu + sigma * z).clamp(1e-6, 1 - 1e-6)  # float64 and clamped: never exactly 0 or 1
    return t.float().to(device)


def interpolate(x: torch.Tensor, noise: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """x_t = (1 - t)·noise + t·x, with t (B,) broadcast over the remaining dims."""
    tt = t.view(-1, *([1] * (x.dim() - 1)))
    return (1 - tt) * noise + tt * x


def flow_loss(x_hat: torch.Tensor, x: torch.Tensor, x_t: torch.Tensor, t: torch.Tensor, min_gap: float = 0.05
              ) -> torch.Tensor:
    """Mean squared error between implied and true velocity, both divided by max(1 - t, min_gap)."""
    c = (1 - t).clamp(min=min_gap).view(-1, *([1] * (x.dim() - 1)))
    v_hat = (x_hat - x_t) / c
    v = (x - x_t) / c  # = x - noise when 1 - t >= min_gap
    return F.mse_loss(v_hat, v)


def euler_step(x_t: torch.Tensor, x_hat: torch.Tensor, t: float, dt: float) -> torch.Tensor:
    """One Euler step of the probability-flow ODE dx/dt = (x̂ - x_t)/(1 - t)."""
    return x_t + dt * (x_hat - x_t) / (1 - t)


def time_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """(B,) times in [0, 1] -> (B, dim) sinusoidal features."""
    half = dim // 2
    freqs = torch.exp(-math.log(10_000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    ang = 1000.0 * t.float()[:, None] * freqs[None]
    emb = torch.cat([ang.sin(), ang.cos()], dim=-1)
    return F.pad(emb, (0, dim - 2 * half))


# ---- the network -------------------------------------------------------------------------------------------

class FlowPrior(nn.Module):
    """x-predictor over (B, K, dim) standardised state trajectories, plus the data statistics."""

    def __init__(self, cfg: PriorConfig, dim: int, blocks: int):
        super().__init__()
        self.config, self.dim, self.blocks = cfg, dim, blocks
        self.net = GPT(GPTConfig(n_positions=blocks, n_embd=cfg.n_embd, n_layer=cfg.n_layer, n_head=cfg.n_head,
                                 attention="full", input_dim=dim, output_dim=dim))
        self.time_mlp = nn.Sequential(nn.Linear(cfg.n_embd, cfg.n_embd), nn.SiLU(), nn.Linear(cfg.n_embd, cfg.n_embd))
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))
        self.register_buffer("traj_mean", torch.zeros(blocks, dim))  # raw mean trajectory (ablation)

    def forward(self, x_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """(B, K, dim) noisy standardised trajectory, (B,) times -> (B, K, dim) predicted clean trajectory."""
        emb = self.net.wte(x_t) + self.time_mlp(time_embedding(t, self.config.n_embd))[:, None]  # (B, K, C)
        return self.net(None, inputs_embeds=emb)

    @torch.no_grad()
    def set_stats(self, data: torch.Tensor) -> None:
        """(N, K, dim) raw training trajectories -> per-dimension mean/std and the mean trajectory."""
        flat = data.reshape(-1, data.shape[-1]).float()
        self.mean.copy_(flat.mean(0))
        self.std.copy_(flat.std(0).clamp(min=1e-5))
        self.traj_mean.copy_(data.float().mean(0))

    def standardise(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std

    def unstandardise(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.std + self.mean

    def loss(self, x: torch.Tensor) -> torch.Tensor:
        """Training loss on a (B, K, dim) batch of raw trajectories (global RNG: restored on resume)."""
        x = self.standardise(x)
        noise = torch.randn_like(x)
        t = logit_normal_t(x.shape[0], self.config.time_mu, self.config.time_sigma, device=x.device)
        x_t = interpolate(x, noise, t)
        return flow_loss(self(x_t, t), x, x_t, t, self.config.min_gap)


@torch.no_grad()
def sample_prior(prior: FlowPrior, n: int, steps: int | None = None, generator: torch.Generator | None = None,
                 known: torch.Tensor | None = None, known_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Euler from noise (t = 0) to data (t = 1): (n, K, dim) raw trajectories.

    ``known`` (n, K, dim) raw values with ``known_mask`` (n, K, dim) bool: prompted sampling by replacement —
    before every step the known entries of x_t are set to their exact interpolant (1 - t)·noise + t·x."""
    steps = steps or prior.config.steps
    dev = prior.mean.device
    noise = randn((n, prior.blocks, prior.dim), generator, dev)
    x = noise
    known_std = prior.standardise(known.to(dev)) if known is not None else None
    for i in range(steps):
        t = i / steps
        if known_std is not None:
            x = torch.where(known_mask, (1 - t) * noise + t * known_std, x)
        x_hat = prior(x, torch.full((n,), t, device=dev))
        x = euler_step(x, x_hat, t, 1.0 / steps)
    if known_std is not None:
        x = torch.where(known_mask, known_std, x)
    return prior.unstandardise(x)
