"""Built-in tasks, read from the data root (``$FORETHOUGHT_DATA``; layouts as in the data folder's SOURCES.md),
else from the Hugging Face hub when the optional ``datasets`` package is installed and the hub is reachable:

============== ======================================= ====================================================
task           train                                   eval
============== ======================================= ====================================================
sst2           sst2/train.tsv (67,349)                 sst2/dev.tsv (872)
boolq          80 % of boolq/val.jsonl (seeded)        the other 20 % (only the validation set is public
                                                       offline; the hub copy is split the same way)
arc-easy       arc/ARC-Easy-Dev.jsonl (570)            arc/ARC-Easy-Test.jsonl (2,376)
arc-challenge  arc/ARC-Challenge-Dev.jsonl (299)       arc/ARC-Challenge-Test.jsonl (1,172)
piqa           80 % of piqa/valid.jsonl (seeded)       the other 20 %
stsb           stsb/sts-train.csv (5,749)              stsb/sts-dev.csv (1,500)
sick           SICK.txt rows with SemEval_set TRAIN    rows with SemEval_set TEST (4,906); the 495 TRIAL
               (4,439)                                 rows are ignored, so train is SemEval's training set
wassa-<emo>    wassa2017/<emo>-ratings-0to1.train.txt  <emo>-ratings-0to1.dev.gold.txt
wassa          all four emotions (3,613)               all four (347)
siqa           80 % of siqa/dev.jsonl (seeded)         the other 20 % (labels from dev-labels.lst when
                                                       present; only the dev set is public offline)
hellaswag      80 % of hellaswag/hellaswag_val.jsonl   the other 20 % (only the validation set offline)
winogrande     80 % of winogrande/dev.jsonl (seeded)   the other 20 % (labels from dev-labels.lst when
                                                       present; only the dev set offline)
openbookqa     openbookqa/train.tsv (4,957)            openbookqa/test.tsv (500); dev.tsv (500) is unused,
                                                       free for selection
lcp            complex_lcp2021/lcp_single_train.tsv    lcp_single_test.tsv (917, gold labels): the
               (7,662)                                 reference code's split; the trial file is unused
lcp-multi      lcp_multi_train.tsv (1,517)             lcp_multi_test.tsv (184)
clear          80 % of clear_corpus/                   the other 20 % (the corpus has no official split;
               CLEAR_corpus_final.csv (seeded)         the reference code used Kaggle's CommonLit train.csv,
                                                       2,834 of these excerpts with the same BT easiness)
humicroedit    humicroedit/train.csv (9,652)           humicroedit/dev.csv (2,419): the reference code
                                                       evaluates on the validation set; test_with_label
                                                       .csv and the FunLines extra data are unused
============== ======================================= ====================================================

ARC has no train file offline, so its (small) Dev set is the train split and its Test set the eval split; the hub
fallback uses the same files (validation -> train, test -> eval) so results do not depend on where the data
came from. Seeded 80/20 splits are deterministic (``random.Random(seed)`` over the row indices; same seed, same
split), disjoint, and keep the file order inside each part. Fixed splits ignore ``seed``.

``splits="paper"`` (``--task.splits paper``) reads each task's :class:`PaperSplit` instead: the official training
set (BoolQ ``boolq/train.jsonl``, PIQA ``piqa/train.jsonl`` + ``train-labels.lst``, SIQA ``siqa/train.jsonl``,
HellaSwag ``hellaswag/hellaswag_train.jsonl``, WinoGrande ``winogrande/train_xl.jsonl``, ARC ``ARC-*-Train.jsonl``)
and a fixed test set (the official test set where its labels are public: ARC, STS-B ``sts-test.csv``, WASSA
``*.test.gold.txt``, Humicroedit ``test_with_label.csv``; else the validation set). Tasks without a PaperSplit
(OpenBookQA, SICK, LCP, CLEAR) already use the paper's splits. The ``seed`` every reader gets is the split seed
(``data.split_seed``), never a run's.

The paper trains on each set's training split; offline only the dev/validation sets of BoolQ, PIQA, SIQA,
HellaSwag and WinoGrande exist (their train files are over the copy limit, see SOURCES.md), so those tasks split
that one file 80/20, and the hub fallback reads the hub's validation split and splits it the same way, so the
examples do not depend on where they came from. Numbers on them are therefore not comparable with numbers
trained on the full training sets.

Label words (what the generator writes after a single space): SST-2 ``negative``/``positive``, BoolQ
``no``/``yes``; the multiple-choice tasks' letters and the regression tasks' ranges are in ``builtin_mc`` and
``builtin_regression``, which read those families. The paper's regression metrics are MSE and MAE
(``metrics.regression_metrics``). Hub fallbacks of the newer tasks: ``allenai/social_i_qa``, ``Rowan/hellaswag``
(its raw text cleaned as lm-eval-harness does, which is how the offline copy was made), ``allenai/winogrande``
(winogrande_xl; its validation set is the same for every size), ``allenai/openbookqa`` (main) and
``SemEvalWorkshop/humicroedit`` (subtask-1).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
from pathlib import Path
from typing import Any

from forethought.core.env import data_root, hub_dataset_unavailable_reason, load_hub_dataset
from forethought.core.errors import ForethoughtError, first_line
from forethought.predgen.tasks.builtin_mc import MC_BUILTINS
from forethought.predgen.tasks.builtin_regression import REGRESSION_BUILTINS, WASSA_EMOTIONS
from forethought.predgen.tasks.readers import as_text, header_records, hub_split, jsonl_rows, need
from forethought.predgen.tasks.spec import (
    DEFAULT_EVAL_FRACTION,
    Builtin,
    Example,
    PaperSplit,
    TaskSpec,
    check_labels,
    check_template,
    seeded_split,
)

__all__ = ["MULTIPLE_CHOICE", "WASSA_EMOTIONS", "builtin_name", "known_tasks", "load_builtin", "named_template",
           "text_template"]


def known_tasks() -> tuple[str, ...]:
    """The built-in task names."""
    return tuple(_BUILTINS)


def builtin_name(name: str) -> str | None:
    """The built-in task a name means (case, spaces around it and ``_`` vs ``-`` do not matter), or None."""
    key = str(name).strip().lower().replace("_", "-")
    return key if key in _BUILTINS else None


def named_template(name: str) -> str:
    """The default prompt of built-in multiple-choice task ``name`` in the name answer format: its own template,
    which lists the choices in ``{choices}``, or the named_template that does so instead of its own fields."""
    builtin = _BUILTINS[name]
    return builtin.named_template or builtin.spec.template


def text_template(name: str) -> str | None:
    """The default prompt of built-in multiple-choice task ``name`` for the methods that write the choice's text
    (answer 'text'): lm-eval-harness's, which does not list the choices; None when the task has none (its own
    prompt then serves every method)."""
    return _BUILTINS[name].text_template


def load_builtin(name: str, split: str, seed: int, options: dict[str, Any]) -> tuple[TaskSpec, list[Example]]:
    builtin = _BUILTINS[name]
    unknown = sorted(set(options) - {"template", "answer", "labels", "splits"})
    if unknown:
        raise ForethoughtError(
            f"task '{name}': option(s) {', '.join(unknown)} apply only to data files; built-in tasks accept "
            "template, answer, labels and splits"
        )
    splits = options.get("splits") or "default"
    if splits not in ("default", "paper"):
        raise ForethoughtError(f"task '{name}': splits must be 'default' or 'paper', got {splits!r}")
    if splits == "paper" and builtin.paper is not None:  # else its default splits are the paper's
        builtin = dataclasses.replace(builtin, files=builtin.paper.files, read_local=builtin.paper.read_local,
                                      read_hub=builtin.paper.read_hub)
    spec = dataclasses.replace(builtin.spec, labels=list(builtin.spec.labels))
    if options.get("template") is not None:
        spec.template = str(options["template"])
    answer = options.get("answer", "label")
    if answer == "text":
        if name not in MULTIPLE_CHOICE:
            raise ForethoughtError(f"task '{name}': answer 'text' applies to the multiple-choice tasks "
                                   f"({', '.join(MULTIPLE_CHOICE)}); use answer 'letter'")
        spec.answer = "text"
    renamed = _renamed_labels(name, spec, options.get("labels"))
    root = data_root()
    if root is not None and all((root / f).is_file() for f in builtin.files):
        examples = builtin.read_local(root, split, seed)
    else:
        examples = _read_from_hub(name + (" (task.splits paper)" if splits == "paper" else ""), builtin, root,
                                  split, seed)
    if not examples:
        raise ForethoughtError(f"task '{name}' has no examples in its {split} split")
    check_template(spec, examples[0])
    if spec.task_type == "classification":
        check_labels(spec, examples, f"task '{name}' {split} split")
    if renamed:
        examples = [_relabel(ex, renamed) for ex in examples]
        spec.labels = [renamed[w] for w in spec.labels]
    return spec, examples


def _renamed_labels(name: str, spec: TaskSpec, labels: list[str] | None) -> dict[str, str] | None:
    """``task.labels`` on a built-in classification task: new label words (e.g. several tokens each), one per
    class in the task's order; the map from the task's own words to them."""
    if not labels:
        return None
    if spec.task_type != "classification":
        raise ForethoughtError(f"task '{name}' is a regression task; task.labels applies to classification")
    if spec.answer == "text":
        raise ForethoughtError(f"task '{name}': task.labels and answer 'text' exclude each other (the text is "
                               "the choice's own)")
    words = [str(w).strip() for w in labels]
    if len(words) != len(spec.labels):
        raise ForethoughtError(f"task '{name}' has {len(spec.labels)} classes ({', '.join(spec.labels)}); "
                               f"task.labels gives {len(words)}")
    if any(not w for w in words) or len(set(words)) != len(words):
        raise ForethoughtError(f"task '{name}': task.labels must be distinct, non-empty words, got {labels}")
    return dict(zip(spec.labels, words, strict=True))


def _relabel(ex: Example, renamed: dict[str, str]) -> Example:
    options = {renamed[k]: v for k, v in ex.options.items()} if ex.options else None
    return dataclasses.replace(ex, target=renamed[str(ex.target)], options=options)


def _read_from_hub(name: str, builtin: Builtin, root: Path | None, split: str, seed: int) -> list[Example]:
    if root is None:
        tried = "the data root (FORETHOUGHT_DATA is not set)"
    else:
        missing = [f for f in builtin.files if not (root / f).is_file()]
        tried = f"{root} (missing {', '.join(missing)})"
    layout = " and ".join(builtin.files)
    if builtin.hub_id is None or builtin.read_hub is None:
        raise ForethoughtError(
            f"task '{name}' not found: looked in {tried}; there is no reliable Hugging Face hub copy of these "
            f"splits. Set FORETHOUGHT_DATA to a data folder holding {layout}"
        )
    hub = builtin.hub_id + (f" (config {builtin.hub_config})" if builtin.hub_config else "")

    def not_found(reason: str) -> ForethoughtError:
        return ForethoughtError(
            f"task '{name}' not found: looked in {tried}, and on the Hugging Face hub as '{hub}' ({reason}). "
            f"Set FORETHOUGHT_DATA to a data folder holding {layout}"
        )

    reason = hub_dataset_unavailable_reason()
    if reason is not None:
        raise not_found(reason)
    try:
        loaded = _hub_dataset(builtin.hub_id, builtin.hub_config)
    except Exception as e:  # datasets raises many types (network, missing config, scripts, ...)
        raise not_found(f"loading failed: {first_line(e)}") from e
    return builtin.read_hub(loaded, split, seed)


@functools.lru_cache(maxsize=8)
def _hub_dataset(hub_id: str, config: str | None) -> Any:
    return load_hub_dataset(hub_id, config)  # cached: a task's train and eval splits come from one download


# --- SST-2 ------------------------------------------------------------------------------------------------

_SST2_LABELS = {"0": "negative", "1": "positive"}


def _sst2_example(record: dict[str, Any], where: str, example_id: str) -> Example:
    sentence = as_text(need(record, "sentence", where))
    label = as_text(need(record, "label", where))
    if label not in _SST2_LABELS:
        raise ForethoughtError(f"{where}: label must be 0 or 1, got {label!r}")
    return Example({"sentence": sentence}, _SST2_LABELS[label], example_id)


def _sst2_local(root: Path, split: str, seed: int) -> list[Example]:
    path = root / "sst2" / ("train.tsv" if split == "train" else "dev.tsv")
    _, records = header_records(path, "\t", csv.QUOTE_NONE)
    return [_sst2_example(r, f"{path} line {line}", f"sst2-{split}-{line}") for line, r in records]


def _sst2_hub(loaded: Any, split: str, seed: int) -> list[Example]:
    split_name = "train" if split == "train" else "validation"
    return [
        _sst2_example(r, where, f"sst2-{split}-{r.get('idx', i)}")
        for i, (where, r) in enumerate(hub_split(loaded, "stanfordnlp/sst2", split_name))
    ]


# --- BoolQ ------------------------------------------------------------------------------------------------


def _boolq_example(record: dict[str, Any], label_key: str, where: str, example_id: str) -> Example:
    question = as_text(need(record, "question", where)).rstrip(" ?") + "?"
    passage = as_text(need(record, "passage", where))
    label = need(record, label_key, where)
    word = label.strip().lower() if isinstance(label, str) else label
    if word in (True, "true"):
        target = "yes"
    elif word in (False, "false"):
        target = "no"
    else:
        raise ForethoughtError(f"{where}: '{label_key}' must be true or false, got {label!r}")
    return Example({"passage": passage, "question": question}, target, example_id)


def _boolq_file(root: Path, stem: str) -> list[Example]:
    path = root / "boolq" / f"{stem}.jsonl"
    prefix = "boolq" if stem == "val" else f"boolq-{stem}"  # the validation ids as before the paper splits
    return [_boolq_example(r, "label", f"{path} line {line}", f"{prefix}-{r.get('idx', line)}")
            for line, r in jsonl_rows(path)]


def _boolq_local(root: Path, split: str, seed: int) -> list[Example]:
    return seeded_split(_boolq_file(root, "val"), split, seed, DEFAULT_EVAL_FRACTION, str(root / "boolq/val.jsonl"))


def _boolq_paper_local(root: Path, split: str, seed: int) -> list[Example]:
    return _boolq_file(root, "train" if split == "train" else "val")


def _boolq_hub_split(loaded: Any, split_name: str) -> list[Example]:
    prefix = "boolq" if split_name == "validation" else f"boolq-{split_name}"
    return [_boolq_example(r, "answer", where, f"{prefix}-{i}")
            for i, (where, r) in enumerate(hub_split(loaded, "google/boolq", split_name))]


def _boolq_hub(loaded: Any, split: str, seed: int) -> list[Example]:
    examples = _boolq_hub_split(loaded, "validation")
    return seeded_split(examples, split, seed, DEFAULT_EVAL_FRACTION, "hub dataset google/boolq validation")


def _boolq_paper_hub(loaded: Any, split: str, seed: int) -> list[Example]:
    return _boolq_hub_split(loaded, "train" if split == "train" else "validation")


# --- The registry -----------------------------------------------------------------------------------------

MULTIPLE_CHOICE = tuple(MC_BUILTINS)  # their examples carry options: answer 'text' works

_BUILTINS: dict[str, Builtin] = {
    "sst2": Builtin(
        TaskSpec("sst2", "classification", ["negative", "positive"], "Review: {sentence}\nSentiment:",
                 long_field="sentence"),
        ("sst2/train.tsv", "sst2/dev.tsv"), _sst2_local, "stanfordnlp/sst2", None, _sst2_hub,
    ),
    "boolq": Builtin(
        TaskSpec("boolq", "classification", ["no", "yes"], "Passage: {passage}\nQuestion: {question}\nAnswer:",
                 long_field="passage"),
        ("boolq/val.jsonl",), _boolq_local, "google/boolq", None, _boolq_hub,
        paper=PaperSplit(("boolq/train.jsonl", "boolq/val.jsonl"), _boolq_paper_local, _boolq_paper_hub),
    ),
    **MC_BUILTINS,
    **REGRESSION_BUILTINS,
}  # fmt: skip
