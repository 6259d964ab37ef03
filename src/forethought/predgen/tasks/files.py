"""Tasks from a data file (``.csv``/``.tsv``/``.jsonl``): examples, the seeded or file-given eval split, the label
words or value range and a default template; and new inputs to predict on.

Multiple choice (``choices_field``): each row's choices are a JSON list (lettered A, B, ... in order) or a JSON
object from label to text (``{"A": "a marsh", "B": "a tundra"}``; in a CSV/TSV cell, the JSON as text), any
number of them per row. The target is one of the row's labels; with a list, also a 0-based index (a JSON integer
or digits). The label words are the labels in order of first appearance (or ``labels``); the prompt gets a
``choices`` field (one ``"A. text"`` line per choice) and the example its choices' texts, so ``answer`` ``text``
and ``name`` work as for the built-in multiple-choice tasks.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from forethought.core.errors import ForethoughtError
from forethought.predgen.tasks.readers import FILE_EXTENSIONS, as_number, as_text, need, read_records
from forethought.predgen.tasks.spec import (
    DEFAULT_EVAL_FRACTION,
    Example,
    TaskSpec,
    check_template,
    seeded_split,
    template_fields,
)

FILE_OPTIONS = (
    "target_field", "text_fields", "task_type", "template", "eval_path", "eval_fraction", "labels",
    "value_range", "long_field", "truncate_side", "id_field", "name", "choices_field", "answer",
)  # fmt: skip
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def parse_choices(value: Any, where: str, field: str) -> tuple[list[str], list[str]]:
    """A row's choices -> (labels, texts): a JSON list is lettered A, B, ...; an object keeps its labels."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            value = None
    if isinstance(value, list) and 2 <= len(value) <= len(_LETTERS):
        labels, texts = list(_LETTERS[: len(value)]), value
    elif isinstance(value, dict) and len(value) >= 2:
        labels, texts = [as_text(k).strip() for k in value], list(value.values())
    else:
        raise ForethoughtError(f"{where}: '{field}' must be a JSON list of 2-{len(_LETTERS)} choice texts or an "
                               f"object from label to text, got {str(value)[:60]!r}")
    texts = [as_text(t).strip() for t in texts]
    if any(not k for k in labels) or any(not t for t in texts):
        raise ForethoughtError(f"{where}: '{field}' has an empty label or choice text")
    return labels, texts


def _choice_example(fields: dict[str, str], choices: Any, target: Any, where: str, opts: dict[str, Any],
                    example_id: str) -> Example:
    """A multiple-choice row: ``choices`` parsed, the target resolved to one of its labels (a label, or with a
    list a 0-based index), the ``choices`` prompt field and the label-independent choice set."""
    from forethought.predgen.tasks.builtin_mc import distinct_choices

    labels, texts = parse_choices(choices, where, opts["choices_field"])
    key = as_text(target).strip()
    lettered = labels == list(_LETTERS[: len(labels)])  # a list's choices, or an object keyed A, B, ...
    if key not in labels and lettered and key.isdigit() and int(key) < len(labels):
        key = labels[int(key)]  # a 0-based index
    if key not in labels:
        raise ForethoughtError(f"{where}: target {target!r} is not one of the row's choices ({', '.join(labels)}"
                               + (", or a 0-based index" if lettered else "") + ")")
    options, gold = distinct_choices(labels, texts, key)
    listed = "\n".join(f"{k}. {t}" for k, t in zip(labels, texts, strict=True))
    return Example({**fields, "choices": listed}, gold, example_id, options)
_UNSAFE_FIELD = re.compile(r"[.\[\]{}:!]")


def _file_examples(path: Path, opts: dict[str, Any]) -> list[Example]:
    header, records = read_records(path)
    target_field = opts.get("target_field")
    present = header if header is not None else list(records[0][1])
    if not target_field:
        raise ForethoughtError(
            f"task file {path}: give target_field=... (fields in the first row: {', '.join(present)})"
        )
    id_field = opts.get("id_field")
    choices_field = opts.get("choices_field")
    text_fields = opts.get("text_fields")
    if text_fields is None:
        text_fields = [f for f in present if f not in (target_field, id_field, choices_field)]
    elif isinstance(text_fields, str):
        text_fields = [text_fields]
    text_fields = [str(f) for f in text_fields]
    if not text_fields:
        raise ForethoughtError(
            f"task file {path}: no text fields (give text_fields=[...]; fields: {', '.join(present)})"
        )
    if header is not None:  # a column the header lacks is missing from every row: say so once, about the header
        absent = [f for f in (target_field, *text_fields, id_field, choices_field) if f and f not in header]
        if absent:
            raise ForethoughtError(
                f"{path}: no column {', '.join(repr(f) for f in absent)} in the header row ({', '.join(header)}); "
                "the first line must name the columns"
            )
    regression = opts.get("task_type", "classification") == "regression"
    stem = path.stem
    examples = []
    for line, record in records:
        where = f"{path} line {line}"
        fields = {f: as_text(need(record, f, where)) for f in text_fields}
        raw = need(record, target_field, where)
        example_id = as_text(need(record, id_field, where)) if id_field else f"{stem}-{line}"
        if choices_field:
            examples.append(_choice_example(fields, need(record, choices_field, where), raw, where, opts, example_id))
            continue
        if regression:
            target: str | float = as_number(raw, where, target_field)
        else:
            target = as_text(raw)
            if not target:
                raise ForethoughtError(f"{where}: empty target in field '{target_field}'")
        examples.append(Example(fields, target, example_id))
    return examples


def load_file_task(path: Path, split: str, seed: int, opts: dict[str, Any]) -> tuple[TaskSpec, list[Example]]:
    unknown = sorted(set(opts) - set(FILE_OPTIONS))
    if unknown:
        raise ForethoughtError(
            f"task file {path}: unknown option(s) {', '.join(unknown)}; accepted: {', '.join(FILE_OPTIONS)}"
        )
    task_type = opts.get("task_type", "classification")
    if task_type not in ("classification", "regression"):
        raise ForethoughtError(
            f"task file {path}: task_type must be 'classification' or 'regression', got {task_type!r}"
        )
    answer = opts.get("answer") or "label"
    if opts.get("choices_field"):
        if task_type != "classification":
            raise ForethoughtError(f"task file {path}: choices_field makes a multiple-choice task; task_type must "
                                   f"be classification, got {task_type!r}")
        if answer not in ("label", "text"):
            raise ForethoughtError(f"task file {path}: answer must be 'label' or 'text', got {answer!r}")
    elif answer != "label":
        raise ForethoughtError(f"task file {path}: answer '{answer}' needs choices_field (the rows' choices)")
    eval_path = opts.get("eval_path")
    eval_fraction = opts.get("eval_fraction", DEFAULT_EVAL_FRACTION)
    if not isinstance(eval_fraction, (int, float)) or isinstance(eval_fraction, bool) or not 0 < eval_fraction < 1:
        raise ForethoughtError(f"task file {path}: eval_fraction must be between 0 and 1, got {eval_fraction!r}")

    examples = _file_examples(path, opts)
    if eval_path is None:
        train = seeded_split(examples, "train", seed, float(eval_fraction), str(path))
        evals = (seeded_split(examples, "eval", seed, float(eval_fraction), str(path))
                 if split == "eval" or opts.get("choices_field") else [])
    else:
        eval_file = Path(eval_path).expanduser()
        if eval_file.suffix.lower() not in FILE_EXTENSIONS:
            raise ForethoughtError(
                f"eval file {eval_file}: unsupported extension '{eval_file.suffix or '(none)'}'; "
                f"use one of {', '.join(FILE_EXTENSIONS)}"
            )
        if not eval_file.is_file():
            raise ForethoughtError(f"eval file not found: {eval_file}")
        train = examples
        # a multiple-choice file's labels are those of both files, so both splits get the same label words
        evals = _file_examples(eval_file, opts) if split == "eval" or opts.get("choices_field") else []
    where_eval = str(eval_path) if eval_path is not None else f"the eval part of {path}"

    name = str(opts.get("name") or path.stem)
    text_fields = [f for f in train[0].fields if not (opts.get("choices_field") and f == "choices")]
    labels: list[str] = []
    value_range: tuple[float, float] | None = None
    if task_type == "classification" and opts.get("choices_field"):
        seen = list(dict.fromkeys(k for ex in (*train, *evals) for k in (ex.options or {})))  # first appearance
        labels = [str(x) for x in opts["labels"]] if opts.get("labels") is not None else seen
        stray = [k for k in seen if k not in labels]
        if stray:
            raise ForethoughtError(f"task file {path}: choice label(s) {', '.join(stray)} not in labels={labels}")
    elif task_type == "classification":
        seen = sorted({str(ex.target) for ex in train})
        labels = [str(x) for x in opts["labels"]] if opts.get("labels") is not None else seen
        if len(set(labels)) < 2:
            raise ForethoughtError(
                f"task file {path}: classification needs at least two labels; the train split has only {seen}"
            )
        stray = sorted(set(seen) - set(labels))
        if stray:
            raise ForethoughtError(
                f"task file {path}: train split has label(s) {', '.join(stray)} not in labels={labels}"
            )
        if split == "eval":
            unseen = sorted({str(ex.target) for ex in evals} - set(seen))
            if unseen:
                raise ForethoughtError(
                    f"{where_eval}: eval label(s) {', '.join(repr(u) for u in unseen)} never occur in the train split "
                    f"(train labels: {', '.join(seen)})"
                )
    else:
        given = opts.get("value_range")
        if given is not None:
            if not isinstance(given, (list, tuple)) or len(given) != 2:
                raise ForethoughtError(f"task file {path}: value_range must be (low, high), got {given!r}")
            value_range = (float(given[0]), float(given[1]))
        else:
            targets = [float(ex.target) for ex in train]
            value_range = (min(targets), max(targets))

    template = opts.get("template")
    if template is None:
        unsafe = [f for f in text_fields if _UNSAFE_FIELD.search(f)]
        if unsafe:
            raise ForethoughtError(
                f"task file {path}: field name(s) {', '.join(unsafe)} cannot go in a format string; give template=..."
            )
        template = "\n".join(f"{f}: {{{f}}}" for f in text_fields) + \
            ("\n{choices}" if opts.get("choices_field") else "") + "\nAnswer:"
    long_field = opts.get("long_field")
    if long_field is not None and long_field not in text_fields:
        raise ForethoughtError(
            f"task file {path}: long_field '{long_field}' is not a text field ({', '.join(text_fields)})"
        )
    spec = TaskSpec(
        name,
        task_type,
        labels,
        str(template),
        value_range=value_range,
        long_field=long_field,
        truncate_side=opts.get("truncate_side", "right"),
        answer="text" if answer == "text" else "label",
        choices_field=opts.get("choices_field") or None,
    )
    check_template(spec, train[0])
    return spec, (train if split == "train" else evals)



def read_inputs(path: str | Path, spec: TaskSpec, id_field: str | None = None) -> list[Example]:
    """New inputs to predict: a ``.csv``/``.tsv``/``.jsonl`` file holding (at least) the fields the task's template
    reads. Targets are not needed (``Example.target`` is None). Missing fields raise with the line. A task that
    answers with the choice's text (``spec.answer == "text"``) also needs ``options``: a JSON object from label
    to choice text (``{"A": "a rock", "B": "a leaf"}``; a .jsonl file, or a JSON string in a CSV/TSV cell)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ForethoughtError(f"input file not found: {path}")
    needed = template_fields(spec)
    out = []
    fields_needed = [f for f in needed if not (spec.choices_field and f == "choices")]
    for line, record in read_records(path)[1]:
        where = f"{path} line {line}"
        fields = {f: as_text(need(record, f, where)) for f in fields_needed}
        example_id = as_text(need(record, id_field, where)) if id_field else f"{path.stem}-{line}"
        if spec.choices_field:  # a multiple-choice file's own column of choices
            out.append(_input_choices(record, fields, spec, where, example_id))
            continue
        options = _input_options(need(record, "options", where), spec, where) if spec.answer == "text" else None
        out.append(Example(fields, None, example_id, options))  # type: ignore[arg-type]
    return out


def _input_choices(record: dict[str, Any], fields: dict[str, str], spec: TaskSpec, where: str,
                   example_id: str) -> Example:
    """A new input of a multiple-choice file task: its choices from the task's column, labelled as the task
    writes them (a task answering with names: answerK for the K-th label word of training, whatever the row's
    order)."""
    from forethought.predgen.tasks.builtin_mc import distinct_choices

    field = str(spec.choices_field)
    labels, texts = parse_choices(need(record, field, where), where, field)
    named = spec.labels == [f"answer{i + 1}" for i in range(len(spec.labels))]
    if named and spec.named_from is None:  # saved before the names were recorded: the row's choices in order
        labels = [f"answer{i + 1}" for i in range(len(labels))]
    # the task's label -> the label it writes (answerK for the K-th label word of training, as in training)
    writes = dict(zip(spec.named_from or spec.labels, spec.labels, strict=True))
    unknown = [k for k in labels if k not in writes]
    if unknown:
        raise ForethoughtError(f"{where}: choice label(s) {', '.join(unknown)} are not the task's "
                               f"({', '.join(writes)})")
    labels = [writes[k] for k in labels]
    options, _ = distinct_choices(labels, texts, labels[0])
    listed = "\n".join(f"{k}: {t}" if named else f"{k}. {t}" for k, t in
                       (options.items() if named else zip(labels, texts, strict=True)))
    return Example({**fields, "choices": listed}, None, example_id, options)  # type: ignore[arg-type]


def _input_options(value: Any, spec: TaskSpec, where: str) -> dict[str, str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            value = None
    if not isinstance(value, dict) or not value or not all(k in spec.labels for k in value):
        raise ForethoughtError(f"{where}: 'options' must be an object from label ({', '.join(spec.labels)}) to "
                               "choice text")
    return {str(k): as_text(v).strip() for k, v in value.items()}
