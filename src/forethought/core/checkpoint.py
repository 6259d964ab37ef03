"""Checkpoints: ``<run>/step-NNNNNN/`` with ``model.safetensors``, ``trainer_state.pt`` and ``manifest.json``
(and ``ema.safetensors``, the moving average of the trained weights, when training keeps one).

The folder is written under a temporary name and renamed when complete, and the manifest records each file's
size and SHA-256, so a killed run never leaves a half checkpoint and a truncated or corrupted one is detected
with a clear message instead of being loaded. A save that replaces a folder of the same step renames the old one
aside (``step-NNNNNN.replaced``) before the new one moves in and deletes it only after, and old folders leave the
listing by a rename before they are deleted: a run killed at any point of a save still finds a complete
checkpoint (the aside one counts while its step has no other). Weights are safetensors; the trainer state (optimizer,
scheduler, step, RNG) is loaded with ``weights_only=True`` (no arbitrary unpickling).

EMA weights (``TrainConfig.ema_decay``): ``ema.safetensors`` holds the average of every trained parameter, beside
``model.safetensors`` (the raw weights, which a resumed run or a warm start continues from). Loading with
``ema=True`` (what :func:`load_pretrained`, the rebuild that sampling and evaluation use, does) lays the averages
over the raw weights; buffers and untrained parameters come from the raw file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
from safetensors.torch import load_file, save_file

from forethought.core.config import from_mapping, validate_all
from forethought.core.errors import ForethoughtError
from forethought.core.io import atomic_write_json

T = TypeVar("T")
M = TypeVar("M", bound=torch.nn.Module)
_STEP_DIR = re.compile(r"^step-(\d{6,})(\.replaced)?$")
_SCRATCH = re.compile(r"^\.(tmp-step|trash)-")  # what a killed save leaves behind: never a checkpoint
EMA_FILE = "ema.safetensors"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _state_dict_for_save(model: torch.nn.Module, trainable_only: bool,
                         weights: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    # safetensors refuses shared storage (tied embeddings): save each tensor once, contiguous.
    out: dict[str, torch.Tensor] = {}
    seen: dict[int, str] = {}
    if weights is None:
        weights = ({k: p for k, p in model.named_parameters() if p.requires_grad} if trainable_only
                   else model.state_dict())
    for k, v in weights.items():
        ptr = v.data_ptr()
        if ptr in seen and v.numel() > 0:
            continue
        seen[ptr] = k
        out[k] = v.detach().contiguous().cpu()
    return out


def save_checkpoint(run_dir: Path, step: int, model: torch.nn.Module, trainer_state: dict[str, Any],
                    model_config: dict[str, Any] | None = None, keep: int = 2, trainable_only: bool = False,
                    weights: dict[str, torch.Tensor] | None = None,
                    ema: dict[str, torch.Tensor] | None = None) -> Path:
    """Write ``step-NNNNNN`` atomically and keep only the newest ``keep`` checkpoints. ``trainable_only``
    saves just the parameters being trained (LoRA adapters, a head), not a frozen base model. ``weights``: what to
    save when the caller gathered it already (FSDP: every process takes part in that), instead of ``model``'s.
    ``ema``: the moving averages of the trained parameters (name -> tensor), saved as ``ema.safetensors``."""
    run_dir = Path(run_dir)
    final = run_dir / f"step-{step:06d}"
    tmp = run_dir / f".tmp-step-{step:06d}-{os.getpid()}"
    for left in run_dir.iterdir() if run_dir.is_dir() else []:
        if _SCRATCH.match(left.name):  # one writer per run folder: these are a killed save's leftovers
            shutil.rmtree(left, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(_state_dict_for_save(model, trainable_only, weights), str(tmp / "model.safetensors"))
    if ema is not None:
        save_file({k: v.detach().contiguous().cpu() for k, v in ema.items()}, str(tmp / EMA_FILE))
    torch.save(trainer_state, tmp / "trainer_state.pt")
    if model_config is not None:
        (tmp / "config.json").write_text(json.dumps(model_config, indent=2))
    files = {p.name: {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in sorted(tmp.iterdir())}
    atomic_write_json(tmp / "manifest.json", {"step": step, "files": files, "trainable_only": trainable_only})
    # Replace without a moment where neither the old nor the new folder is there: the old one steps aside
    # (still listed while its step has no other) and is deleted only once the new one is in place.
    aside = run_dir / f"{final.name}.replaced"
    if final.exists():
        _discard(aside)  # a stale one from a save killed while deleting it; ``final`` is complete
        os.replace(final, aside)
    os.replace(tmp, final)
    _discard(aside)
    for old in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        _discard(old)
    return final


def _discard(folder: Path) -> None:
    """Delete a folder so that it leaves the checkpoint listing at once (a rename), however far the deletion gets."""
    if folder.exists():
        trash = folder.with_name(f".trash-{folder.name}-{os.getpid()}")
        os.replace(folder, trash)
        shutil.rmtree(trash, ignore_errors=True)


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoint folders (those with a manifest), oldest first, one per step: ``step-NNNNNN``, or the
    ``step-NNNNNN.replaced`` a save killed mid-replacement left when no ``step-NNNNNN`` is there."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found: dict[int, Path] = {}
    for p in sorted(run_dir.iterdir(), key=lambda p: p.name.endswith(".replaced")):  # plain names first
        m = _STEP_DIR.match(p.name)
        if m and (p / "manifest.json").is_file():
            found.setdefault(int(m.group(1)), p)
    return [found[k] for k in sorted(found)]


def verify_checkpoint(ckpt: Path) -> dict[str, Any]:
    """Check every file against the manifest; raise ForethoughtError naming the first bad file."""
    ckpt = Path(ckpt)
    man_path = ckpt / "manifest.json"
    try:
        manifest = json.loads(man_path.read_text())
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError):
        raise ForethoughtError(f"checkpoint {ckpt} is incomplete or corrupt: unreadable manifest.json") from None
    if not isinstance(files, dict):
        raise ForethoughtError(f"checkpoint {ckpt} is corrupt: manifest.json has no file table")
    for name, meta in files.items():
        if (not isinstance(meta, dict) or not isinstance(meta.get("bytes"), int)
                or not isinstance(meta.get("sha256"), str)):
            raise ForethoughtError(f"checkpoint {ckpt} is corrupt: manifest.json entry '{name}' lacks its bytes or "
                                   "sha256")
        p = ckpt / name
        if "/" in name or name.startswith(".") or not p.is_file():
            raise ForethoughtError(f"checkpoint {ckpt} is incomplete: {name} is missing")
        size = p.stat().st_size
        if size != meta["bytes"]:
            raise ForethoughtError(
                f"checkpoint {ckpt} is truncated or corrupt: {name} has {size} bytes, expected {meta['bytes']}")
        if _sha256(p) != meta["sha256"]:
            raise ForethoughtError(f"checkpoint {ckpt} is corrupt: {name} fails its SHA-256 check")
    return manifest


def load_checkpoint(ckpt: Path, model: torch.nn.Module, strict: bool = True,
                    manifest: dict[str, Any] | None = None, ema: bool = False) -> dict[str, Any]:
    """Verify, load weights into ``model`` (in place) and return the trainer state. ``manifest``: what
    :func:`verify_checkpoint` returned for this checkpoint, when the caller verified it already (hashing a large
    checkpoint twice costs seconds). ``ema``: lay the checkpoint's EMA weights (:func:`read_ema`) over the raw
    ones when it holds them (a checkpoint without them loads its raw weights)."""
    ckpt = Path(ckpt)
    manifest = verify_checkpoint(ckpt) if manifest is None else manifest
    strict = strict and not manifest.get("trainable_only", False)
    weights = _read_safetensors(ckpt, "model.safetensors")
    load_weights(model, weights, strict=strict, where=str(ckpt))
    averaged = read_ema(ckpt, manifest) if ema else None
    if averaged is not None:  # after the raw weights, so a tied tensor ends up with its average
        load_weights(model, averaged, strict=False, where=f"{ckpt}/{EMA_FILE}")
    state_path = ckpt / "trainer_state.pt"
    if not state_path.is_file():
        return {}
    try:
        return torch.load(state_path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ForethoughtError(f"checkpoint {ckpt} is corrupt: cannot read trainer_state.pt ({e})") from None


def _read_safetensors(ckpt: Path, name: str) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(ckpt / name))
    except Exception as e:  # safetensors raises several types for bad headers
        raise ForethoughtError(f"checkpoint {ckpt} is corrupt: cannot read {name} ({e})") from None


def read_ema(ckpt: Path, manifest: dict[str, Any] | None = None) -> dict[str, torch.Tensor] | None:
    """A checkpoint's EMA weights (name -> tensor, the trained parameters' moving averages), or None when its
    training kept none; checked against the manifest (``manifest``: the caller's, when it verified already)."""
    ckpt = Path(ckpt)
    manifest = verify_checkpoint(ckpt) if manifest is None else manifest
    if EMA_FILE not in manifest.get("files", {}):
        return None
    return _read_safetensors(ckpt, EMA_FILE)


def load_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor], strict: bool = True,
                 where: str = "") -> None:
    """Load a (possibly de-duplicated) state dict; tied tensors saved once are restored by the tie."""
    own = model.state_dict()
    missing = [k for k in own if k not in weights]
    # A key is allowed to be missing only when it shares storage with one that is present (tied weights).
    ptrs = {own[k].data_ptr() for k in own if k in weights}
    really_missing = [k for k in missing if own[k].data_ptr() not in ptrs]
    unexpected = [k for k in weights if k not in own]
    if unexpected or (strict and really_missing):
        raise ForethoughtError(
            f"checkpoint {where} does not match the model: missing {really_missing[:5]}, unexpected {unexpected[:5]}")
    bad = [k for k in weights if k in own and own[k].shape != weights[k].shape]
    if bad:
        k = bad[0]
        raise ForethoughtError(
            f"checkpoint {where} does not match the model: {k} has shape {tuple(weights[k].shape)}, "
            f"model expects {tuple(own[k].shape)}")
    model.load_state_dict(weights, strict=False)


def latest_checkpoint(run_dir: Path) -> Path | None:
    ckpts = list_checkpoints(run_dir)
    return ckpts[-1] if ckpts else None


# ---- versioned model records: one save / load path per model kind ----------------------------------------------
# A checkpoint's config.json is the record a model kind writes through model_record() and reads back through
# load_pretrained(): its type, this layout's version and the model's settings, so a checkpoint rebuilds its model
# without the run's config, and a file from another version is a clear error instead of a shape mismatch.

FORMAT_VERSION = 1  # config.json's layout; raise it when a record's meaning changes (no shims for older ones)


def model_record(model_type: str, config: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """What a model kind saves as its checkpoint's ``config.json``: ``model_type``, ``format_version``, the
    model's config section (``config``: a dataclass as a dict) and the further values its builder needs."""
    return {"model_type": model_type, "format_version": FORMAT_VERSION, "config": config, **extra}


def check_format_version(found: Any, where: str, fix: str = "retrain it with this version") -> None:
    """One line when a saved record's ``format_version`` is not this version's (older, newer or missing)."""
    if found == FORMAT_VERSION:
        return
    if isinstance(found, int) and not isinstance(found, bool) and found > FORMAT_VERSION:
        raise ForethoughtError(f"{where} has format_version {found}, newer than this version of forethought reads "
                               f"({FORMAT_VERSION}): upgrade forethought")
    what = f"format_version {found}" if found is not None else "no format_version"
    raise ForethoughtError(f"{where} has {what}, an older format than this version reads ({FORMAT_VERSION}): {fix}")


def read_model_record(ckpt: Path, model_type: str, manifest: dict[str, Any] | None = None
                      ) -> tuple[dict[str, Any], dict[str, Any]]:
    """A checkpoint's record (config.json), after every file was checked against the manifest: (record,
    manifest). Its type and format version are checked; ``config`` must be a mapping."""
    ckpt = Path(ckpt)
    manifest = verify_checkpoint(ckpt) if manifest is None else manifest
    path = ckpt / "config.json"
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        raise ForethoughtError(f"checkpoint {ckpt} has an unreadable config.json") from None
    if not isinstance(record, dict):
        raise ForethoughtError(f"{path} is corrupt: not a JSON object")
    if record.get("model_type") != model_type:
        raise ForethoughtError(f"{ckpt} is not a {model_type} checkpoint (model_type {record.get('model_type')!r})")
    check_format_version(record.get("format_version"), str(path))
    if not isinstance(record.get("config"), dict):
        raise ForethoughtError(f"{path} is corrupt: no 'config' section")
    return record, manifest


def config_from_record(cls: type[T], data: Any, where: str) -> T:
    """A config section from a saved record through the config loader (every key checked and coerced by its
    type, every ``validate()`` run); a problem is one line naming ``where``."""
    try:
        cfg = from_mapping(cls, data)
        validate_all(cfg)
    except ForethoughtError as e:
        raise ForethoughtError(f"{where}: {e}") from None
    return cfg


def load_pretrained(ckpt: Path, model_type: str, build: Callable[[dict[str, Any]], M],
                    ema: bool = True) -> tuple[M, dict[str, Any]]:
    """The one way a model kind is rebuilt from its checkpoint: the checked record (:func:`read_model_record`),
    ``build(record)`` (the kind's constructor, reading its config through :func:`config_from_record`), the
    verified weights loaded into it — its EMA weights when its training kept them (``ema=False``: the raw ones),
    since those are the weights a trained model samples and is evaluated with. Returns (model, record); the model
    is on the CPU in training mode."""
    record, manifest = read_model_record(ckpt, model_type)
    model = build(record)
    load_checkpoint(ckpt, model, manifest=manifest, ema=ema)
    return model, record


def verified_weights(ckpt: Path) -> dict[str, torch.Tensor]:
    """A checkpoint's weights as a state dict, checked against its manifest first (a warm start that takes only
    some tensors reads them this way, never with a bare ``load_file``)."""
    verify_checkpoint(ckpt)
    return _read_safetensors(Path(ckpt), "model.safetensors")
