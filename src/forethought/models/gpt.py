"""Our own small GPT (GPT-2 architecture) in one readable file, with pluggable attention.

Attention modes: ``causal`` (fused SDPA with ``is_causal``), ``block_causal`` (position i sees position j when
j's block is not after i's), ``full``. Any attention module can be given an ``override`` callable
``(module, x, q, k, v) -> y`` — this is how myopic attention (forethought.myopia) plugs in without this file
knowing about it. Inputs are token ids (LM) or real vectors through a linear embedding (``input_dim``);
outputs are LM logits (head tied to the token embedding by default) or a linear regression head
(``output_dim``). With weights copied from HF ``GPT2LMHeadModel`` (:func:`from_hf_gpt2`) the logits match.
Activation checkpointing (``activation_checkpointing_enable()``, off by default) recomputes each block in the
backward pass (``torch.utils.checkpoint``, non-reentrant) instead of keeping its activations.
Callers may pass ready-made input vectors (``inputs_embeds``, e.g. memory slots before tokens) and an optional
:class:`KVCache` for incremental decoding (new positions continue after the cached ones).

Two settings exist for models trained from scratch on real-valued tasks and default to GPT-2: ``final_norm``
(GPT-2's ``ln_f`` before the head, or none) and ``init`` (GPT-2's N(0, 0.02) linear layers, or PyTorch's
default). On the synthetic pre-caching task both GPT-2 choices keep the model at the predict-zero loss for
thousands of steps, and the model learns only without both (README, "Myopia", has the ablation).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

from forethought.core.checkpoint import config_from_record, load_pretrained, model_record
from forethought.models.gpt_config import GPTConfig  # its home imports no torch; importable from here too

GPT_MODEL = "forethought-gpt"  # its checkpoints' model_type


class KVCache:
    """Keys and values of every layer for the positions processed so far (incremental decoding).

    Pass the same object to successive ``GPT.forward`` calls; each call appends its positions. Equal to one
    full pass for causal attention (any chunking) and for block-causal attention when every call covers whole
    blocks. Not for training (the cached tensors keep their graph) and not combined with attention overrides.

    Storage is preallocated: the first call allocates (B, H, capacity, hd) per layer and later calls write their
    positions in place. Why: growing the cache by ``torch.cat`` copies everything cached at every step
    (quadratic in the length), which slowed the L-step AR decode far more than PSF's L/K-step decode and biased
    the samples/s comparison against AR. ``capacity`` defaults to the model's ``n_positions``."""

    def __init__(self, n_layer: int, capacity: int):
        self.capacity = capacity
        self.k: list[torch.Tensor | None] = [None] * n_layer  # each (B, H, capacity, hd), filled up to length
        self.v: list[torch.Tensor | None] = [None] * n_layer
        self.length = 0  # positions cached; advanced by GPT.forward once all layers have written

    def append(self, i: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write layer i's new (B, H, T, hd) keys and values after the cached ones; return the (B, H, past+T, hd)
        views of everything cached for that layer (no copy)."""
        B, H, T, hd = k.shape
        past = self.length
        if past + T > self.capacity:
            raise ValueError(f"KV cache of {self.capacity} positions cannot take {past + T}")
        if self.k[i] is None:
            self.k[i] = k.new_empty(B, H, self.capacity, hd)
            self.v[i] = v.new_empty(B, H, self.capacity, hd)
        ck, cv = self.k[i], self.v[i]
        ck[:, :, past:past + T] = k
        cv[:, :, past:past + T] = v
        return ck[:, :, :past + T], cv[:, :, :past + T]


def cached_mask(mode: str, past: int, T: int, block: int, device: torch.device | None = None) -> torch.Tensor | None:
    """(T, past+T) bool mask for T new queries after ``past`` cached positions (None = attend to everything)."""
    if mode == "full" or (mode == "causal" and T == 1):
        return None
    q = torch.arange(past, past + T, device=device)
    k = torch.arange(past + T, device=device)
    if mode == "causal":
        return k[None, :] <= q[:, None]
    return (k[None, :] // block) <= (q[:, None] // block)


AttentionOverride = Callable[["Attention", torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def block_causal_mask(T: int, block: int, device: torch.device | None = None) -> torch.Tensor:
    """(T, T) bool, True = may attend: key j is visible from query i when block(j) <= block(i)."""
    b = torch.arange(T, device=device) // block
    return b[None, :] <= b[:, None]


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head, self.n_embd = cfg.n_head, cfg.n_embd
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)  # fused q, k, v projections
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.resid_drop = nn.Dropout(cfg.dropout)
        self.attn_dropout = cfg.attn_dropout  # on the attention probabilities, while training
        self.mode = cfg.attention
        self.block_size = cfg.block_size
        self.override: AttentionOverride | None = None

    def heads(self, t: torch.Tensor) -> torch.Tensor:
        """(B, T, C) -> (B, H, T, C/H)."""
        B, T, C = t.shape
        return t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None,
                cache: tuple[KVCache, int] | None = None) -> torch.Tensor:
        B, T, C = x.shape  # (B, T, C)
        q, k, v = (self.heads(t) for t in self.c_attn(x).split(C, dim=2))  # each (B, H, T, hd)
        if cache is not None:
            if self.override is not None:
                raise ValueError("a KV cache cannot be combined with an attention override")
            kv, i = cache
            past = kv.length
            k, v = kv.append(i, k, v)  # (B, H, past+T, hd)
            if attn_mask is None:
                attn_mask = cached_mask(self.mode, past, T, self.block_size, x.device)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        elif self.override is not None:
            y = self.override(self, x, q, k, v)
        else:
            p = self.attn_dropout if self.training else 0.0
            if attn_mask is not None:
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p)
            elif self.mode == "causal":
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)
            elif self.mode == "block_causal":
                mask = block_causal_mask(T, self.block_size, x.device)
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
            else:
                y = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, C)
        return self.resid_drop(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.drop = nn.Dropout(cfg.dropout)
        self.relu = cfg.activation == "relu"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.c_fc(x)
        h = F.relu(h) if self.relu else F.gelu(h, approximate="tanh")  # GPT-2's gelu_new
        return self.drop(self.c_proj(h))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps, bias=cfg.bias)
        self.attn = Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None,
                cache: tuple[KVCache, int] | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), attn_mask, cache)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        cfg.validate()
        self.config = cfg
        if cfg.input_dim > 0:
            self.wte: nn.Module = nn.Linear(cfg.input_dim, cfg.n_embd, bias=cfg.bias)
        else:
            self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.n_positions, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f: nn.Module = (nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps, bias=cfg.bias) if cfg.final_norm
                                else nn.Identity())
        if cfg.output_dim > 0:
            self.head: nn.Linear = nn.Linear(cfg.n_embd, cfg.output_dim)
        else:
            self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
            if cfg.tie_word_embeddings and cfg.input_dim == 0:
                self.head.weight = self.wte.weight
        # activation checkpointing (off by default): keep only each block's input, recompute it in backward
        self.activation_checkpointing = False
        self.apply(self._init)
        for name, p in self.named_parameters():  # GPT-2: scale residual projections by 1/sqrt(2L)
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * cfg.n_layer))
        # GPT-2's init always runs first, so the embeddings are the same draws whichever init the linear layers get
        if cfg.init == "torch":  # PyTorch's default for every linear layer (a tied head is the embedding: kept)
            for m in self.modules():
                if isinstance(m, nn.Linear) and not (m is self.head and self._tied()):
                    m.reset_parameters()
        elif cfg.init == "reference":  # the paper's code swaps these into an initialised HF GPT-2: default init
            if cfg.input_dim > 0:
                self.wte.reset_parameters()
            if cfg.output_dim > 0:
                self.head.reset_parameters()

    def _tied(self) -> bool:
        return self.head.weight is getattr(self.wte, "weight", None)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, 0.02)

    def num_params(self, non_embedding: bool = False) -> int:
        n = sum(p.numel() for p in self.parameters())
        return n - self.wpe.weight.numel() if non_embedding else n

    def activation_checkpointing_enable(self, activation_checkpointing_kwargs: dict | None = None) -> None:
        """Checkpoint every block while training. Named as HF models' switch, so one call site serves both; the
        checkpoints here are always non-reentrant (the kwargs are accepted for that interface)."""
        self.activation_checkpointing = True

    def activation_checkpointing_disable(self) -> None:
        self.activation_checkpointing = False

    def new_cache(self, capacity: int | None = None) -> KVCache:
        """An empty cache for up to ``capacity`` positions (default ``n_positions``; a decode that knows its
        length passes it, so that a short decode does not allocate the whole table)."""
        return KVCache(self.config.n_layer, min(capacity or self.config.n_positions, self.config.n_positions))

    def forward(self, inputs: torch.Tensor | None, attn_mask: torch.Tensor | None = None,
                output_hidden_states: bool = False, inputs_embeds: torch.Tensor | None = None,
                kv_cache: KVCache | None = None) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
        """inputs: (B, T) token ids or (B, T, input_dim); or ``inputs_embeds`` (B, T, C), used instead of
        ``wte(inputs)``. Returns logits/outputs (B, T, V|output_dim), and with ``output_hidden_states`` the
        residual stream after the embedding and after each block (L+1 tensors, each (B, T, C)); the last one is
        before ``ln_f``. With ``kv_cache`` the new positions follow the cached ones (the cache is extended in
        place; ``attn_mask``, if given, is (T, past+T))."""
        emb = self.wte(inputs) if inputs_embeds is None else inputs_embeds  # (B, T, C)
        past = 0 if kv_cache is None else kv_cache.length
        T = emb.shape[1]
        if past + T > self.config.n_positions:
            raise ValueError(f"sequence length {past + T} exceeds n_positions {self.config.n_positions}")
        pos = torch.arange(past, past + T, device=emb.device)
        x = self.drop(emb + self.wpe(pos))  # (B, T, C)
        hidden = [x]
        recompute = self.activation_checkpointing and self.training and torch.is_grad_enabled() and kv_cache is None
        for i, block in enumerate(self.h):
            if recompute:  # same values and gradients; the block's activations are rebuilt in the backward pass
                x = torch.utils.checkpoint.checkpoint(block, x, attn_mask, use_reentrant=False)
            else:
                x = block(x, attn_mask, None if kv_cache is None else (kv_cache, i))
            hidden.append(x)
        if kv_cache is not None:
            kv_cache.length = past + T  # every layer wrote positions past..past+T-1
        out = self.head(self.ln_f(x))
        return (out, hidden) if output_hidden_states else out

    def config_dict(self) -> dict:
        return {"model_type": GPT_MODEL, **asdict(self.config)}

    def checkpoint_record(self, **extra: Any) -> dict[str, Any]:
        """Its checkpoints' config.json (:func:`load_gpt` reads it back); ``extra``: what its user adds (the PSF
        AR baseline's bos id)."""
        return model_record(GPT_MODEL, asdict(self.config), **extra)


def load_gpt(ckpt: Path) -> tuple[GPT, dict[str, Any]]:
    """A GPT from its checkpoint alone (manifest and record checked; on the CPU, in training mode) and its
    record."""
    return load_pretrained(ckpt, GPT_MODEL, lambda r: GPT(config_from_record(GPTConfig, r["config"],
                                                                        f"{ckpt}/config.json")))


def from_hf_gpt2(hf_model: nn.Module) -> GPT:
    """Build our GPT with the weights of an HF ``GPT2LMHeadModel`` (Conv1D weights are transposed)."""
    c = hf_model.config
    acts = {"gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new", "relu": "relu"}
    if c.activation_function not in acts:
        raise ValueError(f"GPT-2 conversion: activation '{c.activation_function}' is not one of {sorted(acts)}")
    cfg = GPTConfig(vocab_size=c.vocab_size, n_positions=c.n_positions, n_embd=c.n_embd, n_layer=c.n_layer,
                    n_head=c.n_head, layer_norm_eps=c.layer_norm_epsilon, dropout=0.0,
                    activation=acts[c.activation_function])
    model = GPT(cfg)
    sd = hf_model.state_dict()
    conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    own = {}
    for k, v in sd.items():
        if not k.startswith("transformer.") or k.endswith((".attn.bias", ".attn.masked_bias")):
            continue
        name = k[len("transformer."):]
        own[name] = v.t() if name.endswith(conv1d) else v
    missing, unexpected = model.load_state_dict(own, strict=False)
    missing = [m for m in missing if m != "head.weight"]  # tied to wte
    if missing or unexpected:
        raise ValueError(f"GPT-2 conversion mismatch: missing {missing}, unexpected {unexpected}")
    return model
