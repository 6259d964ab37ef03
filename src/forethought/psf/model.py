"""The Predictive State Flow model (the paper's idea: a text is generated as K blocks in parallel, each from a
state that summarises the blocks before it): block-causal encoder -> per-block states -> block-causal decoder.

A length-L sequence is cut into K blocks of n = L/K tokens.

Encoder: our GPT with block-causal attention (a token sees its own block fully and all earlier blocks). Each
block is pooled (mean or last token) into ``h_k``. Predictive states shift these right by one block,
``s_1 = start`` (learned), ``s_k = h_{k-1}``, so a state never sees the block it helps generate; content states
(ablation) are ``s_k = h_k``.

Realization codes (optional): a second head on the pooled encoder features gives each block a diagonal Gaussian
posterior over a ``code_dim`` code; a reparameterised sample ``c_k`` goes to branch k. Its KL to N(0, I) is
charged with free bits: per block ``max(E_batch[KL_k], free_bits * n)`` nats, i.e. the first ``free_bits`` nats
per token of the block are free (the batch mean is taken before the clamp, as in Kingma et al. 2016).

Decoder (the mechanism we chose, "prefix slots"): every branch k is its own causal sequence, all B·K branches in
one batched pass of shape (B·K, K + n)::

    [ m_1 .. m_K | q_k | x_{k,1} .. x_{k,n-1} ]   m_j = W s_j for j <= k, a learned "empty" slot for j > k
                                                  q_k = learned query (+ W_c c_k with codes)

The output at q_k predicts x_{k,1}; the output at x_{k,i} predicts x_{k,i+1}. Branch k thus reads the state
memory s_1..s_k (the empty slots are constants, so s_{j>k} cannot leak) and never another block's tokens. Why
prefix slots rather than one (B, L) sequence with a block-diagonal mask: every branch gets the whole memory at
fixed positions, and sampling is a plain KV-cached causal decode of B·K rows.

Landing targets: from decode step 2 on (the inputs x_{k,1..n-1}), branch k's input embeddings get
``W_land · wte(x_{k+1,1})`` added — the first token of the next block, through the decoder's own token table
and a d×d map (not a second V×d table: with a GPT-2 vocabulary that would add 39M parameters at d = 768); the
last branch gets a learned "none" vector.
In training x_{k+1,1} is the real token; at sampling it is what branch k+1 produced at its step 1, which is
available because all branches take step 1 together. :func:`generate_blocks` with ``force`` reproduces the
training logits exactly (tested). The landing and code input layers start at zero, so switching them on in a
later stage starts from the previous stage's function.

Input dropout (``input_dropout``, off by default): in training, each decoder input token x_{k,i} is replaced with
that probability by a learned mask vector or a random token, a way to make the decoder lean on its states (on the
planted corpus it did not; README, "What made the states matter").
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn as nn
import torch.nn.functional as F

from forethought.core.errors import ForethoughtError
from forethought.models.gpt import GPT, GPTConfig, block_causal_mask
from forethought.psf.config import PSFModelConfig, StageFeatures
from forethought.psf.sampling import randn, sample_tokens


def pool_blocks(x: torch.Tensor, K: int, how: str) -> torch.Tensor:
    """(B, T, C) -> (B, K, C): mean or last token of each of K equal blocks."""
    B, T, C = x.shape
    x = x.view(B, K, T // K, C)
    return x.mean(2) if how == "mean" else x[:, :, -1]


class StateNorm(nn.Module):
    """Standardise block summaries (B, K, S) per block index and dimension, BatchNorm-style, without affine.

    Why: trained from scratch, the encoder's block summaries drift into a large component shared by every
    sequence, and the decoder learns to read them as a constant (seen on WikiText-2: the states barely varied
    across sequences and shuffling them across sequences left the decoder's loss unchanged; the README's "State
    normalisation" has the measurement). Standardising with the batch's statistics, with gradient through them,
    keeps the states' variation in front of the decoder. Statistics are per block index, over the batch only, so
    state k never mixes in another block's summary (no leak of block k into s_{k+1}'s normalisation through the
    batch mean); evaluation, and batches of one, use running estimates. Summaries of the model's own rollout are
    standardised with the statistics of the clean batch they came from (:meth:`PSFModel.normalise`), never with
    their own, and never reach the running estimates.
    """

    def __init__(self, dim: int, max_blocks: int, momentum: float = 0.05, eps: float = 1e-5):
        super().__init__()
        self.momentum, self.eps = momentum, eps
        self.register_buffer("running_mean", torch.zeros(max_blocks, dim))
        self.register_buffer("running_var", torch.ones(max_blocks, dim))
        self.register_buffer("updates", torch.zeros((), dtype=torch.long))

    def statistics(self, h: torch.Tensor, update: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and variance (K, S) that standardise (B, K, S) summaries ``h``: in training (batches of two or
        more) the batch's own, with gradient, and, when ``update``, folded into the running estimates; otherwise
        the running estimates."""
        K = h.shape[1]
        if not (self.training and h.shape[0] > 1):
            return self.running_mean[:K].to(h.dtype), self.running_var[:K].to(h.dtype)
        mean, var = h.mean(0), h.var(0, unbiased=False)  # (K, S)
        if update:
            with torch.no_grad():  # the first batch sets the estimates (a tensor rate: no host sync per step)
                rate = torch.where(self.updates == 0, 1.0, self.momentum).to(self.running_mean.dtype)
                self.running_mean[:K].lerp_(mean.detach().to(self.running_mean.dtype), rate)
                self.running_var[:K].lerp_(var.detach().to(self.running_var.dtype), rate)
                self.updates += 1
        return mean, var

    def standardise(self, h: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
        return (h - mean) * torch.rsqrt(var + self.eps)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.standardise(h, *self.statistics(h))

    @torch.no_grad()
    def calibrate(self, raw: torch.Tensor) -> None:
        """Set the running estimates to the exact statistics of (N, K, S) raw summaries. The running averages
        lag an encoder that is still moving (by a sizeable fraction of a standard deviation at the end of a stage,
        which cost the content-state decoder validation loss; README, "State normalisation"), so the recipe
        recalibrates at the end of every stage."""
        K = raw.shape[1]
        self.running_mean[:K] = raw.mean(0).to(self.running_mean.dtype)
        self.running_var[:K] = raw.var(0, unbiased=False).to(self.running_var.dtype)
        self.updates += 1


def shift_states(h: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
    """Predictive states: (B, K, S) block summaries -> s_1 = start, s_k = h_{k-1}."""
    return torch.cat([start.expand(h.shape[0], 1, -1), h[:, :-1]], dim=1)


def kl_free_bits(mu: torch.Tensor, logvar: torch.Tensor, budget: float) -> tuple[torch.Tensor, torch.Tensor]:
    """KL(N(mu, e^logvar) || N(0, I)) per block, (B, K, D) -> (free-bits term, raw KL), both summed over blocks
    (nats per sequence). Each block's batch-mean KL is clamped below at ``budget`` nats."""
    kl = 0.5 * (mu.pow(2) + logvar.exp() - 1.0 - logvar).sum(-1)  # (B, K)
    per_block = kl.mean(0)  # (K,)
    return per_block.clamp(min=budget).sum(), per_block.sum()


def drop_codes(codes: torch.Tensor, prob: float, unit: Literal["block", "sequence"] = "block",
               generator: torch.Generator | None = None) -> torch.Tensor:
    """Code dropout: (B, K, D) codes with each block's code (``unit`` block) or every code of a sequence (``unit``
    sequence) replaced by zeros with probability ``prob``, so that zero codes, the state-only configuration's
    input, are an input the decoder trains on. The draw comes from ``generator`` (default: the global stream)."""
    B, K, _ = codes.shape
    shape = (B, K) if unit == "block" else (B, 1)
    where = generator.device if generator is not None else codes.device
    keep = torch.rand(shape, generator=generator, device=where).to(codes.device) >= prob  # (B, K) or (B, 1)
    return codes * keep[..., None].to(codes.dtype)


def mix_states(clean: torch.Tensor, realized: torch.Tensor, prob: float, generator: torch.Generator | None = None
               ) -> torch.Tensor:
    """Self-realized prefix: per (sequence, block), with probability ``prob`` take the realized state."""
    where = generator.device if generator is not None else clean.device
    coin = torch.rand(clean.shape[:2], generator=generator, device=where).to(clean.device) < prob  # (B, K)
    return torch.where(coin[..., None], realized, clean)


class PSFModel(nn.Module):
    """The PSF model. ``features`` (:class:`StageFeatures`): the switches of the recipe stage it runs as (landing
    inputs, codes, the block count now); :meth:`configure` changes them, validated, between stages."""

    def __init__(self, cfg: PSFModelConfig, features: StageFeatures | None = None):
        super().__init__()
        cfg.validate()
        if cfg.vocab_size <= 0:
            raise ForethoughtError("model.vocab_size must be set (> 0)")
        self.config = cfg
        L, K, d = cfg.seq_len, cfg.blocks, cfg.n_embd
        S = cfg.state_dim or d
        self.state_dim, self.code_dim = S, cfg.code_dim
        kmax = max(cfg.max_blocks, K)
        self.encoder = GPT(GPTConfig(vocab_size=cfg.vocab_size, n_positions=L, n_embd=d, n_layer=cfg.enc_layers,
                                     n_head=cfg.n_head, attention="block_causal", block_size=L // K, output_dim=S,
                                     dropout=cfg.dropout))
        # K memory slots + query + n-1 tokens; K + L/K <= kmax + L for every K in 1..kmax.
        self.decoder = GPT(GPTConfig(vocab_size=cfg.vocab_size, n_positions=kmax + L, n_embd=d,
                                     n_layer=cfg.dec_layers, n_head=cfg.n_head, dropout=cfg.dropout))
        self.state_norm = StateNorm(S, kmax, cfg.state_norm_momentum) if cfg.state_norm == "batch" else nn.Identity()
        self.start = nn.Parameter(torch.randn(S) * 0.02)  # s_1 of predictive states
        self.state_in = nn.Linear(S, d)
        self.slot_empty = nn.Parameter(torch.randn(d) * 0.02)
        self.query = nn.Parameter(torch.randn(d) * 0.02)
        self.code_head = nn.Linear(d, 2 * cfg.code_dim)
        self.code_in = nn.Linear(cfg.code_dim, d)
        self.land_proj = nn.Linear(d, d)
        self.land_none = nn.Parameter(torch.zeros(d))
        for m in (self.code_head, self.code_in, self.land_proj):  # start as "off": posterior N(0, I), no effect
            nn.init.zeros_(m.weight)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)
        # created last and only when used, so the other weights (and older checkpoints) are unchanged
        self.input_mask = nn.Parameter(torch.zeros(d)) \
            if cfg.input_dropout > 0 and cfg.input_dropout_with == "mask" else None
        # BN-VAE: per block index standardisation of the posterior means (the same statistics as the states', so
        # that block k's code never mixes in another block's mean) and a learned shift; only when on
        bn = cfg.code_mean_norm == "batch"
        self.code_norm = StateNorm(cfg.code_dim, kmax, cfg.state_norm_momentum) if bn else None
        self.code_shift = nn.Parameter(torch.zeros(cfg.code_dim)) if bn else None
        features = StageFeatures() if features is None else features  # default: every stage switch off
        self.features = features
        self.configure(features)

    # ---- sizes ------------------------------------------------------------------------------------------
    @property
    def seq_len(self) -> int:
        return self.config.seq_len

    @property
    def block_len(self) -> int:
        return self.config.seq_len // self.blocks

    # ---- stage switches --------------------------------------------------------------------------------
    def configure(self, features: StageFeatures) -> PSFModel:
        """Run as the stage ``features`` describes from now on (checked against the config first)."""
        features.validate(self.config)
        self.features = features
        return self

    @property
    def blocks(self) -> int:
        """K: the blocks the model decodes now (a longer-blocks stage decodes fewer than ``config.blocks``)."""
        return self.features.blocks or self.config.blocks

    @property
    def use_codes(self) -> bool:
        return self.features.codes

    @property
    def landing(self) -> bool:
        return self.features.landing

    def num_params(self) -> dict[str, int]:
        enc = sum(p.numel() for p in self.encoder.parameters())
        dec = sum(p.numel() for p in self.decoder.parameters())
        total = sum(p.numel() for p in self.parameters())
        return {"encoder": enc, "decoder": dec, "other": total - enc - dec, "total": total}

    # ---- encoder ----------------------------------------------------------------------------------------
    def encode(self, tokens: torch.Tensor | None, embeds: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, T) tokens (T a multiple of the block length; or ``embeds`` (B, T, d)) -> block summaries
        h (B, T/n, S) (standardised, see :class:`StateNorm`) and pooled encoder features (B, T/n, d) for the code
        head."""
        raw, feats = self.summaries(tokens, embeds)
        return self.normalise(raw)[0], feats

    def normalise(self, raw: torch.Tensor, *others: torch.Tensor, update: bool = True) -> list[torch.Tensor]:
        """Standardise (B, K, S) raw summaries and, with the same statistics, ``others`` (e.g. the summaries of
        the model's own rollout of the same batch): in training the statistics are those of ``raw`` alone, and
        only ``raw`` reaches the running estimates (when ``update``). Returns [raw, *others] standardised (as
        given, with ``model.state_norm none``)."""
        if not isinstance(self.state_norm, StateNorm):
            return [raw, *others]
        mean, var = self.state_norm.statistics(raw, update)
        return [self.state_norm.standardise(x, mean, var) for x in (raw, *others)]

    def summaries(self, tokens: torch.Tensor | None, embeds: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`encode` before the state normalisation."""
        T = (tokens if embeds is None else embeds).shape[1]
        n = self.block_len
        if T % n:
            raise ForethoughtError(f"encoder input of {T} tokens is not a whole number of {n}-token blocks")
        dev = (tokens if embeds is None else embeds).device
        out, hidden = self.encoder(tokens, attn_mask=block_causal_mask(T, n, dev), output_hidden_states=True,
                                   inputs_embeds=embeds)  # (B, T, S), [.. (B, T, d)]
        feats = self.encoder.ln_f(hidden[-1])  # (B, T, d)
        return pool_blocks(out, T // n, self.config.pool), pool_blocks(feats, T // n, self.config.pool)

    def states_from(self, h: torch.Tensor) -> torch.Tensor:
        """(B, K, S) block summaries -> the decoder's states s_1..s_K."""
        return shift_states(h, self.start) if self.config.states == "predictive" else h

    def states(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.states_from(self.encode(tokens)[0])

    def posterior(self, feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, K, d) pooled features -> code posterior mean and log-variance, each (B, K, code_dim)."""
        mu, logvar = self.code_head(feats).chunk(2, dim=-1)
        if self.code_norm is not None:  # BN-VAE: (B, K, D) means standardised per block index, fixed scale
            mu = self.config.code_mean_gamma * self.code_norm(mu) + self.code_shift
        return mu, logvar.clamp(-10.0, 10.0)

    def code_layers(self) -> list[nn.Parameter]:
        """The parameters of the code channel (``model.code_lr_factor`` scales their learning rate)."""
        mods = [self.code_head, self.code_in]
        return [p for m in mods for p in m.parameters()] + ([self.code_shift] if self.code_shift is not None else [])

    def code_embeds(self, codes: torch.Tensor | None) -> torch.Tensor | None:
        """(B, K, code_dim) codes -> (B, K, d) what each branch's code adds to its inputs (None when off)."""
        return self.code_in(codes) if self.use_codes and codes is not None else None

    # ---- decoder ----------------------------------------------------------------------------------------
    def prefix(self, states: torch.Tensor, codes: torch.Tensor | None) -> torch.Tensor:
        """(B, K, S) states (+ (B, K, code_dim) codes) -> (B·K, K+1, d): memory slots and query per branch."""
        B, K, _ = states.shape
        m = self.state_in(states)  # (B, K, d)
        visible = torch.arange(K, device=m.device)[None, :] <= torch.arange(K, device=m.device)[:, None]  # (k, j)
        slots = torch.where(visible[None, :, :, None], m[:, None, :, :], self.slot_empty)  # (B, K, K, d)
        q = self.query.expand(B, K, -1)
        c = self.code_embeds(codes)
        if c is not None:
            q = q + c
        return torch.cat([slots, q[:, :, None]], dim=2).reshape(B * K, K + 1, -1)

    def landing_embeds(self, first: torch.Tensor) -> torch.Tensor:
        """(B, K) first token of every block -> (B, K, d) landing input of each branch (zeros when off)."""
        B, K = first.shape
        d = self.config.n_embd
        if not self.landing:
            return torch.zeros(B, K, d, device=first.device, dtype=self.land_none.dtype)
        nxt = self.land_proj(self.decoder.wte(first[:, 1:]))  # (B, K-1, d): branch k lands on block k+1's start
        return torch.cat([nxt, self.land_none.expand(B, 1, d)], dim=1)

    def input_embeds(self, tok: torch.Tensor) -> torch.Tensor:
        """(..., m) decoder input tokens -> (..., m, d) embeddings; in training, each token independently with
        probability ``input_dropout`` is replaced by the mask vector or a uniformly drawn token
        (``input_dropout_with``). The targets are never changed."""
        p = self.config.input_dropout
        if not (self.training and p > 0):
            return self.decoder.wte(tok)
        drop = torch.rand(tok.shape, device=tok.device) < p
        if self.input_mask is None:  # random tokens
            return self.decoder.wte(torch.where(drop, torch.randint_like(tok, self.config.vocab_size), tok))
        emb = self.decoder.wte(tok)
        return torch.where(drop[..., None], self.input_mask.to(emb.dtype), emb)

    def decode_logits(self, tokens: torch.Tensor, states: torch.Tensor, codes: torch.Tensor | None = None
                      ) -> torch.Tensor:
        """Teacher-forced decoder: (B, L) tokens, (B, K, S) states -> (B, K, n, V) logits for every token."""
        B, L = tokens.shape
        K, n = self.blocks, self.block_len
        tok = tokens.view(B, K, n)
        inp = self.input_embeds(tok[:, :, :-1]) + self.landing_embeds(tok[:, :, 0])[:, :, None]  # (B, K, n-1, d)
        c = self.code_embeds(codes)
        if c is not None and self.config.code_enters == "inputs":
            inp = inp + c[:, :, None]  # every input position of branch k reads its code
        seq = torch.cat([self.prefix(states, codes), inp.reshape(B * K, n - 1, -1)], dim=1)  # (B·K, K+n, d)
        logits = self.decoder(None, inputs_embeds=seq)[:, K:]  # (B·K, n, V)
        return logits.view(B, K, n, -1)

    def forward(self, tokens: torch.Tensor, realized: torch.Tensor | None = None, mix_prob: float = 0.5,
                generator: torch.Generator | None = None, code_generator: torch.Generator | None = None,
                code_noise: bool = True) -> dict[str, torch.Tensor]:
        """Teacher-forced loss on (B, L) tokens: cross-entropy over all L tokens (+ free-bits KL per token with
        codes). ``realized`` (B, K, S): the raw summaries (before the state normalisation) of the model's own
        rollout of ``tokens`` (:func:`realized_summaries`); they are standardised with the statistics of this
        batch's clean summaries, so that generated text keeps its shift from real text, and each block takes
        the resulting state instead of the clean one with probability ``mix_prob`` (self-realized prefix
        training; the target stays the real block). ``code_generator`` draws the codes' noise (default: the
        global RNG); evaluation passes a seeded one so that its numbers repeat. ``code_noise`` False feeds the
        decoder the posterior mean instead of a sample (the codes stage's deterministic warm-up); the KL is charged
        either way. In training with ``code_dropout`` the decoder gets zeros instead of some codes
        (:func:`drop_codes`; ``out["codes"]`` is what it got), the KL charged for every block."""
        if tokens.shape[1] != self.seq_len:
            raise ForethoughtError(f"PSF model expects sequences of {self.seq_len} tokens, got {tokens.shape[1]}")
        raw, feats = self.summaries(tokens)
        if realized is None:
            (h,) = self.normalise(raw)
            s = self.states_from(h)
        else:
            h, h_real = self.normalise(raw, realized)
            s = mix_states(self.states_from(h), self.states_from(h_real), mix_prob, generator)
        out: dict[str, torch.Tensor] = {"states": s}
        codes = None
        if self.use_codes:
            mu, logvar = self.posterior(feats)
            if code_noise:
                eps = randn(tuple(mu.shape), code_generator, mu.device).to(mu.dtype)
                codes = mu + (0.5 * logvar).exp() * eps  # reparameterised sample
            else:  # deterministic warm-up: the posterior mean
                codes = mu
            if self.training and self.config.code_dropout > 0:  # the decoder also trains on zero codes
                codes = drop_codes(codes, self.config.code_dropout, self.config.code_dropout_unit)
            budget = self.config.free_bits_block or self.config.free_bits * self.block_len  # nats per block
            kl_term, kl_raw = kl_free_bits(mu, logvar, budget)
            out.update(codes=codes, kl=kl_raw / self.seq_len, kl_term=kl_term / self.seq_len)
        logits = self.decode_logits(tokens, s, codes)
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tokens.reshape(-1))
        out["ce"] = ce
        out["loss"] = ce + self.config.kl_weight * out["kl_term"] if self.use_codes else ce
        return out


@torch.no_grad()
def generate_blocks(model: PSFModel, states: torch.Tensor, codes: torch.Tensor | None = None, *,
                    temperature: float = 1.0, top_p: float = 1.0, generator: torch.Generator | None = None,
                    force: torch.Tensor | None = None, force_blocks: torch.Tensor | None = None,
                    return_logits: bool = False, landing_codes: torch.Tensor | None = None
                    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Write all K blocks in parallel, n = L/K KV-cached steps (serial depth n).

    states: (B, K, S); codes: (B, K, code_dim) or None. ``force`` (B, L) with ``force_blocks`` (B, K) bool
    (default: all) feeds given tokens instead of sampled ones in those blocks (prompted generation, and the
    training-equals-sampling test). ``landing_codes`` (B, K, code_dim): the landing tokens (each branch's view of
    the next block's first token) come from a separate step 1 decoded with these codes instead of ``codes``; the
    self-realized rollout uses it so that block k's posterior code cannot reach block k-1's text (and so the
    realized s_k). Returns (B, L) tokens (and (B, K, n, V) logits)."""
    B, K, _ = states.shape
    n = model.block_len
    if K != model.blocks:
        raise ForethoughtError(f"got {K} states, the model decodes {model.blocks} blocks")
    if force is not None and force_blocks is None:
        force_blocks = torch.ones(B, K, dtype=torch.bool, device=states.device)
    cache = model.decoder.new_cache(K + n)  # K slots + query + n-1 tokens
    x = model.prefix(states, codes)  # (B·K, K+1, d)
    c = model.code_embeds(codes)
    code_inputs = c if c is not None and model.config.code_enters == "inputs" else 0.0  # (B, K, d) or 0
    toks: list[torch.Tensor] = []
    all_logits: list[torch.Tensor] = []
    land = None
    for i in range(n):
        logits = model.decoder(None, inputs_embeds=x, kv_cache=cache)[:, -1].view(B, K, -1)  # (B, K, V)
        t = sample_tokens(logits, temperature, top_p, generator)  # (B, K)
        if force is not None:
            t = torch.where(force_blocks, force.view(B, K, n)[:, :, i], t)
        toks.append(t)
        if return_logits:
            all_logits.append(logits)
        if i + 1 < n:
            if land is None:  # after step 1 every branch knows the next branch's first token
                first = t
                if landing_codes is not None and model.landing and model.use_codes:
                    step1 = model.decoder(None, inputs_embeds=model.prefix(states, landing_codes))[:, -1]
                    first = sample_tokens(step1.view(B, K, -1), temperature, top_p, generator)  # (B, K)
                    if force is not None:
                        first = torch.where(force_blocks, force.view(B, K, n)[:, :, 0], first)
                land = model.landing_embeds(first)  # (B, K, d)
            x = (model.decoder.wte(t) + land + code_inputs).reshape(B * K, 1, -1)
    out = torch.stack(toks, dim=2).reshape(B, K * n)
    return (out, torch.stack(all_logits, dim=2)) if return_logits else out


@torch.no_grad()
def calibrate_states(model: PSFModel, windows: torch.Tensor, batch: int = 64) -> None:
    """Recalibrate the running estimates of the state normalisation and of BN-VAE's code-mean normalisation
    (``code_mean_norm batch``) on (N, L) windows with the current encoder: both lag an encoder that is still
    moving, and evaluation and sampling read them. The code-mean norm only in a stage that uses codes: before
    the codes stage the code head is untrained and its estimates stay as built."""
    code_norm = model.code_norm if model.use_codes else None
    if not isinstance(model.state_norm, StateNorm) and code_norm is None:
        return
    was_training = model.training
    model.eval()
    dev = next(model.parameters()).device
    raw, code_means = [], []
    for i in range(0, len(windows), batch):
        h, feats = model.summaries(windows[i:i + batch].to(dev))
        raw.append(h)
        code_means.append(model.code_head(feats).chunk(2, dim=-1)[0])  # (B, K, D) before the code-mean norm
    if isinstance(model.state_norm, StateNorm):
        model.state_norm.calibrate(torch.cat(raw))
    if code_norm is not None:
        code_norm.calibrate(torch.cat(code_means))
    model.train(was_training)


def realized_summaries(model: PSFModel, tokens: torch.Tensor, temperature: float = 0.65, top_p: float = 0.95,
                       generator: torch.Generator | None = None) -> torch.Tensor:
    """Self-realized prefix: decode every block from the clean states of ``tokens`` (no gradient), re-encode
    the generated text and return its raw summaries (B, K, S), before the state normalisation:
    :meth:`PSFModel.forward` standardises them with the clean batch's statistics (standardising them with their
    own would erase their shift from real text's states). The re-encoding keeps its gradient, so the encoder
    also learns to summarise generated text usefully. Neither pass here touches the running estimates.

    With codes, branch k writes from its block's posterior mean (the block's own code: block k's text may depend
    on block k), but the landing token branch k-1 reads comes from a step 1 with zero codes (the prior's mean):
    with branch k's own step-1 token it would carry block k's code into generated block k-1, whose summary is
    the realized s_k, so block k would leak into its own predictive state (issue 31)."""
    was_training = model.training
    model.eval()  # no dropout in the rollout ...
    model.state_norm.train(was_training)  # ... but the clean states normalised as in the teacher-forced pass
    with torch.no_grad():
        raw, feats = model.summaries(tokens)
        (h,) = model.normalise(raw, update=False)  # the teacher-forced pass updates the estimates, once
        codes = model.posterior(feats)[0] if model.use_codes else None  # posterior mean: the block's own code
        generated = generate_blocks(model, model.states_from(h), codes, temperature=temperature, top_p=top_p,
                                    generator=generator,
                                    landing_codes=None if codes is None else torch.zeros_like(codes))
    model.train(was_training)
    return model.summaries(generated)[0]


def start_codes(model: PSFModel, how: Literal["zero", "normal"], generator: torch.Generator,
                sigma: float = 1.0) -> None:
    """The decoder's code input layer for a codes stage that starts now (``model.code_in_init``). ``zero`` leaves
    it as it is (zero since it was built: no earlier stage uses it). With the code head also at zero (posterior
    N(0, I)) the code is noise the decoder cannot read, and the head gets no gradient through a zero layer: only
    the noise of the updates moves either. ``normal`` (std 0.02, the GPT's init scale) breaks that symmetry, at
    the price of a small perturbation of the previous stage's function. ``sigma`` (``model.code_init_sigma``)
    sets the posterior's starting spread: with sigma < 1 a code is mostly its mean from the first step, so the
    decoder can read it before it has learned anything (the KL it costs is charged beyond the free bits)."""
    if sigma != 1.0:
        with torch.no_grad():
            model.code_head.bias[model.code_dim:] = 2.0 * math.log(sigma)  # log-variance half of the head
    if how == "normal":
        with torch.no_grad():
            w = model.code_in.weight
            w.copy_(torch.randn(w.shape, generator=generator) * 0.02)
