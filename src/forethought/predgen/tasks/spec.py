"""What a task is: a :class:`TaskSpec` (target kind, label words, prompt template) and its :class:`Example` s;
the checks a spec makes against its examples, the seeded train/eval split of single-file data, and what a
built-in task adds (:class:`Builtin`: its files and readers)."""

from __future__ import annotations

import math
import random
import re
import string
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from forethought.core.errors import ForethoughtError

SPLITS = ("train", "eval")
TaskType = Literal["classification", "regression"]
DEFAULT_EVAL_FRACTION = 0.2


@dataclass
class Example:
    """One example: its text fields (filled into the task template), its target and a stable id.

    ``target`` is the label word (a string in ``TaskSpec.labels``) for classification, a float for regression.
    ``options``: multiple-choice tasks, each label word's choice text (ARC ``{"A": "a rock", ...}``), what the
    generator writes when the task answers with the text (``TaskSpec.answer == "text"``).
    """

    fields: dict[str, str]
    target: str | float
    id: str
    options: dict[str, str] | None = None


@dataclass
class TaskSpec:
    """What a task looks like to a generator.

    - ``labels``: for classification, the label *words* the generator writes (index = class id); empty for
      regression.
    - ``template``: a Python format string over the example fields (``str.format`` with field names, e.g.
      ``"Review: {sentence}\\nSentiment:"``). It ends right before the answer; the answer is generated after a
      single space (``prompt + " " + format_target(...)``).
    - ``value_range``: for regression, the (low, high) range answers are clipped to.
    - ``long_field``: the field shortened when a prompt exceeds its token budget (see ``render_prompt``).
    - ``truncate_side``: which end of ``long_field`` is cut: ``right`` (default) keeps its beginning, ``left``
      keeps its end.
    - ``answer``: ``label`` — the generator writes the label word (a multiple-choice task's letter); ``text`` —
      it writes the example's own choice text (``Example.options``), decoded under that example's choices.
    """

    name: str
    task_type: TaskType
    labels: list[str]
    template: str
    value_range: tuple[float, float] | None = None
    long_field: str | None = None
    truncate_side: Literal["left", "right"] = "right"
    answer: Literal["label", "text"] = "label"
    # a multiple-choice data file: the column holding each row's choices (new inputs to predict carry it too)
    choices_field: str | None = None
    # the name format (answer1..answerN): the label words the names replace, in class order (answerK is
    # named_from[K-1]), so a new input's choices are named as training named them
    named_from: list[str] | None = None

    def __post_init__(self) -> None:
        if self.task_type not in ("classification", "regression"):
            raise ForethoughtError(
                f"task '{self.name}': task_type must be 'classification' or 'regression', got '{self.task_type}'"
            )
        if self.truncate_side not in ("left", "right"):
            raise ForethoughtError(f"task '{self.name}': truncate_side must be 'left' or 'right'")
        if self.answer not in ("label", "text"):
            raise ForethoughtError(f"task '{self.name}': answer must be 'label' or 'text', got '{self.answer}'")
        if self.task_type == "classification" and len(set(self.labels)) != len(self.labels):
            raise ForethoughtError(f"task '{self.name}': duplicate label words in {self.labels}")
        if self.value_range is not None:
            low, high = (float(v) for v in self.value_range)
            if not (math.isfinite(low) and math.isfinite(high) and low <= high):
                raise ForethoughtError(f"task '{self.name}': value_range must be finite (low, high) with low <= high")
            self.value_range = (low, high)


@dataclass(frozen=True)
class PaperSplit:
    """A built-in task's splits as the paper ran it (``task.splits paper``), where they differ from its default
    ones: the files under the data root (the official training set, and the fixed test set), its local reader and
    its hub reader (same signatures as :class:`Builtin`'s)."""

    files: tuple[str, ...]
    read_local: Callable[[Path, str, int], list[Example]]
    read_hub: Callable[[Any, str, int], list[Example]] | None = None


@dataclass(frozen=True)
class Builtin:
    """A built-in task: its spec, the files it reads under the data root, its readers (local: (root, split,
    split seed); hub: (loaded dataset, split, split seed)) and its hub copy, if any."""

    spec: TaskSpec
    files: tuple[str, ...]  # what must exist under the data root
    read_local: Callable[[Path, str, int], list[Example]]
    hub_id: str | None = None
    hub_config: str | None = None
    read_hub: Callable[[Any, str, int], list[Example]] | None = None
    # answer 'name' (multiple-choice tasks): the prompt when the default one lists the choices by their own fields
    # (PIQA's sol1/sol2) rather than in the ``choices`` field that the name format rewrites; None = the default
    named_template: str | None = None
    # answer 'text': the prompt of the methods that write their answer, lm-eval-harness's for the task (the choices
    # are not listed: the model writes, and is scored on, the choice's text as a continuation); None = the default
    text_template: str | None = None
    # task.splits paper: the paper's training set and fixed test set; None = the default splits are the paper's
    paper: PaperSplit | None = None


def template_fields(spec: TaskSpec) -> list[str]:
    """The example fields a task's template reads, in order (``{a.b}`` and ``{a[0]}`` read field ``a``; a
    positional ``{}`` or ``{0}`` gives ``""`` or ``"0"``)."""
    try:
        names = [f for _, f, _, _ in string.Formatter().parse(spec.template) if f is not None]
    except ValueError as e:
        raise ForethoughtError(f"task '{spec.name}': bad template {spec.template!r}: {e}") from None
    return list(dict.fromkeys(re.split(r"[.\[]", n, maxsplit=1)[0] for n in names))


def check_template(spec: TaskSpec, example: Example) -> None:
    """Raise when the template names a field the examples do not have, or is not a valid format string."""
    for name in template_fields(spec):
        if name == "" or name.isdigit():
            raise ForethoughtError(
                f"task '{spec.name}': template {spec.template!r} has a positional field; name the fields"
            )
        if name not in example.fields:
            raise ForethoughtError(
                f"task '{spec.name}': template refers to field '{name}', which the examples do not have "
                f"(fields: {', '.join(example.fields)})"
            )


def check_labels(spec: TaskSpec, examples: list[Example], what: str) -> None:
    unseen = sorted({str(ex.target) for ex in examples} - set(spec.labels))
    if unseen:
        raise ForethoughtError(f"{what} has label(s) {', '.join(unseen)} outside the task's labels {spec.labels}")


def seeded_split(items: list[Any], split: str, seed: int, eval_fraction: float, what: str) -> list[Any]:
    """A deterministic, disjoint train/eval split: random.Random(seed) shuffles the indices, the first
    round(n * eval_fraction) of them (at least 1) are eval, the rest train; each part keeps the file order.
    ``seed`` is the task's split seed (``data.split_seed``), never a run's seed, so every run seed is tested on the
    same examples."""
    n = len(items)
    if n < 2:
        raise ForethoughtError(f"{what} has {n} example(s); a train/eval split needs at least 2")
    n_eval = min(n - 1, max(1, round(n * eval_fraction)))
    order = list(range(n))
    random.Random(seed).shuffle(order)
    chosen = set(order[:n_eval]) if split == "eval" else set(order[n_eval:])
    return [items[i] for i in sorted(chosen)]
