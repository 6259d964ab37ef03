"""PredGen's losses and scheduled sampling as pure functions (the PredGen paper's training objective).

Writer-Director Alignment Loss, with L_W the generation cross-entropy (writer) and L_D the task loss of the
adapter (director):

* paper form ``max(L_W², L_D²) · exp(−|log L_W − log L_D|)``. For L_W, L_D > 0 it equals ``L_W · L_D`` exactly
  (if L_W ≥ L_D: L_W² · L_D / L_W), so it is computed in that product form, which is finite and smooth as either
  loss approaches 0. Its gradient is ``L_D·∇L_W + L_W·∇L_D``: the smaller loss weights the larger one's gradient,
  so the writer's gradient fades as the director's loss goes to 0 (and vice versa).
* reference-code form ``a + b + m²·exp(−|a − b|)`` with ``a = log(1+L_W)``, ``b = log(1+L_D)``,
  ``m = max(L_W, L_D) + 1``, which equals ``log(1+L_W) + log(1+L_D) + (1+L_W)(1+L_D)``; computed so.

Scheduled sampling: the probability of feeding the model's own token instead of the gold one grows with the
training step (linear, exponential or inverse-sigmoid schedules, Bengio et al. 2015), decided per token (the
paper's form), per sequence, or once per batch (the reference code's coin). Which inputs are replaced is decided
here (:func:`replace_mask`); which token replaces them (the one the model generates from its own previous
inputs, or a one-pass approximation) is ``methods.scheduled_inputs``'s.
"""

from __future__ import annotations

import math
from typing import Literal

import torch


def wdal_paper(l_w: torch.Tensor, l_d: torch.Tensor) -> torch.Tensor:
    """max(L_W², L_D²)·exp(−|log L_W − log L_D|), computed as the identical, stable L_W·L_D."""
    return l_w * l_d


def wdal_paper_literal(l_w: torch.Tensor, l_d: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """The formula as printed (logs guarded by eps); only for testing the identity."""
    lw, ld = l_w.clamp_min(eps), l_d.clamp_min(eps)
    return torch.maximum(lw**2, ld**2) * torch.exp(-(lw.log() - ld.log()).abs())


def wdal_reference(l_w: torch.Tensor, l_d: torch.Tensor) -> torch.Tensor:
    """The reference code's form, log(1+L_W) + log(1+L_D) + (1+L_W)(1+L_D) (identical to its printed form)."""
    return torch.log1p(l_w) + torch.log1p(l_d) + (1 + l_w) * (1 + l_d)


def wdal_reference_literal(l_w: torch.Tensor, l_d: torch.Tensor) -> torch.Tensor:
    a, b = torch.log1p(l_w), torch.log1p(l_d)
    m = torch.maximum(l_w, l_d) + 1
    return a + b + m * m * torch.exp(-(a - b).abs())


Schedule = Literal["linear", "exponential", "inverse_sigmoid", "constant"]


def sampling_probability(step: int, total_steps: int, schedule: Schedule = "linear", start: float = 0.0,
                         end: float = 1.0, k: float | None = None) -> float:
    """Probability of using the model's own token at ``step``.

    linear: start -> end over total_steps (the reference code: 0 -> 1). exponential: teacher forcing decays as
    k^step (k defaults so that it reaches 1% at the end). inverse_sigmoid: teacher forcing k/(k + exp(step/k))
    (k defaults to total_steps/10). Both map to [start, end]."""
    if total_steps <= 0:
        return end
    frac = min(max(step / total_steps, 0.0), 1.0)
    if schedule == "constant":
        return end
    if schedule == "linear":
        return start + (end - start) * frac
    if schedule == "exponential":
        kk = k if k is not None else 0.01 ** (1.0 / total_steps)
        teacher = kk**step
    elif schedule == "inverse_sigmoid":
        kk = k if k is not None else max(total_steps / 10.0, 1.0)
        teacher = kk / (kk + math.exp(min(step / kk, 700.0)))
    else:
        raise ValueError(f"unknown scheduled-sampling schedule '{schedule}'")
    return start + (end - start) * (1.0 - teacher)


Per = Literal["token", "sequence", "batch"]


def replace_mask(answer_mask: torch.Tensor, p: float, per: Per = "token", uniform: torch.Tensor | None = None,
                 batch_coin: float | None = None) -> torch.Tensor:
    """(B, T) bool: which answer-token inputs scheduled sampling replaces with the model's own token.
    answer_mask (B, T) bool marks the inputs that may be replaced; each is replaced with probability p, by one coin
    per token (``uniform`` (B, >= max(T, 1)) in [0, 1): column t is token t's coin), one per sequence (column 0)
    or one for the whole batch (``batch_coin`` in [0, 1), the reference code's: every input or none)."""
    B, T = answer_mask.shape
    if p <= 0:
        return torch.zeros(B, T, dtype=torch.bool, device=answer_mask.device)
    if per == "batch":
        if batch_coin is None:
            raise ValueError("a per-batch coin needs batch_coin")
        return answer_mask.bool() & (batch_coin < p)
    if uniform is None:
        raise ValueError(f"per-{per} coins need their uniforms")
    coins = uniform[:, :T] if per == "token" else uniform[:, :1].expand(B, T)
    return (coins.to(answer_mask.device) < p) & answer_mask.bool()


def mix_tokens(gold: torch.Tensor, predicted: torch.Tensor, answer_mask: torch.Tensor, p: float,
               per: Per = "token", uniform: torch.Tensor | None = None,
               batch_coin: float | None = None) -> torch.Tensor:
    """Decoder inputs with the replaced inputs (:func:`replace_mask`) taken from ``predicted``. gold, predicted:
    (B, T) ids, where ``predicted[:, t]`` is the model's token for position t."""
    if p <= 0:
        return gold.clone()
    return torch.where(replace_mask(answer_mask, p, per, uniform, batch_coin), predicted, gold)


def sample_by_uniform(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """Categorical draws by the inverse CDF: probs (..., V) (rows sum to 1), uniform (...) in [0, 1) -> (...)
    indices, the first whose cumulative probability exceeds the uniform (a zero-probability index never is)."""
    cdf = probs.cumsum(-1)
    idx = (cdf <= uniform.unsqueeze(-1) * cdf[..., -1:]).sum(-1)
    return idx.clamp_max(probs.shape[-1] - 1)
