"""The autoregressive baseline for PSF: our causal GPT on the same length-L windows, sampled with a KV cache.

Every one of the L tokens is predicted, like PSF (whose first block is predicted from the start state): the
input is ``[bos, x_1 .. x_{L-1}]`` with the tokenizer's eos token as ``bos`` (it marks document boundaries in
our token arrays), the targets are ``x_1 .. x_L``. Serial depth of sampling: L decoder steps.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from forethought.models.gpt import GPT, GPTConfig
from forethought.psf.config import ARModelConfig
from forethought.psf.sampling import sample_tokens


def build_ar(cfg: ARModelConfig, vocab_size: int, seq_len: int) -> GPT:
    return GPT(GPTConfig(vocab_size=vocab_size, n_positions=seq_len, n_embd=cfg.n_embd, n_layer=cfg.n_layer,
                         n_head=cfg.n_head, dropout=cfg.dropout))


def ar_inputs(tokens: torch.Tensor, bos_id: int) -> torch.Tensor:
    """(B, L) targets -> (B, L) inputs [bos, x_1 .. x_{L-1}]."""
    return torch.cat([torch.full_like(tokens[:, :1], bos_id), tokens[:, :-1]], dim=1)


def ar_loss(model: torch.nn.Module, tokens: torch.Tensor, bos_id: int) -> torch.Tensor:
    """Mean next-token cross-entropy over all L tokens of (B, L) windows."""
    logits = model(ar_inputs(tokens, bos_id))  # (B, L, V)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tokens.reshape(-1))


def block_diagonal_causal_mask(T: int, block: int, device: torch.device | None = None) -> torch.Tensor:
    """(T, T) bool, True = may attend: query i sees key j when both lie in the same block and j <= i."""
    i = torch.arange(T, device=device)
    return (i[None, :] <= i[:, None]) & (i[None, :] // block == i[:, None] // block)


def ar_token_nll(model: torch.nn.Module, tokens: torch.Tensor, bos_id: int, cut_every: int = 0,
                 cut: Literal["restart", "mask"] = "restart") -> torch.Tensor:
    """Next-token cross-entropy of every token of (B, L) windows, (B, L) in nats. ``cut_every`` n > 0 cuts the
    context at every n-token block boundary: each block sees only its own earlier tokens, and its first token
    only ``bos``. ``cut``: ``restart`` runs every block as its own sequence ``[bos, x_1 .. x_{n-1}]`` at positions
    0..n-1 (where the model saw ``bos`` in training); ``mask`` keeps the true positions, puts ``bos`` at every
    block start and masks attention block-diagonally. Either way the first block sees what it sees in full
    context."""
    B, L = tokens.shape
    n = cut_every or L
    if L % n:
        raise ValueError(f"windows of {L} tokens are not whole blocks of {n}")
    if cut == "restart":
        rows = tokens.reshape(B * (L // n), n)
        logits = model(ar_inputs(rows, bos_id))  # (B·K, n, V)
    elif cut == "mask":
        inputs = ar_inputs(tokens, bos_id)
        inputs[:, ::n] = bos_id
        rows = tokens
        logits = model(inputs, attn_mask=None if n == L else block_diagonal_causal_mask(L, n, tokens.device))
    else:
        raise ValueError(f"cut must be 'restart' or 'mask', got {cut!r}")
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), rows.reshape(-1), reduction="none")
    return nll.view(B, L)


@torch.no_grad()
def sample_ar(model: GPT, n: int, seq_len: int, bos_id: int, *, temperature: float = 1.0, top_p: float = 1.0,
              generator: torch.Generator | None = None, prompt: torch.Tensor | None = None,
              use_cache: bool = True) -> torch.Tensor:
    """(n, seq_len) token ids; ``prompt`` (n, m) gives the first m tokens. Batched; KV-cached unless
    ``use_cache`` is False (the reference path: the whole prefix is re-run every step)."""
    model.eval()
    dev = next(model.parameters()).device
    seq = torch.full((n, 1), bos_id, dtype=torch.long, device=dev)
    if prompt is not None:
        seq = torch.cat([seq, prompt.to(dev).long()], dim=1)
    cache = model.new_cache(seq.shape[1] + seq_len) if use_cache else None  # more than ever fed
    x = seq
    while seq.shape[1] < seq_len + 1:
        logits = model(x, kv_cache=cache)[:, -1] if use_cache else model(seq)[:, -1]  # (n, V)
        t = sample_tokens(logits, temperature, top_p, generator)  # (n,)
        seq = torch.cat([seq, t[:, None]], dim=1)
        x = t[:, None]
    return seq[:, 1:]
