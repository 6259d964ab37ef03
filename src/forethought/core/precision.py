"""Training precision: the names a config uses (``fp32 | bf16 | fp16``), what they mean to accelerate, and the dtype
an HF base model is loaded in (``base_dtype auto | fp32 | bf16 | fp16``). Imports no torch until a dtype is asked
for, so configs check these settings when they load, before the heavy libraries do."""

from __future__ import annotations

from typing import TYPE_CHECKING

from forethought.core.errors import ForethoughtError

if TYPE_CHECKING:
    import torch

PRECISIONS = ("fp32", "bf16", "fp16")
BASE_DTYPES = ("auto", *PRECISIONS)
TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # names of torch's dtypes
# accelerate's mixed_precision names: bf16 / fp16 autocast the forward pass (fp16 adds a gradient scaler)
MIXED_PRECISION = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}


def mixed_precision(precision: str) -> str:
    """accelerate's ``mixed_precision`` for one of :data:`PRECISIONS`."""
    if precision not in MIXED_PRECISION:
        raise ForethoughtError(f"unknown precision '{precision}' (choose from {', '.join(PRECISIONS)})")
    return MIXED_PRECISION[precision]


def base_dtype_name(choice: str, precision: str, trains_base: bool) -> str:
    """The precision name (one of :data:`PRECISIONS`) to load an HF base model in; torch-free, so a config can
    check the choice when it loads. ``auto``: a frozen base (only adapters train) is stored in the training
    precision — its weights need no fp32 master copy, so bf16 halves them — while a base whose own weights train
    stays fp32, which mixed precision autocasts (AdamW on fp32 weights, as accelerate expects).
    ``trains_base``: the base's own weights are trained (full fine-tuning)."""
    if choice not in BASE_DTYPES:
        raise ForethoughtError(f"unknown base_dtype '{choice}' (choose from {', '.join(BASE_DTYPES)})")
    mixed_precision(precision)
    if choice == "auto":
        return "fp32" if trains_base else precision
    if choice == "fp16" and trains_base:
        raise ForethoughtError("base_dtype fp16 with the base's own weights trained: fp16 weights cannot be "
                               "trained with a gradient scaler; use base_dtype fp32 (with run.precision fp16) or bf16")
    return choice


def base_dtype(choice: str, precision: str, trains_base: bool) -> torch.dtype:
    """The torch dtype of :func:`base_dtype_name`."""
    import torch

    return getattr(torch, TORCH_DTYPES[base_dtype_name(choice, precision, trains_base)])
