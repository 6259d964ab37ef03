"""Training precision: the names a config uses (``fp32 | bf16 | fp16``), what they mean to accelerate, and the dtype
an HF base model is loaded in (``base_dtype auto | fp32 | bf16 | fp16``)."""

from __future__ import annotations

import torch

from forethought.core.errors import ForethoughtError

PRECISIONS = ("fp32", "bf16", "fp16")
BASE_DTYPES = ("auto", *PRECISIONS)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# accelerate's mixed_precision names: bf16 / fp16 autocast the forward pass (fp16 adds a gradient scaler)
MIXED_PRECISION = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}


def mixed_precision(precision: str) -> str:
    """accelerate's ``mixed_precision`` for one of :data:`PRECISIONS`."""
    if precision not in MIXED_PRECISION:
        raise ForethoughtError(f"unknown precision '{precision}' (choose from {', '.join(PRECISIONS)})")
    return MIXED_PRECISION[precision]


def base_dtype(choice: str, precision: str, trains_base: bool) -> torch.dtype:
    """The dtype to load an HF base model in. ``auto``: a frozen base (only adapters train) is stored in the
    training precision — its weights need no fp32 master copy, so bf16 halves them — while a base whose own
    weights train stays fp32, which mixed precision autocasts (AdamW on fp32 weights, as accelerate expects).
    ``trains_base``: the base's own weights are trained (full fine-tuning)."""
    if choice not in BASE_DTYPES:
        raise ForethoughtError(f"unknown base_dtype '{choice}' (choose from {', '.join(BASE_DTYPES)})")
    mixed_precision(precision)
    if choice == "auto":
        return torch.float32 if trains_base else DTYPES[precision]
    if choice == "fp16" and trains_base:
        raise ForethoughtError("base_dtype fp16 with the base's own weights trained: fp16 weights cannot be "
                               "trained with a gradient scaler; use base_dtype fp32 (with run.precision fp16) or bf16")
    return DTYPES[choice]
