"""What several renderers share: how to describe the offline SmolLM2 weights."""

from __future__ import annotations

import re

# Every table that used the offline `smollm2-135m` says which weights those are.
SMOLLM2 = "SmolLM2-135M-Instruct dequantised from its 4-bit Q4_1 GGUF (the offline `smollm2-135m`)"


# The hub's full-precision weights of the same model (their own name, never the alias's fallback).
SMOLLM2_HUB = "SmolLM2-135M-Instruct, the hub's full-precision weights (`HuggingFaceTB/SmolLM2-135M-Instruct`)"


def smollm2(name: str) -> str:
    """'smollm2-135m + LoRA ...' (or its long alias 'smollm2-135m-q4', or the hub id) -> the full description of
    those weights + ' + LoRA ...'; any other name unchanged."""
    name = name.strip()
    name = re.sub(r"^smollm2-135m(?:-q4)?(?![\w.-])", SMOLLM2, name, flags=re.IGNORECASE)
    return re.sub(r"^HuggingFaceTB/SmolLM2-135M-Instruct(?![\w.-])", SMOLLM2_HUB, name, flags=re.IGNORECASE)
