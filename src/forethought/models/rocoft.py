"""RoCoFT (Kowsher et al., 2024, *RoCoFT: Efficient Finetuning of Large Language Models with Row-Column Updates*,
arXiv:2410.10075), the PEFT method of the PredGen reference runs (``leader.PEFT(model, method='column', rank=3)``):
only the first ``rank`` rows (or columns) of each targeted linear layer's weight train; everything else is frozen.

Each targeted ``nn.Linear`` becomes a :class:`RowColumnLinear`: the frozen layer plus a trainable delta of shape
(rank, in) for rows or (out, rank) for columns, started at zero, so the wrapped model starts as the base model and
``W + delta`` (the delta in its rows / columns) is the merged weight. The output is the base layer's plus the
delta's contribution, so no full-size weight is rebuilt per step and only the delta holds gradient state.

Differences from the reference code (``leader.py``), which replaces every ``nn.Linear`` it meets: the output layer
(``lm_head``) is not targeted (as peft's ``all-linear``), and normalisation weights and biases stay frozen (the
reference freezes only linear, embedding and LayerNorm weights, so a Llama's RMSNorm weights and every bias also
train there).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn as nn
import torch.nn.functional as F

from forethought.core.errors import ForethoughtError

Side = Literal["row", "column"]
SIDES = ("row", "column")


class RowColumnLinear(nn.Module):
    """A frozen ``nn.Linear`` whose first ``rank`` rows (output features) or columns (input features) train."""

    def __init__(self, base: nn.Linear, side: Side, rank: int):
        super().__init__()
        if side not in SIDES:
            raise ForethoughtError(f"RoCoFT side must be 'row' or 'column', got {side!r}")
        if rank < 1:
            raise ForethoughtError(f"RoCoFT rank must be at least 1, got {rank}")
        self.base, self.side = base, side
        for p in base.parameters():
            p.requires_grad_(False)
        out_f, in_f = base.weight.shape
        self.rank = min(rank, out_f if side == "row" else in_f)
        shape = (self.rank, in_f) if side == "row" else (out_f, self.rank)
        # fp32 like peft's adapters: a bf16 delta would lose small updates against the base weight's magnitude
        self.delta = nn.Parameter(torch.zeros(shape, device=base.weight.device, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., in) -> (..., out): the base layer's output plus the delta's rows / columns."""
        y = self.base(x)
        delta = self.delta.to(x.dtype)
        if self.side == "row":  # rows 0..rank-1 of W: output features 0..rank-1
            return y + F.pad(F.linear(x, delta), (0, y.shape[-1] - self.rank))
        return y + F.linear(x[..., : self.rank], delta)  # columns 0..rank-1: input features 0..rank-1

    def merged_weight(self) -> torch.Tensor:
        """W + delta, the weight this layer computes with (out, in)."""
        w = self.base.weight.detach().clone()
        d = self.delta.detach().to(w.dtype)
        if self.side == "row":
            w[: self.rank] += d
        else:
            w[:, : self.rank] += d
        return w


def _targets(model: nn.Module, target_modules: str) -> list[str]:
    """The linear layers to wrap: ``all-linear`` = every ``nn.Linear`` but the output layer, else those whose
    name ends in one of the comma-separated names."""
    out_layer = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    wanted = None if target_modules == "all-linear" else [t.strip() for t in target_modules.split(",") if t.strip()]
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and m is not out_layer
             and (wanted is None or n.split(".")[-1] in wanted)]
    if not names:
        raise ForethoughtError(f"RoCoFT: no linear layer matches target_modules {target_modules!r}")
    return names


def apply_rocoft(model: nn.Module, side: Side, rank: int, target_modules: str = "all-linear") -> nn.Module:
    """Freeze ``model`` and wrap its targeted linear layers (in place); returns the model."""
    for p in model.parameters():
        p.requires_grad_(False)
    for name in _targets(model, target_modules):
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, RowColumnLinear(getattr(parent, child), side, rank))
    return model


def rocoft_layers(model: nn.Module) -> dict[str, RowColumnLinear]:
    return {n: m for n, m in model.named_modules() if isinstance(m, RowColumnLinear)}


def rocoft_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The trained deltas, by layer name (what a saved RoCoFT adapter holds)."""
    return {f"{n}.delta": m.delta.detach().contiguous().cpu() for n, m in rocoft_layers(model).items()}


def load_rocoft_state(model: nn.Module, state: dict[str, torch.Tensor], where: Any) -> None:
    """Put saved deltas into a model wrapped the same way; a one-line error when they do not match."""
    layers = rocoft_layers(model)
    expected = {f"{n}.delta": m.delta for n, m in layers.items()}
    if set(state) != set(expected):
        raise ForethoughtError(f"{where}: the saved RoCoFT deltas ({len(state)}) do not match the model's "
                               f"{len(expected)} wrapped layers")
    with torch.no_grad():
        for key, param in expected.items():
            if tuple(state[key].shape) != tuple(param.shape):
                raise ForethoughtError(f"{where}: {key} has shape {tuple(state[key].shape)}, the model's is "
                                       f"{tuple(param.shape)}")
            param.copy_(state[key].to(param.dtype))


def merge_rocoft(model: nn.Module) -> nn.Module:
    """Replace every wrapped layer by a plain ``nn.Linear`` holding W + delta (in place); returns the model."""
    for name, layer in rocoft_layers(model).items():
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        merged = layer.base
        with torch.no_grad():
            merged.weight.copy_(layer.merged_weight())
        setattr(parent, child, merged)
    return model
