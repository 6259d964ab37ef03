"""Token-level continuous flow baseline in the style of ELF: rectified flow over all L token embeddings — the
comparison the Predictive State Flow paper draws, a flow over every token rather than over K block states.

- **Space**: the token table of a trained autoregressive model, frozen. Normalised by subtracting the mean
  embedding over the vocabulary (AR tables share a large common direction, which would make all tokens look
  alike) and rescaling every row to norm √D, so each coordinate has unit RMS like the N(0, I) noise, and the
  nearest embedding is simply the largest dot product.
- **Flow**: the same conventions and pure functions as the PSF prior (forethought.psf.prior), so the two
  flows differ only in what they model: ``x_t = (1 - t)·noise + t·x`` (t = 1 is data), logit-normal time
  (mu = 0, sigma = 1 by default), x-prediction with the velocity loss ``(x̂ - x_t)/(1 - t)`` against
  ``(x - x_t)/(1 - t)``, 1 - t clamped at 0.05; Euler from t = 0 to 1 in ``steps`` uniform steps (default 32).
- **Denoiser**: our GPT with full attention over the L positions. Its input per position is
  ``[x_t, self-conditioning x̂, time features]`` through the linear input embedding (``input_dim`` = D + D +
  ``time_dim``): time enters as fixed sinusoidal features of t concatenated to every position, so no change
  to the GPT is needed. Output (``head``): ``logits`` (default) — an LM head over the vocabulary, and
  x̂ = softmax(logits)·E (the expected normalised embedding, so the prediction stays on the data's span);
  or ``embedding`` — a linear regression head giving x̂ directly.
- **Self-conditioning** (Chen et al., Analog Bits): in training, for a random half of the examples a first
  no-grad pass with a zero self-conditioning input gives x̂, which is fed (detached) to the second pass; the
  other half gets zeros. At sampling every step is fed the previous step's x̂ (zeros at the first step).
- **Rounding** the final x̂ to tokens: ``lm_head`` (argmax of the last step's logits; needs ``head=logits``)
  or ``nearest`` (nearest normalised embedding). With ``temperature > 0`` tokens are instead sampled from
  softmax(scores / temperature) in float64; for ``nearest`` the scores are dot products with the table, whose
  scale is about D, so its temperatures are not comparable with lm_head's. This last-step temperature barely
  moves the samples' entropy: at t -> 1 the denoiser sees its tokens almost clean and its final logits are
  nearly one-hot (issue 14: unigram entropy 4.70-4.75 over the whole temperature sweep on WikiText-2).
- **Entropy knobs** of :func:`sample_token_flow`, acting at *every* Euler step, where the randomness is:
  ``step_temperature`` τ (``head=logits``): x̂ = softmax(logits / τ)·E at every step (also the self-conditioning
  input). τ > 1 flattens the denoiser's distribution, so x̂ shrinks towards the vocabulary's mean embedding and
  the trajectory settles on frequent tokens: **lower** unigram entropy; τ < 1 sharpens it: slightly higher.
  ``noise`` η >= 0: SDE sampling, Euler-Maruyama on ``dx = [v - η·ε̂] dt + sqrt(2η(1 - t)) dW`` with
  ε̂ = (x_t - t·x̂)/(1 - t) the implied noise. The drift correction is (g²/2)·score for g² = 2η(1 - t) (the
  score of x_t is -ε̂/(1 - t)), so every η has the ODE's marginals for an exact denoiser; for a trained one,
  more noise lowers the entropy. Keep η/steps at most about 1/8: each step shrinks x_t by η/steps and adds fresh
  noise, and near η/steps = 1/2 the fresh noise replaces the state, so the entropy rises again.
  Measured on the tiny planted-corpus flow of tests/test_token_flow.py (8 Euler steps, 64 samples): τ 0.5 / 1 /
  1.5 / 2 gave 2.670 / 2.626 / 2.574 / 2.495 nats, η 0 / 0.5 / 1 2.626 / 2.605 / 2.559 (η 2 already rose back),
  the last-step temperature 0.5 / 1 2.625 / 2.626.
- **Cost**: ``steps`` evaluations of one full L-position pass per document; serial depth = ``steps``.
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


class TokenFlow(nn.Module):
    """x-predictor over (B, L, D) noisy normalised token embeddings, with the frozen table as a buffer."""

    def __init__(self, cfg: TokenFlowConfig, table: torch.Tensor):
        super().__init__()
        cfg.validate()
        self.config = cfg
        vocab, dim = table.shape
        self.vocab_size, self.dim = vocab, dim
        self.register_buffer("table", normalise_table(table))  # (V, D) frozen, saved with the weights
        in_dim = dim * (2 if cfg.self_cond else 1) + cfg.time_dim
        self.net = GPT(GPTConfig(vocab_size=vocab, n_positions=cfg.seq_len, n_embd=cfg.n_embd, n_layer=cfg.n_layer,
                                 n_head=cfg.n_head, attention="full", input_dim=in_dim,
                                 output_dim=dim if cfg.head == "embedding" else 0))

    def num_params(self) -> int:
        """Trained parameters (the frozen embedding table is a buffer and not counted)."""
        return sum(p.numel() for p in self.parameters())

    def forward(self, x_t: torch.Tensor, t: torch.Tensor, self_cond: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x_t (B, L, D), t (B,), self_cond (B, L, D) or None (= zeros) -> x̂ (B, L, D), logits (B, L, V) | None."""
        B, L, _ = x_t.shape
        parts = [x_t]
        if self.config.self_cond:
            parts.append(torch.zeros_like(x_t) if self_cond is None else self_cond)
        parts.append(time_embedding(t, self.config.time_dim)[:, None].expand(B, L, -1))  # (B, L, time_dim)
        out = self.net(torch.cat(parts, dim=-1))  # (B, L, V) or (B, L, D)
        if self.config.head == "embedding":
            return out, None
        x_hat = F.softmax(out.float(), dim=-1) @ self.table  # (B, L, D): expected embedding
        return x_hat, out

    def config_dict(self) -> dict[str, Any]:
        """Its checkpoints' record (:func:`load_token_flow` reads it back): the config and the table's size."""
        return model_record(MODEL_TYPE, asdict(self.config), vocab_size=self.vocab_size, dim=self.dim)


def token_flow_loss(model: nn.Module, tokens: torch.Tensor, generator: torch.Generator | None = None
                    ) -> tuple[torch.Tensor, dict[str, float]]:
    """Training loss on a (B, L) batch of token ids; returns (loss, metrics) as the trainer expects.

    Randomness (noise, time, self-conditioning coin) comes from ``generator`` when given, else the global RNG
    (which the trainer saves and restores, so resumed runs stay exact).
    """
    core = unwrap(model)
    cfg = core.config
    dev = tokens.device
    x = core.table[tokens]  # (B, L, D)
    B = x.shape[0]
    noise = torch.randn(x.shape, generator=generator).to(dev)
    t = logit_normal_t(B, cfg.time_mu, cfg.time_sigma, generator=generator, device=dev)  # (B,)
    x_t = interpolate(x, noise, t)
    sc = None
    if cfg.self_cond and cfg.self_cond_prob > 0:
        use = (torch.rand(B, generator=generator) < cfg.self_cond_prob).to(dev)  # (B,)
        if bool(use.any()):
            with torch.no_grad():  # the estimate is an input, not a path for gradients
                first, _ = model(x_t, t, None)
            sc = torch.where(use[:, None, None], first.detach(), torch.zeros_like(first))
    x_hat, logits = model(x_t, t, sc)
    flow = flow_loss(x_hat, x, x_t, t, cfg.min_gap)
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
    if model.config.rounding == "lm_head":
        if logits is None:
            raise ForethoughtError("rounding=lm_head needs a logits head")
        scores = logits
    else:
        scores = x_hat @ model.table.T  # (B, L, V): equal row norms, so the largest is the nearest
    return sample_tokens(scores, temperature, 1.0, generator)  # float64: no fp32 sampling artefacts


def check_knobs(model: TokenFlow, step_temperature: float, noise: float) -> None:
    """The entropy knobs' ranges (see the module docstring)."""
    if not (math.isfinite(step_temperature) and step_temperature > 0):
        raise ForethoughtError(f"step_temperature must be a number > 0, got {step_temperature}")
    if step_temperature != 1.0 and model.config.head != "logits":
        raise ForethoughtError("step_temperature needs a token flow with head=logits (x̂ = softmax(logits/τ)·E)")
    if not (math.isfinite(noise) and noise >= 0):
        raise ForethoughtError(f"noise must be a number >= 0, got {noise}")


@torch.no_grad()
def sample_token_flow(model: TokenFlow, n: int, steps: int | None = None, generator: torch.Generator | None = None,
                      temperature: float = 0.0, batch_size: int | None = None, *, step_temperature: float = 1.0,
                      noise: float = 0.0) -> torch.Tensor:
    """(n, L) token ids: Euler (or, with ``noise`` > 0, Euler-Maruyama) from noise (t = 0) to data (t = 1) in
    ``steps`` network passes, then rounding at ``temperature`` (0 = argmax).

    ``step_temperature`` and ``noise`` are the entropy knobs (module docstring); 1 and 0 are the plain ODE.
    Noise is drawn on ``generator``'s device (a CPU generator gives the same samples on every device).
    ``batch_size`` splits n into sequential batches (memory only; each document still costs ``steps`` passes).
    """
    model.eval()
    steps = steps or model.config.steps
    if steps <= 0 or n <= 0:
        raise ForethoughtError(f"sampling needs n > 0 and steps > 0, got n={n}, steps={steps}")
    check_knobs(model, step_temperature, noise)
    dev = model.table.device
    dt = 1.0 / steps
    out = []
    for start in range(0, n, batch_size or n):
        b = min(batch_size or n, n - start)
        shape = (b, model.config.seq_len, model.dim)
        x = randn(shape, generator, dev)  # (b, L, D) at t = 0
        x_hat, logits = x, None
        for i in range(steps):
            t = i / steps
            x_hat, logits = model(x, torch.full((b,), t, device=dev), x_hat if (i and model.config.self_cond) else None)
            if step_temperature != 1.0:
                x_hat = F.softmax(logits.float() / step_temperature, dim=-1) @ model.table  # (b, L, D)
            if noise and i < steps - 1:  # the last step lands on x̂, where no noise is left
                eps_hat = (x - t * x_hat) / (1 - t)  # the noise that x_t implies
                x = euler_step(x, x_hat, t, dt) - dt * noise * eps_hat
                x = x + math.sqrt(2 * noise * (1 - t) * dt) * randn(shape, generator, dev)
            else:
                x = euler_step(x, x_hat, t, dt)  # the last step lands on x̂ exactly
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
        return TokenFlow(config_from_record(TokenFlowConfig, record["config"], where), torch.zeros(*size))

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
                     seed: int = 0, resume: str | None = None) -> dict[str, Any]:
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

    return train_token_flow_batches(model, batch_fn, cfg, run, rt, resume=resume)


def train_token_flow_batches(model: TokenFlow, batch_fn: Callable[[int], dict], cfg: TrainConfig, run: Run,
                             rt: Runtime, *, resume: str | None = None) -> dict[str, Any]:
    """Train with the shared trainer on ``batch_fn(step)["tokens"]`` (B, L), e.g. a recipe run's own batches
    (forethought.psf.recipe.recipe_batches); returns the trainer's summary."""
    from forethought.core.trainer import train  # the training loop, only when training

    return train(model, lambda m, batch: token_flow_loss(m, batch["tokens"]), batch_fn, cfg, run, rt,
                 resume=resume, desc="token-flow", model_config=model.config_dict())
