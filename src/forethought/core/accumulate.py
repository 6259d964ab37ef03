"""Gradient accumulation: one optimizer step's batch (this process's share) split into ``grad_accum`` equal
micro-batches, each run forward and backward in turn, with DDP / FSDP syncing gradients on the last one only
(accelerate's ``no_sync``), so that the step's gradient is the one of the whole batch.

What a loss function returns decides how the micro-batches combine:

* a scalar tensor is taken to be a mean over the micro-batch's rows (a per-sequence mean, or a mean over a fixed
  number of items per row). Micro-batches have equal sizes, so the mean of their means is the batch's mean:
  each backward gets ``loss / grad_accum``, and DDP's average over processes does the rest. Free.
* an :class:`AveragedLoss` holds sums and counts: averages over items whose number changes from batch to batch
  (answer tokens), and optionally a ``combine`` of several such averages (PredGen's WDAL = L_W · L_D, not
  linear in either). The step's loss is ``combine`` of the averages over the whole global batch (every
  micro-batch, every process). Its gradient is ``Σ_j ∂combine/∂mean_j · ∇sum_j / count_j`` with the partial
  derivatives taken at the global averages, so those are needed before the first backward: the other
  micro-batches are first run without gradients (RNG streams forked, so training draws the same numbers), the
  sums and counts are added up (and all-reduced across processes), and every micro-batch then backpropagates
  ``Σ_j weight_j · sum_j``. Exact for any split, at the price of one extra forward pass without gradients per
  micro-batch after the first (none when ``grad_accum`` is 1; several processes add one small all-reduce). A
  loss that is linear in a single token average could instead be normalised after the fact; one rule for both
  keeps the trainer simple.

A loss that uses its batch's statistics (PSF's state normalisation, free-bits clamps of batch means) sees each
micro-batch's, as BatchNorm does under accumulation; and the statistics pass runs ``loss_fn`` once more, so a
loss whose forward has side effects (running estimates) should return a plain mean.

Why not accelerate's ``accumulate``: it divides every loss by a fixed count set when the Accelerator is built
(once per command, while a PSF recipe trains stages with different settings); the normalisation here depends on
what the loss returns, so the trainer calls ``no_sync`` itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from forethought.core.errors import ForethoughtError


@dataclass
class AveragedLoss:
    """A loss made of averages over a batch's items: ``sums[name]`` (differentiable) over ``counts[name]`` items,
    combined by ``combine(means) -> loss`` (default: the one average itself)."""

    sums: dict[str, torch.Tensor]
    counts: dict[str, torch.Tensor | int | float]
    combine: Callable[[dict[str, torch.Tensor]], torch.Tensor] | None = None

    def means(self) -> dict[str, torch.Tensor]:
        return {k: self.sums[k] / torch.as_tensor(self.counts[k], dtype=self.sums[k].dtype,
                                                  device=self.sums[k].device).clamp_min(1) for k in self.sums}

    def value(self) -> torch.Tensor:
        """The loss of this batch alone."""
        return combined(self, self.means())


def combined(loss: AveragedLoss, means: dict[str, torch.Tensor]) -> torch.Tensor:
    if loss.combine is not None:
        return loss.combine(means)
    if len(means) != 1:
        raise ValueError(f"an AveragedLoss of several averages ({', '.join(means)}) needs a combine function")
    return next(iter(means.values()))


class Rows(list):
    """A batch field that is a list with one item per row (objects a tensor cannot hold, e.g. each example's
    own answer trie): :func:`split_batch` slices it with the rows, where a plain list is a structure of fields
    and is split item by item."""


def split_batch(batch: Any, part: int, parts: int, what: str = "processes") -> Any:
    """Part ``part`` of ``parts`` equal slices of a batch: tensors split on dim 0, :class:`Rows` sliced as
    rows, dicts / tuples / lists recursively, anything else (a step number, a probability) kept whole."""
    if parts == 1:
        return batch
    if isinstance(batch, (torch.Tensor, Rows)):
        n = len(batch)
        if n % parts:
            raise ForethoughtError(f"a batch of {n} rows is not divisible by the {parts} {what}")
        per = n // parts
        return batch[part * per:(part + 1) * per] if isinstance(batch, torch.Tensor) else \
            Rows(batch[part * per:(part + 1) * per])
    if isinstance(batch, dict):
        return {k: split_batch(v, part, parts, what) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(split_batch(v, part, parts, what) for v in batch)
    return batch


@dataclass
class StepLoss:
    """The step's loss on this process (for logging; an AveragedLoss's is already the global one) and the loss
    function's metrics, averaged over the micro-batches."""

    loss: torch.Tensor
    metrics: dict[str, Any]


def accumulate_gradients(model: torch.nn.Module, loss_fn: Callable[[torch.nn.Module, Any], tuple[Any, dict]],
                         micro: list[Any], acc: Any, check: Callable[[torch.Tensor], None] | None = None) -> StepLoss:
    """Forward and backward every micro-batch of one optimizer step (gradients add up in ``.grad``; zero them
    before). ``acc``: the accelerate Accelerator (``backward``, ``no_sync``, ``autocast``, ``reduce``). ``check``
    sees each loss before its backward (the trainer stops on a non-finite one)."""
    k, world = len(micro), acc.num_processes
    weights: dict[str, torch.Tensor] | None = None
    step_loss: torch.Tensor | None = None
    means: dict[str, torch.Tensor] = {}
    losses, metrics = [], []
    for i, batch in enumerate(micro):
        with contextlib.nullcontext() if i == k - 1 else acc.no_sync(model):
            with acc.autocast():
                out, m = loss_fn(model, batch)
            metrics.append(m)
            if isinstance(out, AveragedLoss):
                if weights is None:
                    step_loss, weights, means = global_weights(out, model, loss_fn, micro[1:], acc)
                    if check is not None:
                        check(step_loss)
                # × world: DDP averages the processes' gradients, and each sum is already divided by the
                # global count
                loss = world * sum(weights[n] * s for n, s in out.sums.items())
            else:
                if check is not None:
                    check(out)
                losses.append(out.detach())
                loss = out / k
            acc.backward(loss)
    if step_loss is None:
        step_loss = torch.stack(losses).mean()
    # several averages: each one's global value is a metric under its own name (PredGen's l_w and l_d)
    return StepLoss(step_loss, {**average_metrics(metrics), **(means if len(means) > 1 else {})})


def global_weights(first: AveragedLoss, model: torch.nn.Module, loss_fn: Callable, rest: list[Any], acc: Any
                   ) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The step's loss over the global batch, the weight of each sum (∂loss/∂mean_j / count_j, at the global
    means) and the global means, from the first micro-batch's sums and the others' run without gradients."""
    parts = [first]
    if rest:
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        with torch.no_grad(), torch.random.fork_rng(devices=devices), acc.autocast():
            parts += [loss_fn(model, b)[0] for b in rest]
    names = list(first.sums)
    dev = first.sums[names[0]].device
    totals = torch.stack([torch.stack([p.sums[n].detach().float().reshape(()) for n in names])
                          for p in parts]).sum(0)
    counts = torch.stack([torch.stack([torch.as_tensor(p.counts[n], dtype=torch.float32, device=dev).reshape(())
                                       for n in names]) for p in parts]).sum(0)
    if acc.num_processes > 1:
        both = acc.reduce(torch.cat([totals, counts]), reduction="sum")
        totals, counts = both[:len(names)], both[len(names):]
    counts = counts.clamp_min(1)
    means = {n: (totals[j] / counts[j]).requires_grad_() for j, n in enumerate(names)}
    with torch.enable_grad():
        value = combined(first, means)
        grads = torch.autograd.grad(value, [means[n] for n in names], allow_unused=True)
    weights = {n: (torch.zeros((), device=dev) if g is None else g.detach()) / counts[j]
               for j, (n, g) in enumerate(zip(names, grads, strict=True))}
    return value.detach(), weights, {n: means[n].detach() for n in names}


def average_metrics(metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """Each metric's mean over the micro-batches that report it (numbers or tensors: no device sync here)."""
    out = {}
    for key in dict.fromkeys(k for m in metrics for k in m):
        vals = [m[key] for m in metrics if key in m]
        out[key] = sum(vals) / len(vals)
    return out
