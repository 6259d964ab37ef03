"""What several renderers share: how to describe the offline SmolLM2 weights."""

from __future__ import annotations

import re

# Every table that used the offline `smollm2-135m` says which weights those are.
SMOLLM2 = "SmolLM2-135M-Instruct dequantised from its 4-bit Q4_1 GGUF (the offline `smollm2-135m`)"


def smollm2(name: str) -> str:
    """'smollm2-135m + LoRA ...' -> the full description of those weights + ' + LoRA ...'."""
    return re.sub(r"^smollm2-135m", SMOLLM2, name.strip(), flags=re.IGNORECASE)
