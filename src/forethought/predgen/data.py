"""The examples a run sees, as a pure function of its task settings and seed: the train split (at most
``max_train_examples``, a seeded subset) and the eval split (at most ``max_eval_examples``); and the record of
them a saved model keeps (``predgen.json["data"]``), so ``predgen eval`` and ``predgen mine`` score a model on
exactly the examples it was held out from, never on a split drawn with another seed.

Two seeds: the task's split seed (``task.split_seed``) fixes the test examples (a single file's train/test split
and the ``max_eval_examples`` subset), so every run seed of an experiment is tested on the same examples; the
run's seed draws what may vary between runs (the validation examples carved from the training data and the
``max_train_examples`` subset)."""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Any

import torch

from forethought.core.errors import ForethoughtError
from forethought.core.runtime import mix_seed
from forethought.predgen.config import TaskConfig
from forethought.predgen.tasks import Example, TaskSpec, builtin_name, load_task


def subset(items: list[Example], n: int, seed: int) -> list[Example]:
    """At most ``n`` of ``items`` (0 = all): a seeded choice, kept in the original order."""
    if n <= 0 or n >= len(items):
        return items
    g = torch.Generator().manual_seed(seed)
    keep = sorted(torch.randperm(len(items), generator=g)[:n].tolist())
    return [items[i] for i in keep]


def split_seed(task: TaskConfig) -> int:
    """The seed of the task's fixed splits (a single file's train/test split, the eval subset): task.split_seed
    mixed for this purpose, never the run's seed."""
    return mix_seed("predgen-task-split", task.split_seed)


def eval_subset(items: list[Example], n: int, seed: int) -> list[Example]:
    """At most ``n`` evaluation examples drawn with ``seed`` (its own draw, apart from the train subset's)."""
    return subset(items, n, mix_seed("predgen-eval-subset", seed))


def carve(items: list[Example], n: int, seed: int, what: str) -> tuple[list[Example], list[Example]]:
    """(the rest, ``n`` examples drawn with ``seed``): a validation split cut from the training data, so that
    learning rates, adapters and steps are selected on examples the evaluation split does not hold. Both keep
    the original order; the draw is its own (apart from the train and eval subsets')."""
    if n <= 0:
        return items, []
    if n >= len(items):
        raise ForethoughtError(f"task.val_examples {n} leaves no training examples: {what} has {len(items)}")
    g = torch.Generator().manual_seed(mix_seed("predgen-val-split", seed))
    picked = set(torch.randperm(len(items), generator=g)[:n].tolist())
    return [x for i, x in enumerate(items) if i not in picked], [items[i] for i in sorted(picked)]


def load_splits(task: TaskConfig, seed: int) -> tuple[TaskSpec, list[Example], list[Example], list[Example]]:
    """(spec, the train examples a run with this seed trains on, its validation examples (carved from the
    train split first, so they do not depend on max_train_examples; empty when task.val_examples is 0), the
    eval examples (at most task.max_eval_examples, drawn with the split seed: the same for every run seed))."""
    opts = task.options(builtin_name(task.name) is not None)
    fixed = split_seed(task)
    spec, train_ex = load_task(task.name, "train", fixed, **opts)
    _, eval_ex = load_task(task.name, "eval", fixed, **opts)
    rest, val = carve(train_ex, task.val_examples, seed, f"the train split of '{task.name}'")
    return (spec, subset(rest, task.max_train_examples, seed), val,
            eval_subset(eval_ex, task.max_eval_examples, fixed))


def load_split(task: TaskConfig, seed: int) -> tuple[TaskSpec, list[Example], list[Example]]:
    """(spec, the train examples a run with this seed trains on, its eval examples)."""
    spec, train_ex, _, eval_ex = load_splits(task, seed)
    return spec, train_ex, eval_ex


@dataclass
class SplitRecord:
    """How a run drew its examples: the task settings and seed that reproduce them, the eval split's ids, and
    the train examples' count and digest (SST-2's 67k train ids would dwarf the rest of predgen.json)."""

    task: dict[str, Any]
    seed: int
    eval_ids: list[str]
    train_examples: int
    train_ids_sha256: str
    val_ids: list[str] = dataclasses.field(default_factory=list)  # carved from the train split (val_examples)


def _digest(examples: list[Example]) -> str:
    return hashlib.sha256("\n".join(ex.id for ex in examples).encode()).hexdigest()


def split_record(task: TaskConfig, seed: int, train: list[Example], evals: list[Example],
                 val: list[Example] | None = None) -> dict[str, Any]:
    return dataclasses.asdict(SplitRecord(dataclasses.asdict(task), seed, [ex.id for ex in evals], len(train),
                                          _digest(train), [ex.id for ex in val or []]))


def check_split(record: SplitRecord, split: str, examples: list[Example], where: str) -> None:
    """Raise unless ``examples`` are exactly the recorded split (same ids, same order)."""
    if split == "validation":
        if [ex.id for ex in examples] != record.val_ids:
            raise ForethoughtError(f"{where}: the validation split is not the one the run carved from its "
                                   "training data; its data changed since training")
    elif split == "eval":
        ids = [ex.id for ex in examples]
        if ids != record.eval_ids:
            differ = len(set(ids) ^ set(record.eval_ids))
            raise ForethoughtError(f"{where}: the task's eval split is not the one the model was held out from "
                                   f"({len(ids)} examples now, {len(record.eval_ids)} recorded, {differ} ids "
                                   "differ); its data changed since training")
    elif len(examples) != record.train_examples or _digest(examples) != record.train_ids_sha256:
        raise ForethoughtError(f"{where}: the task's train split is not the one the model was trained on "
                               f"({len(examples)} examples now, {record.train_examples} recorded); its data "
                               "changed since training")
