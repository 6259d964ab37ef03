"""Token sampling shared by every decoder here: temperature and nucleus (top-p) in float64.

Probabilities are formed in float64 because low-precision sampling is a known source of fake
generative-perplexity gains: rounding in fp32 Gumbel / softmax draws acts like a lower temperature, which lowers
gen-PPL and entropy together (Zheng et al. 2024, "Masked diffusion models are secretly time-agnostic masked
models and exploit inaccurate categorical sampling"). A seeded ``torch.Generator`` makes every draw
reproducible.
"""

from __future__ import annotations

import torch


def top_p_probs(logits: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0) -> torch.Tensor:
    """(..., V) logits -> (..., V) float64 probabilities after temperature and nucleus truncation.

    The nucleus is the smallest set of most likely tokens whose mass reaches ``top_p`` (the most likely token
    is always kept); the kept probabilities are renormalised."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 to form probabilities, got {temperature} (sample_tokens reads "
                         "temperature 0 as greedy argmax)")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    probs = torch.softmax(logits.double() / temperature, dim=-1)  # (..., V) float64
    if top_p >= 1.0:
        return probs
    sorted_p, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_p.cumsum(-1) - sorted_p  # mass of the strictly more likely tokens
    keep_sorted = mass_before < top_p  # first token always kept (mass_before = 0)
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    probs = probs * keep
    return probs / probs.sum(-1, keepdim=True)


def sample_tokens(logits: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """(..., V) logits -> (...) int64 token ids. ``temperature == 0`` is greedy (argmax)."""
    if temperature == 0:
        return logits.argmax(-1)
    probs = top_p_probs(logits, temperature, top_p)
    flat = probs.reshape(-1, probs.shape[-1])
    if generator is not None and flat.device != generator.device:
        flat = flat.to(generator.device)  # multinomial needs the generator's device
    ids = torch.multinomial(flat, 1, generator=generator).squeeze(-1)
    return ids.to(logits.device).reshape(probs.shape[:-1])


def device_generator(seed: int, device: torch.device | str) -> torch.Generator:
    """A generator living on ``device``: sampling on a GPU then never copies probabilities to the CPU."""
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def randn(shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device | str) -> torch.Tensor:
    """Standard normal noise drawn with ``generator`` (on its device) and placed on ``device``."""
    where = generator.device if generator is not None else device
    return torch.randn(shape, generator=generator, device=where).to(device)
