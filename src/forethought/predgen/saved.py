"""A trained model loaded back for ``predgen eval | predict | mine``: its folder, checked ``predgen.json``, the
model on its device, its encoder, and the examples of its task's splits exactly as its run drew them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from forethought.core.config import load_config
from forethought.core.errors import ForethoughtError
from forethought.core.runtime import pick_device
from forethought.predgen.config import PredGenConfig, PromptConfig, TaskConfig
from forethought.predgen.data import SplitRecord, check_split, eval_subset, load_splits, subset
from forethought.predgen.methods import Encoder
from forethought.predgen.model import PredGenModel, check_layer, from_record, load_model, read_meta
from forethought.predgen.registry import method_named
from forethought.predgen.tasks import Example, TaskSpec


def model_folder(path: str) -> Path:
    """The saved model's folder: ``<run>/model`` when given the run folder, else ``path`` itself."""
    if not path:
        raise ForethoughtError("give the trained model: --model <run folder>")
    p = Path(path).expanduser()
    return p / "model" if (p / "model").is_dir() else p


@dataclass
class Saved:
    folder: Path
    meta: dict[str, Any]
    model: PredGenModel
    enc: Encoder
    device: torch.device


def load_saved(path: str, device: str, decode: bool | None = None) -> Saved:
    """Load a saved model onto ``device``, every setting checked before the weights are read. ``decode``: build
    the encoder's answer trie (default: when the method decodes, i.e. not for the Predictor)."""
    folder = model_folder(path)
    meta = read_meta(folder)
    dev = pick_device(device)
    where = folder / "predgen.json"
    spec = from_record(TaskSpec, meta["task_spec"], f"{where} task_spec")
    prompt = from_record(PromptConfig, meta["prompt"], f"{where} prompt")
    model, tok = load_model(folder, meta)
    check_layer(meta["layer"], model.lm)
    enc = Encoder(spec, tok, prompt, decode=method_named(meta["method"]).decodes if decode is None else decode)
    return Saved(folder, meta, model.to(dev), enc, dev)


def saved_task(saved: Saved) -> tuple[TaskConfig, int, SplitRecord | None]:
    """The run's task settings, seed and split record. Models saved before runs recorded their split fall back to
    the run's config.yaml (task settings and seed, without the id check); without either it is an error."""
    where = saved.folder / "predgen.json"
    if "data" in saved.meta:
        record = from_record(SplitRecord, saved.meta["data"], f"{where} data")
        return from_record(TaskConfig, record.task, f"{where} data.task"), record.seed, record
    run_cfg = saved.folder.parent / "config.yaml"
    if not run_cfg.is_file():
        raise ForethoughtError(f"{where} has no record of its split (saved by an older version) and {run_cfg} is "
                               "missing: cannot tell which examples the model was trained on")
    cfg = load_config(PredGenConfig, run_cfg)
    print(f"note: {where} has no record of its split (saved by an older version); using the task settings and "
          f"seed {cfg.run.seed} of {run_cfg}, without checking the example ids")
    return cfg.task, cfg.run.seed, None


def saved_examples(saved: Saved, split: str, max_examples: int, seed: int | None = None) -> list[Example]:
    """One split of the saved model's task, exactly as its run drew it (checked against the record; the eval split
    is the run's own eval examples, its ``max_eval_examples`` subset included), then at most ``max_examples`` of
    it: a subset seeded with ``seed`` (default: the run's seed)."""
    task, run_seed, record = saved_task(saved)
    _, train_ex, val_ex, eval_ex = load_splits(task, run_seed)
    examples = {"train": train_ex, "validation": val_ex, "eval": eval_ex}[split]
    if not examples:
        raise ForethoughtError(f"{saved.folder}: the run has no {split} split (train it with --task.val_examples)")
    if record is not None:
        check_split(record, split, examples, str(saved.folder))
    seed = run_seed if seed is None else seed
    if split != "eval":
        return subset(examples, max_examples, seed)
    return eval_subset(examples, max_examples, seed)
