"""Token-level continuous flow baseline, ELF-B's recipe (Embedded Language Flows, github lillian039/ELF:
``train_owt_ELF-B.yml``, ``uncond_sampling_configs.yml``, ``train_step.py``, ``sampling_utils.py``) as far as it
carries over offline — the comparison the Predictive State Flow paper draws, a flow over every token rather than
over K block states. Every part is a :class:`TokenFlowConfig` setting whose default is ELF-B's value; docs/psf.md
lists what still differs and why. :data:`TABLE_FLOW` is the earlier, plainer baseline (also how checkpoints saved
before these settings load).

- **Latents** (``latents``): ``contextual`` (ELF) — a frozen encoder's hidden states of the whole window,
  ``x0 = (h - latent_mean) / latent_std``; ELF uses T5-small's encoder, which is not available offline, so
  ``psf token-flow`` takes the AR baseline's last layer (after its final norm: the LM head's input) — causal,
  where T5's is bidirectional. ``table``: the AR model's token table, frozen, centred and every row scaled to
  norm √D (AR tables share a large common direction).
- **Flow** (t = 1 is data): ``x_t = t·x0 + (1 - t)·s·ε`` with ``s = noise_scale`` (ELF-B 2), logit-normal time
  ``t = sigmoid(N(time_mu, time_sigma))`` (ELF-B -1.5, 0.8: most mass at low signal), x-prediction with the
  velocity loss ``(x̂ - x_t)/max(1 - t, min_gap)`` against ``(x0 - x_t)/max(1 - t, min_gap)`` (ELF's t_eps 0.05).
- **Cross-entropy decoder branch** (``decoder_prob``, ELF-B 0.2): that fraction of training steps (one coin per
  step, as ELF's) trains the network in decoder mode instead: input ``λ·x0 + (1 - λ)·decoder_noise_scale·ε``
  with ``λ = sigmoid(N(0.8, 0.8))`` per token, t = 1, a decoder-mode flag on every position (ELF: four gated
  mode tokens), cross-entropy of the tokens from a factored head ``gelu(h·W1)·W2`` (hidden -> latent dim ->
  vocabulary, ELF's unembedding). At sampling the final latent goes through this head (``rounding: decoder``).
- **Self-conditioning** (Chen et al., Analog Bits; ``self_cond_prob`` 0.5): a first no-grad pass with a zero
  self-conditioning input gives x̂_uncond, fed (detached) to the trained pass for that fraction of the examples.
  **Guidance** (``self_cond_guidance``, ELF-B's self-conditioning CFG): each example draws a scale w
  (log-uniform on (1 + guidance_min, 1 + guidance_max), minus 1), which the network reads (sinusoidal features
  beside t's), and where it self-conditions its target moves by ``(1 - 1/w)·(x̂_cond - x̂_uncond)``, x̂_cond from a
  second no-grad pass fed x̂_uncond — ELF's guided velocity target, written in x (the velocities share the
  denominator). Sampling then needs one pass per step at ``guidance_scale`` (ELF-B 3).
- **Sampler** (``sampler: sde``, ELF's ``_sde_step``): times ``0 < t_1 < ... < 1`` (``sample_schedule``:
  ``logit_normal`` = the sorted draws of steps - 1 training times, as ELF's; or uniform); each step but the last
  first moves back to ``t_b = α·t`` with ``α = clip(1 - γ·h, 0, 1)``, ``z_b = α·z + (1 - α)·s·ε`` (``sde_gamma``
  γ, ELF-B 1.5 at 32 steps; h = the step), then ``z = z_b + (t_next - t_b)·v̂(z_b, t_b)``; the last step is plain
  Euler; then the decoder head at t = 1 writes the tokens (``rounding`` decoder: argmax, or float64 sampling at
  ``temperature``). ``sampler: euler`` is the probability-flow ODE.
- **Denoiser**: our GPT with full attention over the L positions; its input per position is ``[x_t,
  self-conditioning x̂, features of t (and w), decoder flag]`` through the linear input embedding. Output
  (``head``): ``embedding`` (ELF) = x̂ directly; ``logits`` (table latents) = an LM head, x̂ = softmax(logits)·E.
- **Entropy knobs** of :func:`sample_token_flow`, acting at every step: ``guidance`` w (ELF's own scale);
  ``step_temperature`` τ (``head=logits``): x̂ = softmax(logits / τ)·E (τ > 1 lowers the entropy); ``noise`` η
  (``sampler: euler``): Euler-Maruyama on ``dx = [v - η·ε̂] dt + sqrt(2η(1 - t))·s dW`` with ε̂ the implied noise,
  which keeps the ODE's marginals for an exact denoiser (more noise lowers the entropy; keep η/steps ≤ 1/8). The
  rounding temperature alone barely moves the entropy: the final logits are nearly one-hot. Measured on the
  tiny planted-corpus table flow of tests/test_token_flow.py (8 Euler steps, 64 samples): τ 0.5 / 1 / 1.5 / 2
  gave 2.670 / 2.626 / 2.574 / 2.495 nats, η 0 / 0.5 / 1 2.626 / 2.605 / 2.559.
- **Cost**: ``steps`` full L-position passes per document (+ one decoder pass with ``rounding: decoder``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from forethought.core.checkpoint import config_from_record, latest_checkpoint, load_pretrained, model_record
from forethought.core.errors import ForethoughtError
from forethought.core.io import read_json_object
from forethought.core.runtime import pick_device, step_generator, unwrap
from forethought.models.gpt import GPT, GPTConfig
from forethought.psf.config import TokenFlowConfig
from forethought.psf.prior import euler_step, flow_loss, interpolate, logit_normal_t, time_embedding
from forethought.psf.sampling import randn, sample_tokens

if TYPE_CHECKING:  # sampling and loading a flow never import the training loop
    from forethought.core.run import Run
    from forethought.core.runtime import Runtime
    from forethought.core.trainer import TrainConfig

MODEL_TYPE = "forethought-token-flow"  # config.json of its checkpoints
# the earlier baseline: a frozen token table, an LM head, the plain Euler ODE, no decoder branch, no guidance
TABLE_FLOW: dict[str, Any] = {"latents": "table", "head": "logits", "rounding": "lm_head", "noise_scale": 1.0,
                              "time_mu": 0.0, "time_sigma": 1.0, "decoder_prob": 0.0, "self_cond_guidance": False,
                              "sampler": "euler", "sample_schedule": "uniform"}


def embedding_table(model: nn.Module) -> torch.Tensor:
    """(V, D) token table of a trained AR model (our GPT or any HF model), detached."""
    if isinstance(model, GPT):
        if not isinstance(model.wte, nn.Embedding):
            raise ForethoughtError("the AR model has real-valued inputs, not a token table")
        return model.wte.weight.detach().clone()
    get = getattr(model, "get_input_embeddings", None)
    if get is None or get() is None:
        raise ForethoughtError(f"{type(model).__name__} has no token embedding table")
    return get().weight.detach().clone()


def normalise_table(table: torch.Tensor) -> torch.Tensor:
    """(V, D) -> (V, D): centred on the vocabulary mean, every row rescaled to norm √D."""
    centred = table.float() - table.float().mean(0, keepdim=True)
    return centred * (table.shape[1] ** 0.5) / centred.norm(dim=1, keepdim=True).clamp_min(1e-8)


@torch.no_grad()
def contextual_latents(encoder: GPT, tokens: torch.Tensor, layer: int = -1) -> torch.Tensor:
    """(B, L) ids -> (B, L, D): a frozen GPT's hidden states of the window as it is fed, so position i's latent has
    read tokens 1..i (itself included). ``layer`` -1: the last, after the final norm (the LM head's input, tuned to
    predict token i + 1); k >= 0: the residual stream after block k (0: the embeddings), nearer token i itself."""
    if not -1 <= layer <= encoder.config.n_layer:
        raise ForethoughtError(f"latent_layer must be -1 or 0..{encoder.config.n_layer} (the encoder's blocks), "
                               f"got {layer}")
    _, hidden = encoder(tokens, output_hidden_states=True)
    return (encoder.ln_f(hidden[-1]) if layer == -1 else hidden[layer]).float()


@torch.no_grad()
def encoder_latents(encoder: torch.nn.Module, tokens: torch.Tensor, layer: int = -1) -> torch.Tensor:
    """(B, L) ids -> (B, L, D): a frozen Hugging Face encoder's hidden states of the window, where every position
    reads the whole window (ELF's T5-small latents). ``layer`` -1: its last hidden states (after its final norm);
    k >= 0: after its layer k (0: the embeddings)."""
    out = encoder(input_ids=tokens, output_hidden_states=layer != -1)
    return (out.last_hidden_state if layer == -1 else out.hidden_states[layer]).float()


def decoder_input(cfg: TokenFlowConfig, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """The decoder branch's input for (B, L, D) latents: λ·x + (1 - λ)·decoder_noise_scale·ε with λ = sigmoid(N(
    decoder_time_mu, decoder_time_sigma)) per token (ELF's), drawn on the CPU (``generator`` or the global RNG)."""
    B, L, _ = x.shape
    lam = torch.sigmoid(cfg.decoder_time_mu + cfg.decoder_time_sigma
                        * torch.randn(B, L, 1, generator=generator)).to(x.device)  # (B, L, 1) per token
    return lam * x + (1 - lam) * cfg.decoder_noise_scale * torch.randn(x.shape, generator=generator).to(x.device)


@torch.no_grad()
def decoder_cross_entropy(model: TokenFlow, tokens: torch.Tensor, latents: torch.Tensor,
                          generator: torch.Generator | None = None) -> dict[str, float]:
    """How well the decoder head reads tokens (B, L) from their normalised latents (B, L, D), in nats/token:
    ``clean`` (λ = 1: the input the sampler's last step aims at) and ``training_noise`` (λ drawn as the decoder
    branch trains). A clean value far above zero means the head cannot read the tokens back from their latents
    (the latents do not carry them, or the decoder branch has not learned to read them), so no flow over them
    writes text."""
    if not model.decoder_branch:
        raise ForethoughtError("this token flow has no decoder branch (decoder_prob 0)")
    model.eval()
    B = latents.shape[0]
    w = (torch.full((B,), model.config.guidance_scale, device=latents.device)
         if model.config.self_cond_guidance else None)
    out = {}
    for key, z in (("clean", latents), ("training_noise", decoder_input(model.config, latents, generator))):
        _, logits = model(z, torch.ones(B, device=latents.device), None, w, decode=True)
        out[key] = float(F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tokens.reshape(-1)))
    return out


def log_uniform_guidance(n: int, low: float, high: float, generator: torch.Generator | None = None,
                         device: torch.device | str = "cpu") -> torch.Tensor:
    """(n,) guidance scales w: log-uniform on (1 + low, 1 + high), minus 1 (ELF's sample_cfg_scale)."""
    u = torch.rand(n, generator=generator, dtype=torch.float64)
    a, b = 1.0 + low, 1.0 + high
    return (a * torch.exp(u * math.log(b / a)) - 1.0).float().to(device)


def sampling_times(steps: int, cfg: TokenFlowConfig, generator: torch.Generator | None = None) -> list[float]:
    """steps + 1 times from 0 to 1: evenly spaced, or (logit_normal, ELF's) 0, the sorted draws of steps - 1
    training times, 1."""
    if cfg.sample_schedule == "uniform" or steps == 1:
        return [i / steps for i in range(steps + 1)]
    z = randn((steps - 1,), generator, "cpu").double()  # drawn on the generator's device (a GPU's too)
    inner = torch.sigmoid(cfg.time_mu + cfg.time_sigma * z).clamp(1e-6, 1 - 1e-6).sort().values
    return [0.0, *inner.tolist(), 1.0]


def sde_back(z: torch.Tensor, t: float, t_next: float, gamma: float, noise: torch.Tensor) -> tuple[torch.Tensor, float]:
    """ELF's churn before an SDE step: back to t_b = α·t with α = clip(1 - γ·(t_next - t), 0, 1), z_b = α·z +
    (1 - α)·noise (``noise`` already scaled). γ = 0 leaves (z, t) as they are."""
    alpha = min(max(1.0 - gamma * (t_next - t), 0.0), 1.0)
    return alpha * z + (1 - alpha) * noise, alpha * t


class TokenFlow(nn.Module):
    """x-predictor over (B, L, D) noisy latents (+ the decoder branch's head), with the frozen token table as a
    buffer (the latents of ``latents: table``)."""

    def __init__(self, cfg: TokenFlowConfig, table: torch.Tensor):
        super().__init__()
        cfg.validate()
        self.config = cfg
        vocab, dim = table.shape
        self.vocab_size, self.dim = vocab, dim
        self.register_buffer("table", normalise_table(table))  # (V, D) frozen, saved with the weights
        self.decoder_branch = cfg.decoder_prob > 0
        in_dim = (dim * (2 if cfg.self_cond else 1) + cfg.time_dim * (2 if cfg.self_cond_guidance else 1)
                  + int(self.decoder_branch))
        self.net = GPT(GPTConfig(vocab_size=vocab, n_positions=cfg.seq_len, n_embd=cfg.n_embd, n_layer=cfg.n_layer,
                                 n_head=cfg.n_head, attention="full", input_dim=in_dim,
                                 output_dim=dim if cfg.head == "embedding" else 0))
        if self.decoder_branch:  # ELF's factored unembedding: hidden -> latent dim -> vocabulary
            self.dec_proj = nn.Linear(cfg.n_embd, dim)
            self.dec_out = nn.Linear(dim, vocab)

    def num_params(self) -> int:
        """Trained parameters (the frozen embedding table is a buffer and not counted)."""
        return sum(p.numel() for p in self.parameters())

    def forward(self, x_t: torch.Tensor, t: torch.Tensor, self_cond: torch.Tensor | None = None,
                guidance: torch.Tensor | None = None, decode: bool = False
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x_t (B, L, D), t (B,), self_cond (B, L, D) or None (= zeros), guidance w (B,) or None (= the sampling
        scale) -> x̂ (B, L, D) and logits (B, L, V): the LM head's (head=logits), the decoder head's (``decode``,
        the decoder mode), else None."""
        B, L, _ = x_t.shape
        cfg = self.config
        parts = [x_t]
        if cfg.self_cond:
            parts.append(torch.zeros_like(x_t) if self_cond is None else self_cond)
        parts.append(time_embedding(t, cfg.time_dim)[:, None].expand(B, L, -1))  # (B, L, time_dim)
        if cfg.self_cond_guidance:
            w = torch.full((B,), cfg.guidance_scale, device=x_t.device) if guidance is None else guidance
            parts.append(time_embedding(w, cfg.time_dim)[:, None].expand(B, L, -1))
        if self.decoder_branch:
            parts.append(torch.full((B, L, 1), float(decode), device=x_t.device))  # the mode flag
        elif decode:
            raise ForethoughtError("this token flow has no decoder branch (decoder_prob 0)")
        out, hidden = self.net(torch.cat(parts, dim=-1), output_hidden_states=True)  # (B, L, V | D)
        if decode:
            h = self.net.ln_f(hidden[-1])  # (B, L, n_embd)
            return out if cfg.head == "embedding" else x_t, self.dec_out(F.gelu(self.dec_proj(h)))
        if cfg.head == "embedding":
            return out, None
        x_hat = F.softmax(out.float(), dim=-1) @ self.table  # (B, L, D): expected embedding
        return x_hat, out

    def config_dict(self) -> dict[str, Any]:
        """Its checkpoints' record (:func:`load_token_flow` reads it back): the config and the table's size."""
        return model_record(MODEL_TYPE, asdict(self.config), vocab_size=self.vocab_size, dim=self.dim)


def token_flow_loss(model: nn.Module, tokens: torch.Tensor, generator: torch.Generator | None = None,
                    latents: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Training loss on a (B, L) batch of token ids and, for contextual latents, their (B, L, D) normalised
    latents; returns (loss, metrics) as the trainer expects. One step is a decoder step (cross-entropy, with
    probability ``decoder_prob``) or a flow step (velocity loss, self-conditioning and its guidance).

    Randomness (coins, noise, times, scales) comes from ``generator`` when given, else the global RNG (which the
    trainer saves and restores, so resumed runs stay exact).
    """
    core = unwrap(model)
    cfg = core.config
    dev = tokens.device
    if cfg.latents == "contextual":
        if latents is None:
            raise ForethoughtError("contextual latents: pass the encoder's latents of the batch")
        x = latents
    else:
        x = core.table[tokens]  # (B, L, D)
    B = x.shape[0]
    w = (log_uniform_guidance(B, cfg.guidance_min, cfg.guidance_max, generator, dev) if cfg.self_cond_guidance
         else None)
    if cfg.decoder_prob and float(torch.rand(1, generator=generator)) < cfg.decoder_prob:
        _, logits = model(decoder_input(cfg, x, generator), torch.ones(B, device=dev), None, w, decode=True)
        ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tokens.reshape(-1))
        return ce, {"decoder_ce": float(ce.detach())}
    noise = cfg.noise_scale * torch.randn(x.shape, generator=generator).to(dev)
    t = logit_normal_t(B, cfg.time_mu, cfg.time_sigma, generator=generator, device=dev)  # (B,)
    x_t = interpolate(x, noise, t)
    sc, target = None, x
    if cfg.self_cond and cfg.self_cond_prob > 0:
        use = (torch.rand(B, generator=generator) < cfg.self_cond_prob).to(dev)[:, None, None]  # (B, 1, 1)
        if bool(use.any()):
            with torch.no_grad():  # the estimate is an input, not a path for gradients
                uncond, _ = model(x_t, t, None, w)
                sc = torch.where(use, uncond, torch.zeros_like(uncond))
                if w is not None:  # guidance: v + (1 - 1/w)(v_cond - v_uncond), written in x
                    cond, _ = model(x_t, t, uncond, w)
                    g = (1 - 1 / w.clamp_min(1e-6))[:, None, None]
                    target = x + torch.where(use, g * (cond - uncond), torch.zeros_like(x))
    x_hat, logits = model(x_t, t, sc, w)
    flow = flow_loss(x_hat, target, x_t, t, cfg.min_gap)
    loss = flow
    metrics = {"flow": float(flow.detach())}
    if logits is not None:
        metrics["acc"] = float((logits.argmax(-1) == tokens).float().mean())
        if cfg.ce_weight:
            ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tokens.reshape(-1))
            loss = loss + cfg.ce_weight * ce
            metrics["ce"] = float(ce.detach())
    return loss, metrics


def round_to_tokens(model: TokenFlow, x_hat: torch.Tensor, logits: torch.Tensor | None, temperature: float = 0.0,
                    generator: torch.Generator | None = None) -> torch.Tensor:
    """Final x̂ (B, L, D) (+ logits) -> (B, L) token ids: argmax, or float64 sampling at ``temperature``."""
    if model.config.rounding in ("lm_head", "decoder"):
        if logits is None:
            raise ForethoughtError(f"rounding={model.config.rounding} needs its logits")
        scores = logits
    else:
        scores = x_hat @ model.table.T  # (B, L, V): equal row norms, so the largest is the nearest
    return sample_tokens(scores, temperature, 1.0, generator)  # float64: no fp32 sampling artefacts


def check_knobs(model: TokenFlow, step_temperature: float, noise: float, guidance: float | None = None) -> None:
    """The entropy knobs' ranges (see the module docstring)."""
    if not (math.isfinite(step_temperature) and step_temperature > 0):
        raise ForethoughtError(f"step_temperature must be a number > 0, got {step_temperature}")
    if step_temperature != 1.0 and model.config.head != "logits":
        raise ForethoughtError("step_temperature needs a token flow with head=logits (x̂ = softmax(logits/τ)·E)")
    if not (math.isfinite(noise) and noise >= 0):
        raise ForethoughtError(f"noise must be a number >= 0, got {noise}")
    if noise and model.config.sampler != "euler":
        raise ForethoughtError("noise is the Euler sampler's knob; this flow samples with sampler=sde (its knob: "
                               "guidance)")
    if guidance is not None:
        if not (math.isfinite(guidance) and guidance > 0):
            raise ForethoughtError(f"guidance must be a number > 0, got {guidance}")
        if not model.config.self_cond_guidance:
            raise ForethoughtError("guidance needs a token flow trained with self_cond_guidance")


@torch.no_grad()
def sample_token_flow(model: TokenFlow, n: int, steps: int | None = None, generator: torch.Generator | None = None,
                      temperature: float = 0.0, batch_size: int | None = None, *, step_temperature: float = 1.0,
                      noise: float = 0.0, guidance: float | None = None) -> torch.Tensor:
    """(n, L) token ids: the flow's sampler (``sampler``: ELF's SDE or the Euler ODE) from noise (t = 0) to data
    (t = 1) in ``steps`` network passes, then rounding at ``temperature`` (0 = argmax; ``rounding: decoder``
    runs the decoder head once more at t = 1).

    ``step_temperature``, ``noise`` and ``guidance`` (None = the flow's ``guidance_scale``) are the entropy knobs
    (module docstring). Noise and times are drawn on ``generator`` (on its device: a CPU generator gives the same
    samples on every device). ``batch_size`` splits n into sequential batches (memory only).
    """
    model.eval()
    cfg = model.config
    steps = steps or cfg.steps
    if steps <= 0 or n <= 0:
        raise ForethoughtError(f"sampling needs n > 0 and steps > 0, got n={n}, steps={steps}")
    check_knobs(model, step_temperature, noise, guidance)
    dev = model.table.device
    out = []
    for start in range(0, n, batch_size or n):
        b = min(batch_size or n, n - start)
        shape = (b, cfg.seq_len, model.dim)
        w = None if not cfg.self_cond_guidance else torch.full((b,), guidance or cfg.guidance_scale, device=dev)
        times = sampling_times(steps, cfg, generator)
        x = cfg.noise_scale * randn(shape, generator, dev)  # (b, L, D) at t = 0
        x_hat, logits = None, None
        for i in range(steps):
            t, t_next = times[i], times[i + 1]
            last = i == steps - 1
            z, t_in = x, t
            if cfg.sampler == "sde" and not last:  # ELF: the last step is a plain ODE step
                z, t_in = sde_back(x, t, t_next, cfg.sde_gamma, cfg.noise_scale * randn(shape, generator, dev))
            sc = x_hat if cfg.self_cond else None  # zeros at the first step
            x_hat, logits = model(z, torch.full((b,), t_in, device=dev), sc, w)
            if step_temperature != 1.0:
                x_hat = F.softmax(logits.float() / step_temperature, dim=-1) @ model.table  # (b, L, D)
            if cfg.sampler == "sde":
                x = z + (t_next - t_in) * (x_hat - z) / max(1 - t_in, cfg.min_gap)  # ELF's clamped velocity
            elif noise and not last:  # Euler-Maruyama; the last step lands on x̂, where no noise is left
                dt = t_next - t
                eps_hat = (x - t * x_hat) / (1 - t)  # the noise that x_t implies
                x = euler_step(x, x_hat, t, dt) - dt * noise * eps_hat
                x = x + math.sqrt(2 * noise * (1 - t) * dt) * cfg.noise_scale * randn(shape, generator, dev)
            else:
                x = euler_step(x, x_hat, t, t_next - t)  # the last step lands on x̂ exactly
        if cfg.rounding == "decoder":
            x_hat, logits = model(x, torch.ones(b, device=dev), None, w, decode=True)
        out.append(round_to_tokens(model, x_hat, logits, temperature, generator))
    return torch.cat(out)  # (n, L)


def load_token_flow(run_dir: str | Path, device: str | torch.device = "cpu") -> tuple[TokenFlow, dict[str, Any]]:
    """A trained token flow from its run folder (the newest checkpoint, whose config.json holds the model's
    settings and table size; the frozen table is in the weights), in eval mode, and the run's results.json
    (``{}`` when the folder has none)."""
    run_dir = Path(run_dir)
    ckpt = latest_checkpoint(run_dir)
    if ckpt is None:
        raise ForethoughtError(f"{run_dir} holds no token-flow checkpoint (step-NNNNNN/)")

    def build(record: dict[str, Any]) -> TokenFlow:
        where = f"{ckpt}/config.json"
        size = [record.get("vocab_size"), record.get("dim")]
        if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in size):
            raise ForethoughtError(f"{where} is corrupt: vocab_size and dim must be positive integers")
        saved = record["config"]
        if isinstance(saved, dict) and "latents" not in saved:  # saved before ELF-B's settings: the table flow
            saved = {**TABLE_FLOW, **saved}
        return TokenFlow(config_from_record(TokenFlowConfig, saved, where), torch.zeros(*size))

    model = load_pretrained(ckpt, MODEL_TYPE, build)[0]  # the frozen table comes with the weights
    results = read_json_object(run_dir / "results.json") if (run_dir / "results.json").is_file() else {}
    return model.to(pick_device(str(device))).eval(), results


def is_token_flow_run(run_dir: str | Path) -> bool:
    """Whether a folder's newest checkpoint is a token flow's."""
    ckpt = latest_checkpoint(Path(run_dir))
    if ckpt is None or not (ckpt / "config.json").is_file():
        return False
    try:
        return json.loads((ckpt / "config.json").read_text()).get("model_type") == MODEL_TYPE
    except (OSError, ValueError, AttributeError):
        return False


def train_token_flow(model: TokenFlow, tokens: torch.Tensor, cfg: TrainConfig, run: Run, rt: Runtime, *,
                     seed: int = 0, resume: str | None = None,
                     encode: Callable[[torch.Tensor], torch.Tensor] | None = None) -> dict[str, Any]:
    """Train on (N, L) token windows with the shared trainer (checkpoints, --resume auto, metrics).

    Batch for step s: ``cfg.batch_size`` windows drawn with replacement by ``step_generator(seed, s)``, a pure
    function of the step. Returns the trainer's summary (loss curve, wall time, ...).
    """
    if tokens.dim() != 2 or tokens.shape[1] != model.config.seq_len:
        raise ForethoughtError(f"token windows must be (N, {model.config.seq_len}), got {tuple(tokens.shape)}")
    if int(tokens.max()) >= model.vocab_size:
        raise ForethoughtError(f"token id {int(tokens.max())} is outside the embedding table ({model.vocab_size})")

    def batch_fn(step: int) -> dict:
        idx = torch.randint(len(tokens), (cfg.batch_size,), generator=step_generator(seed, step))
        return {"tokens": tokens[idx], "step": step}  # (B, L)

    return train_token_flow_batches(model, batch_fn, cfg, run, rt, resume=resume, encode=encode)


def train_token_flow_batches(model: TokenFlow, batch_fn: Callable[[int], dict], cfg: TrainConfig, run: Run,
                             rt: Runtime, *, resume: str | None = None,
                             encode: Callable[[torch.Tensor], torch.Tensor] | None = None) -> dict[str, Any]:
    """Train with the shared trainer on ``batch_fn(step)["tokens"]`` (B, L), e.g. a recipe run's own batches
    (forethought.psf.recipe.recipe_batches); ``encode`` (B, L) ids -> (B, L, D) normalised latents is the frozen
    encoder of contextual latents (required for them, unused otherwise). Returns the trainer's summary."""
    from forethought.core.trainer import train  # the training loop, only when training

    if (model.config.latents == "contextual") != (encode is not None):
        raise ForethoughtError("contextual latents need an encoder (encode), table latents none")

    def loss(m: nn.Module, batch: dict) -> tuple[torch.Tensor, dict[str, float]]:
        return token_flow_loss(m, batch["tokens"], latents=None if encode is None else encode(batch["tokens"]))

    return train(model, loss, batch_fn, cfg, run, rt, resume=resume, desc="token-flow",
                 model_config=model.config_dict())
