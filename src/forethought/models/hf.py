"""Hugging Face causal LMs, loaded by alias, hub id or folder.

``smollm2-135m`` names SmolLM2-135M-Instruct dequantised from a 4-bit (Q4_1) GGUF; the alias is resolved by
:func:`forethought.core.env.resolve_model_path` (converted once, then cached as a safetensors folder).
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from forethought.core.env import SMOLLM2_ALIAS, hub_reachable, record_model, resolve_model_path
from forethought.core.errors import ForethoughtError, first_line


def load_causal_lm(
    name_or_path: str, dtype: torch.dtype = torch.float32, trust_remote_code: bool = False
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer by alias, hub id or local folder; the model is returned in eval mode.

    The tokenizer gets a pad token (its eos) when it has none, so batches can be padded. When the hub cannot be
    reached only local files (the HF cache) are tried, so an unknown id fails at once instead of retrying for a
    minute.
    """
    path = resolve_model_path(name_or_path)
    local = Path(path).expanduser()
    is_local = local.is_dir()
    if not is_local and (local.exists() or path.startswith((".", "/", "~"))):
        raise ForethoughtError(f"model '{name_or_path}': {local} is not a model folder")
    online = is_local or hub_reachable()
    source = str(local) if is_local else path
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            source, trust_remote_code=trust_remote_code, local_files_only=not online
        )
        model = AutoModelForCausalLM.from_pretrained(
            source, dtype=dtype, trust_remote_code=trust_remote_code, local_files_only=not online
        )
    except (OSError, ValueError, ImportError) as e:
        reason = first_line(e)
        where = "" if online else " (hub unreachable: only the local HF cache was searched)"
        raise ForethoughtError(
            f"cannot load model '{name_or_path}'{where}: {reason}. Give a hub id, a folder with config.json, "
            f"or '{SMOLLM2_ALIAS}' (offline SmolLM2)"
        ) from e
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    model.eval()
    record_model(name_or_path, source)  # env.json names the weights the name resolved to (alias -> folder, hash)
    return model, tokenizer
