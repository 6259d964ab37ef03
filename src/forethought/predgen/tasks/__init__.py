"""Prediction tasks for PredGen: loading examples, rendering prompts, and the answer text a generator writes.

A task is a :class:`TaskSpec` (what kind of target, which label words, the prompt template) plus a list of
:class:`Example` per split. Two splits exist, ``train`` and ``eval``. The modules, by responsibility:

- ``spec``: the task spec and examples, template and label checks, the seeded train/eval split;
- ``builtin``: the built-in tasks, from the data root or the hub (see its docstring for the files and splits):
  their registry and loading, and the classification sets SST-2 and BoolQ; ``builtin_mc`` reads the multiple-
  choice ones, ARC (easy, challenge), PIQA, SIQA, HellaSwag, WinoGrande and OpenBookQA (``MULTIPLE_CHOICE``:
  answer ``letter``, ``text`` or ``name``); ``builtin_regression`` the regression ones, STS-B, SICK, WASSA-2017,
  CompLex LCP 2021 (single and multi-word), CLEAR and Humicroedit;
- ``readers``: CSV/TSV/JSONL (and hub) records and field values, with one-line errors;
- ``files``: tasks from a data file, and new inputs to predict on;
- ``prompts``: prompt rendering (token budget, truncation, chat template);
- ``answers``: answer text (label word / fixed-decimal number) and parsing it back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from forethought.core.errors import ForethoughtError
from forethought.predgen.tasks.answers import format_target, parse_target
from forethought.predgen.tasks.builtin import (
    MULTIPLE_CHOICE,
    WASSA_EMOTIONS,
    builtin_name,
    known_tasks,
    load_builtin,
    named_template,
)
from forethought.predgen.tasks.files import load_file_task, read_inputs
from forethought.predgen.tasks.prompts import render_prompt
from forethought.predgen.tasks.readers import FILE_EXTENSIONS
from forethought.predgen.tasks.spec import SPLITS, Example, TaskSpec, template_fields

__all__ = [
    "Example",
    "TaskSpec",
    "known_tasks",
    "builtin_name",
    "load_task",
    "render_prompt",
    "format_target",
    "parse_target",
    "read_inputs",
    "template_fields",
    "SPLITS",
    "MULTIPLE_CHOICE",
    "WASSA_EMOTIONS",
]


def answer_names(n: int) -> list[str]:
    """The words of the name answer format: one per class index, the same for every example (LLM-Adapters')."""
    return [f"answer{i + 1}" for i in range(n)]


def _named(loaded: tuple[TaskSpec, list[Example]], template: str | None) -> tuple[TaskSpec, list[Example]]:
    """A multiple-choice task in the name format: the label words become answer1..answerN (class order), and
    the prompt lists each choice after its name (``choices`` field: "answer1: <text>" lines), so a class means
    the same written word in every example. ``template``: the task's name-format prompt
    (``builtin.named_template``), None when the user gave their own."""
    spec, examples = loaded
    if spec.task_type != "classification" or not examples or not all(ex.options for ex in examples):
        raise ForethoughtError(f"task '{spec.name}': answer 'name' applies to the multiple-choice tasks "
                               f"({', '.join(MULTIPLE_CHOICE)}); use answer 'letter'")
    rename = dict(zip(spec.labels, answer_names(len(spec.labels)), strict=True))
    spec.named_from, spec.labels = list(spec.labels), [rename[k] for k in spec.labels]
    if template is not None:
        spec.template = template
        if "choices" not in template_fields(spec):
            raise ForethoughtError(f"task '{spec.name}': answer 'name' needs a template that lists the choices "
                                   "({choices}); give one with task.template")
    named = []
    for ex in examples:
        options = {rename[k]: text for k, text in (ex.options or {}).items()}
        fields = {**ex.fields, "choices": "\n".join(f"{k}: {t}" for k, t in options.items())}
        named.append(Example(fields, rename[str(ex.target)], ex.id, options))
    return spec, named


def load_task(
    name: str, split: Literal["train", "eval"], seed: int = 0, **generic_options: Any
) -> tuple[TaskSpec, list[Example]]:
    """Load one split of a task: a built-in name (see ``tasks.builtin``) or a data file.

    ``seed`` is the split seed: it draws the train/eval split of a single file (data files without
    ``eval_path``; built-in tasks with one file), never anything else.

    Built-in tasks accept ``template=...`` (replaces the default prompt template), ``answer`` (multiple choice:
    ``text`` or ``name``), ``labels`` (new label words) and ``splits="paper"`` (the paper's training set and fixed
    test set, ``tasks.builtin``).

    Data files (``.csv``/``.tsv``/``.jsonl``, read as ``tasks.readers`` describes). Options:

    - ``target_field`` (required): the column holding the target.
    - ``text_fields``: the columns shown to the model (default: every column except the target and id).
    - ``task_type``: ``"classification"`` (default) or ``"regression"``.
    - ``template``: a format string over the text fields (default: one ``"{field}: {value}"`` line per field,
      then ``"\\nAnswer:"``).
    - ``eval_path``: a second file for the eval split; without it the file is split by ``eval_fraction``
      (default 0.2) with ``seed``, deterministically and disjointly.
    - ``labels``: the label words in class order (default: the sorted distinct targets of the train part).
    - ``value_range``: regression clip range (default: min and max of the train targets).
    - ``long_field`` / ``truncate_side``: see :class:`TaskSpec`. ``id_field``: a column with example ids
      (default: ``<file stem>-<line>``). ``name``: the task name (default: the file stem).

    Loading the eval split checks its labels against the train split's and raises, listing any label the
    train split never has. Every problem a user can fix raises :class:`ForethoughtError` with one line that
    names the file, the line and the field.
    """
    if split not in SPLITS:
        raise ForethoughtError(f"unknown split '{split}'; expected one of {', '.join(SPLITS)}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ForethoughtError(f"seed must be an integer, got {seed!r}")
    key = str(name).strip()
    builtin_key = builtin_name(key)
    if builtin_key is not None:
        if generic_options.get("answer") == "name":
            own = generic_options.get("template") is not None
            return _named(load_builtin(builtin_key, split, seed, {**generic_options, "answer": "label"}),
                          None if own else named_template(builtin_key))
        return load_builtin(builtin_key, split, seed, generic_options)
    path = Path(key).expanduser()
    suffix = path.suffix.lower()
    if suffix in FILE_EXTENSIONS:
        if not path.is_file():
            raise ForethoughtError(f"task file not found: {path}")
        if generic_options.get("answer") == "name":  # a file with choices (choices_field), named as a built-in's
            return _named(load_file_task(path, split, seed, {**generic_options, "answer": None}), None)
        return load_file_task(path, split, seed, generic_options)
    if suffix or path.is_file():
        raise ForethoughtError(
            f"task file {path}: unsupported extension '{suffix or '(none)'}'; use one of {', '.join(FILE_EXTENSIONS)}"
        )
    raise ForethoughtError(
        f"unknown task '{key}'; known tasks: {', '.join(known_tasks())}; or give a path to a "
        f"{'/'.join(FILE_EXTENSIONS)} file"
    )
