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

Prompted sampling (the first m blocks' tokens given) fixes the trajectory entries those blocks determine
(:meth:`FlowPrior.known_mask`). ``conditioning: none`` (the default) trains unconditionally and fixes them by
**replacement** only: before every Euler step the known entries of x_t are set to their exact interpolant, so the
unknown entries see the prompt only through the network's attention to those replaced entries.
``conditioning: known_mask`` trains a **prompt-conditioned** prior: each training example draws a number m of
known leading blocks, uniform in 0..:meth:`FlowPrior.most_known` (the most blocks that still leave an entry to
generate; m = 0, unconditional, among them), and the network's input per block is ``[x_t, known · mask, mask]``
(the clean standardised known values and the mask, as extra channels of the linear input embedding); x_t keeps
the plain interpolant everywhere, so the replaced x_t at sampling is exactly what training showed. The loss is
the velocity error on the **unknown entries only** (mean over them): the known values are in the input, so
predicting them is copying — it teaches nothing about the conditional distribution and, counted, would weigh
examples by how much of them is unknown rather than by what is left to generate. Unconditional sampling with
such a prior is the all-zero mask.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from forethought.core.errors import ForethoughtError
from forethought.models.gpt import GPT, GPTConfig
from forethought.psf.config import PriorConfig
from forethought.psf.sampling import randn

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


def flow_loss(x_hat: torch.Tensor, x: torch.Tensor, x_t: torch.Tensor, t: torch.Tensor, min_gap: float = 0.05,
              counted: torch.Tensor | None = None) -> torch.Tensor:
    """Mean squared error between implied and true velocity, both divided by max(1 - t, min_gap). ``counted``
    (bool, shaped like x): the mean is over these entries only (0 when there are none)."""
    c = (1 - t).clamp(min=min_gap).view(-1, *([1] * (x.dim() - 1)))
    v_hat = (x_hat - x_t) / c
    v = (x - x_t) / c  # = x - noise when 1 - t >= min_gap
    if counted is None:
        return F.mse_loss(v_hat, v)
    sq = torch.where(counted, (v_hat - v) ** 2, torch.zeros_like(v))  # where: an uncounted nan or inf stays out
    return sq.sum() / counted.sum().clamp(min=1)


def leading_known_mask(m: torch.Tensor, blocks: int, dim: int, state_dim: int, prompt_lead: int) -> torch.Tensor:
    """(n,) numbers of known leading blocks -> (n, K, dim) bool: the trajectory entries that a prompt of m blocks
    determines. Per block the vector is ``[state (state_dim), code (dim - state_dim)]``; the states of the first
    ``min(m + prompt_lead, K)`` blocks are known (predictive states: ``prompt_lead`` 1, since s_{m+1} sums up the
    m prompt blocks) and the codes of the first m; nothing when m = 0."""
    k = torch.arange(blocks, device=m.device)[None, :]  # (1, K)
    m = m.long()[:, None]  # (n, 1)
    state = (k < m + prompt_lead) & (m > 0)  # (n, K)
    code = k < m
    is_state = torch.arange(dim, device=m.device) < state_dim  # (dim,)
    return torch.where(is_state, state[..., None], code[..., None])


def most_known_blocks(blocks: int, dim: int, state_dim: int, prompt_lead: int) -> int:
    """The largest m whose :func:`leading_known_mask` still leaves an entry unknown (0 at least)."""
    if dim > state_dim:  # codes: the last block's code stays unknown up to m = K - 1
        return blocks - 1
    return max(blocks - 1 - prompt_lead, 0)


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
    """x-predictor over (B, K, dim) standardised state trajectories, plus the data statistics.

    ``state_dim`` (0 = dim): the state part of each block's vector (the rest are codes); ``prompt_lead``: how many
    states beyond the m prompt blocks a prompt determines (1 for predictive states). Both only say which entries a
    prompt fixes (:meth:`known_mask`); they are not weights."""

    def __init__(self, cfg: PriorConfig, dim: int, blocks: int, state_dim: int = 0, prompt_lead: int = 0):
        super().__init__()
        self.config, self.dim, self.blocks = cfg, dim, blocks
        self.state_dim, self.prompt_lead = state_dim or dim, prompt_lead
        self.conditioned = cfg.conditioning == "known_mask"
        in_dim = 3 * dim if self.conditioned else dim  # [x_t, known · mask, mask]
        self.net = GPT(GPTConfig(n_positions=blocks, n_embd=cfg.n_embd, n_layer=cfg.n_layer, n_head=cfg.n_head,
                                 attention="full", input_dim=in_dim, output_dim=dim))
        self.time_mlp = nn.Sequential(nn.Linear(cfg.n_embd, cfg.n_embd), nn.SiLU(), nn.Linear(cfg.n_embd, cfg.n_embd))
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))
        self.register_buffer("traj_mean", torch.zeros(blocks, dim))  # raw mean trajectory (ablation)

    def forward(self, x_t: torch.Tensor, t: torch.Tensor, known: torch.Tensor | None = None,
                known_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, K, dim) noisy standardised trajectory, (B,) times -> (B, K, dim) predicted clean trajectory. A
        conditioned prior also reads ``known`` (B, K, dim) standardised values where ``known_mask`` (bool) is set
        (none given: the all-zero mask, unconditional)."""
        inp = x_t
        if self.conditioned:
            if known_mask is None:
                mask, vals = torch.zeros_like(x_t), torch.zeros_like(x_t)
            else:
                mask = known_mask.to(x_t.dtype)
                vals = torch.where(known_mask, known, torch.zeros_like(known))
            inp = torch.cat([x_t, vals, mask], dim=-1)
        elif known_mask is not None:
            raise ValueError("an unconditional prior (conditioning none) takes no known values")
        emb = self.net.wte(inp) + self.time_mlp(time_embedding(t, self.config.n_embd))[:, None]  # (B, K, C)
        return self.net(None, inputs_embeds=emb)

    def known_mask(self, m: torch.Tensor) -> torch.Tensor:
        """(n,) prompt lengths in blocks -> (n, K, dim) bool: the entries a prompt of m blocks fixes."""
        return leading_known_mask(m, self.blocks, self.dim, self.state_dim, self.prompt_lead)

    def most_known(self) -> int:
        """The longest training prompt (blocks) of a conditioned prior: the most that leaves an entry unknown."""
        return most_known_blocks(self.blocks, self.dim, self.state_dim, self.prompt_lead)

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

    def loss(self, x: torch.Tensor, known_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Training loss on a (B, K, dim) batch of raw trajectories (global RNG: restored on resume). A conditioned
        prior draws each example's known leading blocks m uniform in 0..most_known() (or takes ``known_mask``),
        reads the known clean values as input and is scored on the unknown entries only."""
        x = self.standardise(x)
        noise = torch.randn_like(x)
        t = logit_normal_t(x.shape[0], self.config.time_mu, self.config.time_sigma, device=x.device)
        x_t = interpolate(x, noise, t)
        if not self.conditioned:
            if known_mask is not None:
                raise ValueError("an unconditional prior (conditioning none) takes no known values")
            return flow_loss(self(x_t, t), x, x_t, t, self.config.min_gap)
        if known_mask is None:
            m = torch.randint(0, self.most_known() + 1, (x.shape[0],), device=x.device)
            known_mask = self.known_mask(m)
        return flow_loss(self(x_t, t, x, known_mask), x, x_t, t, self.config.min_gap, counted=~known_mask)


@torch.no_grad()
def sample_prior(prior: FlowPrior, n: int, steps: int | None = None, generator: torch.Generator | None = None,
                 known: torch.Tensor | None = None, known_mask: torch.Tensor | None = None,
                 replace: bool = True) -> torch.Tensor:
    """Euler from noise (t = 0) to data (t = 1): (n, K, dim) raw trajectories.

    ``known`` (n, K, dim) raw values with ``known_mask`` (n, K, dim) bool: prompted sampling. A conditioned prior
    (``conditioning: known_mask``) reads them as its input at every step; with ``replace`` (always, for an
    unconditional prior) the known entries of x_t are also set to their exact interpolant (1 - t)·noise + t·x
    before every step; without it they follow the network's own (untrained: the loss ignores them) prediction.
    Either way the returned known entries are exactly ``known``."""
    if known is not None and not replace and not prior.conditioned:
        raise ForethoughtError("an unconditional prior (prior.model.conditioning none) sees a prompt only through "
                               "replacement; sample it with replacement on")
    steps = steps or prior.config.steps
    dev = prior.mean.device
    noise = randn((n, prior.blocks, prior.dim), generator, dev)
    x = noise
    known_std = prior.standardise(known.to(dev)) if known is not None else None
    cond = (known_std, known_mask) if known_std is not None and prior.conditioned else (None, None)
    for i in range(steps):
        t = i / steps
        if known_std is not None and replace:
            x = torch.where(known_mask, (1 - t) * noise + t * known_std, x)
        x_hat = prior(x, torch.full((n,), t, device=dev), *cond)
        x = euler_step(x, x_hat, t, 1.0 / steps)
    out = prior.unstandardise(x)
    if known is not None:
        out = torch.where(known_mask, known.to(dev), out)
    return out
