"""Myopic attention as pure functions (myopic training as defined by Wu et al. 2024, "Do language models plan
for future tokens?").

Myopic training: the loss at position t may not shape any earlier position's state. In every attention layer a
query attends to *other* positions' keys/values computed from detached states ("past" K/V), and to its own
position's live key/value (the diagonal). All tensors are (B, H, T, D); heads already expanded for GQA.

Two implementations of the same function:

* :func:`myopic_attention` — one fused attention call plus O(T·D): run SDPA on ``(q, K_past, V_past)`` (whose
  values equal the live ``K, V`` for the detach modes) and ask it for the log-sum-exp; with
  ``A_tt = exp(q_t·k_t·s − lse_t)`` (detached) add two terms that are zero in the forward pass and restore the
  diagonal's gradients exactly::

      out_t += A_tt·(v_t − v'_t) + A_tt·s·(q_t.detach()·(k_t − k'_t))·(v'_t − out_t).detach()

  d out_t / d v_t = A_tt and d out_t / d k_t = A_tt·s·q_t (v_t − out_t)ᵀ, which is what the two terms give;
  their negatives cancel what SDPA sent to the diagonal's past copies. The forward output is bit-identical to
  vanilla attention, since the added terms are exact zeros.
* with a horizon h >= 1 (query t reads live K/V of t − h .. t), :func:`myopic_attention` runs one fused attention
  over the 2T keys [past; live] with a mask that shows each position once: exact, about twice one attention.
* :func:`reference_myopic_attention` — the explicit O(T²) form (scores with a replaced diagonal), used when past
  K/V differ in value from the live ones (``zero_past``, ``local``) or with a padding mask, and as the test oracle.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def attention_with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal attention output (B, H, T, D) and its log-sum-exp of scaled scores (B, H, T), from fused kernels
    where the device has one that returns it, else computed explicitly."""
    T = q.shape[-2]
    # The fused kernels are called directly, so autocast casts nothing for them, and they need one dtype. Under
    # autocast an HF model with fp32 weights hands over 16-bit v but fp32 q and k (RoPE's fp32 cos / sin promote
    # them): use the autocast dtype, as F.scaled_dot_product_attention would; otherwise the widest of the three.
    dev = q.device.type
    if dev in ("cpu", "cuda") and torch.is_autocast_enabled(dev):
        dtype = torch.get_autocast_dtype(dev)
    else:
        dtype = torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    if q.device.type == "cpu" and q.dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True, scale=scale)
        return out, lse
    if q.device.type == "cuda":
        out, lse, _, _ = torch.ops.aten._scaled_dot_product_efficient_attention(
            q, k, v, None, True, 0.0, True, scale=scale)
        return out, lse[..., :T]  # the kernel pads lse's last dim to a multiple of 32
    scores = (q @ k.transpose(-1, -2)) * scale  # (B, H, T, T)
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    return torch.softmax(scores, dim=-1) @ v, lse


def myopic_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_past: torch.Tensor,
                     v_past: torch.Tensor, scale: float | None = None, horizon: int = 0) -> torch.Tensor:
    """Exact myopic causal attention in one fused pass. ``k_past``/``v_past`` must equal ``k``/``v`` in value
    and differ only in what their gradients reach (detached, or weights-only).

    ``horizon`` h: query t reads the live K/V of positions t − h .. t (the band) and the past K/V of earlier ones
    (0 = myopic, T − 1 or more = vanilla). h = 0 adds two zero-valued terms to one attention (below); h >= 1 runs
    one fused attention over the 2T keys [past K/V; live K/V] with a mask that shows each position once (its
    past copy before the band, its live one inside): exact by construction, about twice one attention, whatever h."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    T = q.shape[-2]
    if horizon >= T - 1:  # every earlier position is in the band: plain attention
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    if horizon > 0:
        d = torch.arange(T, device=q.device)[:, None] - torch.arange(T, device=q.device)[None, :]  # t − s
        mask = torch.cat([d > horizon, (d >= 0) & (d <= horizon)], dim=1)  # (T, 2T), True = attend
        return F.scaled_dot_product_attention(q, torch.cat([k_past, k], dim=2), torch.cat([v_past, v], dim=2),
                                              attn_mask=mask, scale=scale)
    out, lse = attention_with_lse(q, k_past, v_past, scale)  # (B, H, T, D), (B, H, T)
    a_tt = torch.exp((q * k_past).sum(-1) * scale - lse.to(q.dtype)).detach()  # diagonal probability (B, H, T)
    dk = (q.detach() * (k - k_past)).sum(-1) * scale  # zero in value, d/dk_t = s·q_t
    return out + a_tt.unsqueeze(-1) * (v - v_past) + (a_tt * dk).unsqueeze(-1) * (v_past - out).detach()


def band_mask(T: int, horizon: int, device: torch.device | None = None) -> torch.Tensor:
    """(T, T) bool: True where key s is in query t's live band, 0 <= t − s <= horizon."""
    d = torch.arange(T, device=device)[:, None] - torch.arange(T, device=device)[None, :]
    return (d >= 0) & (d <= horizon)


def window_mask(T: int, window: int, device: torch.device | None = None) -> torch.Tensor:
    """(T, T) bool, True = may attend: causal and t − s < window (HF's sliding-window attention)."""
    d = torch.arange(T, device=device)[:, None] - torch.arange(T, device=device)[None, :]
    return (d >= 0) & (d < window)


def reference_myopic_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_past: torch.Tensor,
                               v_past: torch.Tensor, scale: float | None = None,
                               mask: torch.Tensor | None = None, horizon: int = 0, softcap: float | None = None,
                               dropout_p: float = 0.0) -> torch.Tensor:
    """Explicit myopic attention: scores/values of keys in the band (``horizon``: t − horizon .. t; 0 = the
    diagonal) from the live ``k``/``v``, of earlier keys from ``k_past``/``v_past``.
    ``mask``: optional extra mask broadcastable to (B, H, T, T), bool (True = attend) or additive float.
    ``softcap``: scores -> softcap·tanh(scores / softcap) before masking (Gemma 2). ``dropout_p``: dropout on the
    probabilities, drawn as HF's eager attention draws it (one F.dropout over the (B, H, T, T) probabilities)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    T = q.shape[-2]
    band = band_mask(T, horizon, q.device)
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    past = (q @ k_past.transpose(-1, -2)) * scale  # (B, H, T, T)
    live = (q @ k.transpose(-1, -2)) * scale
    scores = torch.where(band, live, past)
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    scores = scores.masked_fill(~causal, float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    probs = torch.softmax(scores, dim=-1)
    probs = torch.nan_to_num(probs)  # fully masked (padding) rows
    if dropout_p > 0:
        probs = F.dropout(probs, p=dropout_p, training=True)
    return probs.masked_fill(band, 0.0) @ v_past + probs.masked_fill(~band, 0.0) @ v


def vanilla_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)


class _WeightGradOnly(torch.autograd.Function):
    """Returns a precomputed ``x @ Wᵀ + b`` whose gradient reaches W and b but not x: the "past" K/V of
    ``detach_hidden`` without computing the projection a second time."""

    @staticmethod
    def forward(ctx, value: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,  # type: ignore[override]
                bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.has_bias = bias is not None
        return value.detach().clone()

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        (x,) = ctx.saved_tensors
        g2 = g.reshape(-1, g.shape[-1])
        gw = g2.t() @ x.reshape(-1, x.shape[-1]).to(g.dtype)
        gb = g2.sum(0) if ctx.has_bias else None
        return None, None, gw, gb


def weight_grad_only(value: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                     bias: torch.Tensor | None) -> torch.Tensor:
    """``value`` must be ``F.linear(x, weight, bias)``; the result equals it, with gradients to weight/bias only."""
    return _WeightGradOnly.apply(value, x.detach(), weight, bias)


def blend(live: torch.Tensor, past: torch.Tensor, beta: float) -> torch.Tensor:
    """Value of ``past`` (bit-exact), gradient split beta to ``live`` and 1 − beta to ``past`` (beta = 1 is
    vanilla, 0 fully myopic): the reference code's dial."""
    if beta == 0.0:
        return past
    return past - beta * (past - past.detach()) + beta * (live - live.detach())
