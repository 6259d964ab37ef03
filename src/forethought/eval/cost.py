"""Sampling cost: FLOPs per document (measured and analytic), samples per second, and serial depth.

Conventions (state them next to every number):

- **Measured FLOPs**: ``torch.utils.flop_counter.FlopCounterMode`` over the sampling call only (no training, no
  judge), divided by the number of documents produced. It counts matrix multiplies as 2·m·n·k and fused
  attention as QKᵀ plus AV over the full T×T grid (no discount for causal masks). PyTorch's CPU fused attention
  kernel is not in its table, so we register the same formula for it: CPU and GPU counts agree.
  Element-wise work (norms, softmax, activations, sampling) is not counted.
- **Analytic FLOPs** (:func:`analytic_flops`): per network evaluation, 2·N·T for N matmul parameters (the
  non-embedding weights plus the LM head; an embedding lookup costs no FLOPs) over T positions, plus attention
  4·n_layer·d·T·C (QKᵀ and AV, 2 FLOPs per multiply-add, C = keys each position attends; C = T for a dense
  pass, matching the measured convention). The cost of one document is the sum over its network evaluations.
- **Serial depth**: the number of *sequential* network evaluations needed to produce a document — an
  autoregressive model without a cache needs L, a token flow with N Euler steps N, PSF prior steps + L/K.
  Evaluations that run side by side in one batched call count once. :func:`count_forward_calls` measures it as
  the number of top-level forward calls of a module during one sampling call.
- **Throughput** (:func:`samples_per_second`): wall clock per batch size, after an untimed warm-up call.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

from forethought.core.errors import ForethoughtError


def _cpu_sdpa_flop(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)  # same as torch's formula for GPU kernels


def _extra_formulas() -> dict:
    op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    return {op: _cpu_sdpa_flop} if op is not None else {}


def measure_flops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[int, Any]:
    """Run ``fn(*args, **kwargs)`` under FlopCounterMode (and no_grad); returns (total FLOPs, fn's result)."""
    with torch.no_grad(), FlopCounterMode(display=False, custom_mapping=_extra_formulas()) as counter:
        result = fn(*args, **kwargs)
    return int(counter.get_total_flops()), result


def flops_per_document(sample_fn: Callable[[int], Any], n_docs: int = 1) -> float:
    """Measured FLOPs of ``sample_fn(n_docs)`` (which samples ``n_docs`` documents) divided by ``n_docs``."""
    if n_docs <= 0:
        raise ForethoughtError(f"n_docs must be > 0, got {n_docs}")
    total, _ = measure_flops(sample_fn, n_docs)
    return total / n_docs


def analytic_flops(n_params: int, tokens: int, n_layer: int = 0, d_model: int = 0, context: int | None = None) -> int:
    """FLOPs of one network evaluation over ``tokens`` positions: 2·n_params·tokens + 4·n_layer·d_model·tokens·C.

    ``n_params``: weights that take part in matmuls (non-embedding + LM head). ``context`` C: keys attended per
    position (default ``tokens``: a dense pass). Leave n_layer/d_model at 0 to get the 2·N·T term alone.
    """
    c = tokens if context is None else context
    return 2 * n_params * tokens + 4 * n_layer * d_model * tokens * c


def analytic_cached_decode(n_params: int, n_layer: int, d_model: int, prefix: int, steps: int) -> int:
    """FLOPs of one KV-cached decode (:func:`analytic_flops` per call): a prefix call over ``prefix`` positions
    (dense grid; none when 0), then ``steps`` one-position calls attending prefix + j keys (j = 1..steps)."""
    total = analytic_flops(n_params, prefix, n_layer, d_model, prefix) if prefix else 0
    return total + sum(analytic_flops(n_params, 1, n_layer, d_model, prefix + j) for j in range(1, steps + 1))


def matmul_params(model: torch.nn.Module) -> int:
    """Parameters of the model's ``nn.Linear`` layers (each counted once even when tied): N in 2·N·T."""
    seen: set[int] = set()
    n = 0
    for m in model.modules():
        if isinstance(m, torch.nn.Linear) and id(m.weight) not in seen:
            seen.add(id(m.weight))
            n += m.weight.numel()
    return n


@contextlib.contextmanager
def count_forward_calls(module: torch.nn.Module) -> Iterator[list[int]]:
    """Count forward calls of ``module`` inside the block (yields a one-element list holding the count).

    Wrapped around one batched sampling call it measures the serial depth (see the module docstring).
    """
    count = [0]

    def hook(*_: Any) -> None:
        count[0] += 1

    handle = module.register_forward_pre_hook(hook)
    try:
        yield count
    finally:
        handle.remove()


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def samples_per_second(sample_fn: Callable[[int], Any], batch_sizes: Sequence[int], repeats: int = 1,
                       warmup: bool = True) -> dict[int, float]:
    """Documents per second of ``sample_fn(batch_size)`` for each batch size (wall clock, no_grad).

    One untimed warm-up call per batch size (allocator, kernel selection, lazy init) precedes ``repeats`` timed
    calls; the result is batch_size·repeats / total seconds.
    """
    out: dict[int, float] = {}
    with torch.no_grad():
        for b in batch_sizes:
            if warmup:
                sample_fn(b)
            _sync()
            t0 = time.perf_counter()
            for _ in range(repeats):
                sample_fn(b)
            _sync()
            out[int(b)] = b * repeats / max(time.perf_counter() - t0, 1e-9)
    return out
