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

The paper trains on each set's training split; offline only the dev/validation sets of BoolQ, PIQA, SIQA,
HellaSwag and WinoGrande exist (their train files are over the copy limit, see SOURCES.md), so those tasks split
that one file 80/20, and the hub fallback reads the hub's validation split and splits it the same way, so the
examples do not depend on where they came from. Numbers on them are therefore not comparable with numbers
trained on the full training sets.

Label words (what the generator writes after a single space): SST-2 ``negative``/``positive``, BoolQ
``no``/``yes``, ARC ``A``-``E`` (the few numeric choice labels 1-5 are mapped to A-E), PIQA ``A``/``B``.
The other multiple-choice tasks letter their choices in file order: SIQA ``A``-``C`` (answerA-C), HellaSwag
``A``-``D`` (endings 0-3), WinoGrande ``A``/``B`` (option1/option2, filling the sentence's ``_``), OpenBookQA
``A``-``D``. Every multiple-choice example carries its choices' texts (``--task.answer text``); where two
choices of one example have the same text (5 SIQA rows, 3 OpenBookQA train rows), the texts keep one of those
letters (the gold one if it is among them), since a written text cannot name either.

Regression ranges: STS-B 0-5, SICK relatedness 1-5, WASSA intensity 0-1, LCP complexity 0-1, CLEAR
``BT_easiness`` -4 to 2 (the data spans -3.68 to 1.71; the corpus's readability formulas are not inputs), the
Humicroedit mean funniness grade 0-3 (the edited word is shown in both headlines: the original one and the one
with the edit). The paper's regression metrics are MSE and MAE (``metrics.regression_metrics``). LCP and CLEAR
have no reliable hub copy (the data root is needed); the other new tasks fall back to ``allenai/social_i_qa``,
``Rowan/hellaswag`` (its raw text cleaned as lm-eval-harness does, which is how the offline copy was made),
``allenai/winogrande`` (winogrande_xl; its validation set is the same for every size), ``allenai/openbookqa``
(main) and ``SemEvalWorkshop/humicroedit`` (subtask-1).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forethought.core.env import data_root, hub_dataset_unavailable_reason, load_hub_dataset
from forethought.core.errors import ForethoughtError, first_line
from forethought.predgen.tasks.readers import as_number, as_text, header_records, jsonl_rows, need, open_text, tsv_rows
from forethought.predgen.tasks.spec import (
    DEFAULT_EVAL_FRACTION,
    Example,
    TaskSpec,
    check_labels,
    check_template,
    seeded_split,
)

WASSA_EMOTIONS = ("anger", "fear", "joy", "sadness")
_LETTERS = "ABCDEFGHIJ"


def known_tasks() -> tuple[str, ...]:
    """The built-in task names."""
    return tuple(_BUILTINS)


def builtin_name(name: str) -> str | None:
    """The built-in task a name means (case, spaces around it and ``_`` vs ``-`` do not matter), or None."""
    key = str(name).strip().lower().replace("_", "-")
    return key if key in _BUILTINS else None


@dataclass(frozen=True)
class _Builtin:
    spec: TaskSpec
    files: tuple[str, ...]  # what must exist under the data root
    read_local: Callable[[Path, str, int], list[Example]]
    hub_id: str | None = None
    hub_config: str | None = None
    read_hub: Callable[[Any, str, int], list[Example]] | None = None
    # answer 'name' (multiple-choice tasks): the prompt when the default one lists the choices by their own fields
    # (PIQA's sol1/sol2) rather than in the ``choices`` field that the name format rewrites; None = the default
    named_template: str | None = None


def named_template(name: str) -> str:
    """The default prompt of built-in multiple-choice task ``name`` in the name answer format: its own template,
    which lists the choices in ``{choices}``, or the named_template that does so instead of its own fields."""
    builtin = _BUILTINS[name]
    return builtin.named_template or builtin.spec.template


def load_builtin(name: str, split: str, seed: int, options: dict[str, Any]) -> tuple[TaskSpec, list[Example]]:
    builtin = _BUILTINS[name]
    unknown = sorted(set(options) - {"template", "answer", "labels"})
    if unknown:
        raise ForethoughtError(
            f"task '{name}': option(s) {', '.join(unknown)} apply only to data files; built-in tasks accept "
            "template, answer and labels"
        )
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
        examples = _read_from_hub(name, builtin, root, split, seed)
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


def _read_from_hub(name: str, builtin: _Builtin, root: Path | None, split: str, seed: int) -> list[Example]:
    if root is None:
        tried = "the data root (FORETHOUGHT_DATA is not set)"
    else:
        missing = [f for f in builtin.files if not (root / f).is_file()]
        tried = f"{root} (missing {', '.join(missing)})"
    layout = " and ".join(builtin.files)
    if builtin.hub_id is None or builtin.read_hub is None:
        raise ForethoughtError(
            f"task '{name}' not found: looked in {tried}; there is no reliable Hugging Face hub copy. "
            f"Set FORETHOUGHT_DATA to a data folder holding {layout}"
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


def _hub_split(loaded: Any, hub_id: str, split_name: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if split_name not in loaded:
        raise ForethoughtError(f"hub dataset '{hub_id}' has no '{split_name}' split (splits: {', '.join(loaded)})")
    for i, record in enumerate(loaded[split_name]):
        yield f"hub dataset {hub_id} {split_name} row {i}", dict(record)


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
    hub_split = "train" if split == "train" else "validation"
    return [
        _sst2_example(r, where, f"sst2-{split}-{r.get('idx', i)}")
        for i, (where, r) in enumerate(_hub_split(loaded, "stanfordnlp/sst2", hub_split))
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


def _boolq_local(root: Path, split: str, seed: int) -> list[Example]:
    path = root / "boolq" / "val.jsonl"
    examples = [
        _boolq_example(r, "label", f"{path} line {line}", f"boolq-{r.get('idx', line)}")
        for line, r in jsonl_rows(path)
    ]
    return seeded_split(examples, split, seed, DEFAULT_EVAL_FRACTION, str(path))


def _boolq_hub(loaded: Any, split: str, seed: int) -> list[Example]:
    examples = [
        _boolq_example(r, "answer", where, f"boolq-{i}")
        for i, (where, r) in enumerate(_hub_split(loaded, "google/boolq", "validation"))
    ]
    return seeded_split(examples, split, seed, DEFAULT_EVAL_FRACTION, "hub dataset google/boolq validation")


# --- ARC --------------------------------------------------------------------------------------------------


def _letter(label: Any, where: str) -> str:
    """An ARC choice label as a letter: A-E stay, numeric 1-5 become A-E."""
    text = as_text(label).upper()
    if text.isdigit() and 1 <= int(text) <= len(_LETTERS):
        return _LETTERS[int(text) - 1]
    if len(text) == 1 and text in _LETTERS:
        return text
    raise ForethoughtError(f"{where}: unexpected choice label {label!r}")


def _arc_example(stem: Any, labels: list[Any], texts: list[Any], answer: Any, where: str, ex_id: str) -> Example:
    letters = [_letter(label, where) for label in labels]
    if not letters or len(letters) != len(texts):
        raise ForethoughtError(f"{where}: expected matching lists of choice labels and texts")
    key = _letter(answer, where)
    if key not in letters:
        raise ForethoughtError(f"{where}: answerKey {answer!r} is not one of the choices {letters}")
    options = {letter: as_text(text).strip() for letter, text in zip(letters, texts, strict=True)}
    if len(options) != len(letters):
        raise ForethoughtError(f"{where}: repeated choice labels {letters}")
    choices = "\n".join(f"{letter}. {as_text(text)}" for letter, text in zip(letters, texts, strict=True))
    return Example({"question": as_text(stem), "choices": choices}, key, ex_id, options)


def _arc_local(level: str, root: Path, split: str, seed: int) -> list[Example]:
    path = root / "arc" / f"ARC-{level}-{'Dev' if split == 'train' else 'Test'}.jsonl"
    examples = []
    for line, record in jsonl_rows(path):
        where = f"{path} line {line}"
        question = need(record, "question", where)
        if not isinstance(question, dict):
            raise ForethoughtError(f"{where}: 'question' must be an object with 'stem' and 'choices'")
        choices = need(question, "choices", f"{where} question")
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            raise ForethoughtError(f"{where}: 'question.choices' must be a list of {{text, label}} objects")
        labels = [need(c, "label", f"{where} choice") for c in choices]
        texts = [need(c, "text", f"{where} choice") for c in choices]
        stem = need(question, "stem", f"{where} question")
        answer = need(record, "answerKey", where)
        examples.append(_arc_example(stem, labels, texts, answer, where, str(record.get("id", line))))
    return examples


def _arc_hub(level: str, loaded: Any, split: str, seed: int) -> list[Example]:
    hub_split = "validation" if split == "train" else "test"
    examples = []
    for i, (where, r) in enumerate(_hub_split(loaded, "allenai/ai2_arc", hub_split)):
        choices = need(r, "choices", where)
        if not isinstance(choices, dict):
            raise ForethoughtError(f"{where}: 'choices' must be an object with 'text' and 'label' lists")
        labels = list(need(choices, "label", f"{where} choices"))
        texts = list(need(choices, "text", f"{where} choices"))
        stem, answer = need(r, "question", where), need(r, "answerKey", where)
        examples.append(_arc_example(stem, labels, texts, answer, where, str(r.get("id", f"arc-{level}-{i}"))))
    return examples


# --- PIQA -------------------------------------------------------------------------------------------------


def _piqa_example(record: dict[str, Any], label: Any, where: str, example_id: str) -> Example:
    fields = {k: as_text(need(record, k, where)) for k in ("goal", "sol1", "sol2")}
    text = as_text(label)
    if text not in ("0", "1"):
        raise ForethoughtError(f"{where}: label must be 0 or 1, got {label!r}")
    return Example(fields, "AB"[int(text)], example_id, {"A": fields["sol1"].strip(), "B": fields["sol2"].strip()})


def _piqa_local(root: Path, split: str, seed: int) -> list[Example]:
    path = root / "piqa" / "valid.jsonl"
    labels_path = root / "piqa" / "valid-labels.lst"
    records = list(jsonl_rows(path))
    with open_text(labels_path) as fh:
        labels = [line.strip() for line in fh if line.strip()]
    if len(labels) != len(records):
        raise ForethoughtError(
            f"{labels_path} has {len(labels)} labels but {path} has {len(records)} examples; they must be line-aligned"
        )
    examples = [
        _piqa_example(r, label, f"{path} line {line} (label line {i + 1})", f"piqa-{i}")
        for i, ((line, r), label) in enumerate(zip(records, labels, strict=True))
    ]
    return seeded_split(examples, split, seed, DEFAULT_EVAL_FRACTION, str(path))


def _piqa_hub(loaded: Any, split: str, seed: int) -> list[Example]:
    examples = [
        _piqa_example(r, need(r, "label", where), where, f"piqa-{i}")
        for i, (where, r) in enumerate(_hub_split(loaded, "ybisk/piqa", "validation"))
    ]
    return seeded_split(examples, split, seed, DEFAULT_EVAL_FRACTION, "hub dataset ybisk/piqa validation")


# --- STS-B ------------------------------------------------------------------------------------------------


def _stsb_local(root: Path, split: str, seed: int) -> list[Example]:
    path = root / "stsb" / ("sts-train.csv" if split == "train" else "sts-dev.csv")
    examples = []
    for line, cells in tsv_rows(path):
        where = f"{path} line {line}"
        if len(cells) < 7:
            raise ForethoughtError(
                f"{where}: {len(cells)} tab-separated columns, expected at least 7 "
                "(genre, filename, year, id, score, sentence1, sentence2)"
            )
        score = as_number(cells[4], where, "score (column 5)")
        fields = {"sentence1": cells[5].strip(), "sentence2": cells[6].strip()}
        examples.append(Example(fields, score, f"stsb-{split}-{line}"))
    return examples


def _stsb_hub(loaded: Any, split: str, seed: int) -> list[Example]:
    hub_split = "train" if split == "train" else "validation"
    examples = []
    for i, (where, r) in enumerate(_hub_split(loaded, "sentence-transformers/stsb", hub_split)):
        fields = {k: as_text(need(r, k, where)) for k in ("sentence1", "sentence2")}
        score = 5.0 * as_number(need(r, "score", where), where, "score")  # this copy divides scores by 5
        examples.append(Example(fields, score, f"stsb-{split}-{i}"))
    return examples


# --- SICK -------------------------------------------------------------------------------------------------


def _sick_example(record: dict[str, Any], where: str, example_id: str) -> Example:
    fields = {
        "sentence1": as_text(need(record, "sentence_A", where)),
        "sentence2": as_text(need(record, "sentence_B", where)),
    }
    score = as_number(need(record, "relatedness_score", where), where, "relatedness_score")
    return Example(fields, score, example_id)


def _sick_local(root: Path, split: str, seed: int) -> list[Example]:
    path = root / "sick" / "SICK.txt"
    _, records = header_records(path, "\t", csv.QUOTE_NONE)
    wanted = "TRAIN" if split == "train" else "TEST"
    examples = []
    for line, record in records:
        where = f"{path} line {line}"
        if as_text(need(record, "SemEval_set", where)).upper() == wanted:
            examples.append(_sick_example(record, where, f"sick-{record.get('pair_ID', line)}"))
    if not examples:
        raise ForethoughtError(f"{path} has no rows with SemEval_set {wanted} (for the {split} split)")
    return examples


def _sick_hub(loaded: Any, split: str, seed: int) -> list[Example]:
    hub_split = "train" if split == "train" else "test"
    return [
        _sick_example(r, where, f"sick-{r.get('pair_ID', r.get('id', i))}")
        for i, (where, r) in enumerate(_hub_split(loaded, "RobZamp/sick", hub_split))
    ]


# --- WASSA-2017 -------------------------------------------------------------------------------------------


def _wassa_files(emotions: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(
        f"wassa2017/{emo}-ratings-0to1.{kind}.txt" for emo in emotions for kind in ("train", "dev.gold")
    )


def _wassa_local(emotions: tuple[str, ...], root: Path, split: str, seed: int) -> list[Example]:
    kind = "train" if split == "train" else "dev.gold"
    examples = []
    for emotion in emotions:
        path = root / "wassa2017" / f"{emotion}-ratings-0to1.{kind}.txt"
        for line, cells in tsv_rows(path):
            where = f"{path} line {line}"
            if len(cells) < 4:
                raise ForethoughtError(
                    f"{where}: {len(cells)} tab-separated columns, expected 4 (id, tweet, emotion, intensity)"
                )
            intensity = as_number(cells[3], where, "intensity (column 4)")
            fields = {"tweet": cells[1].strip(), "emotion": cells[2].strip() or emotion}
            examples.append(Example(fields, intensity, f"wassa-{cells[0].strip() or f'{emotion}-{line}'}"))
    return examples


# --- Multiple choice: shared pieces ---------------------------------------------------------------------


def _mc_example(fields: dict[str, str], texts: list[str], answer: int, where: str, ex_id: str) -> Example:
    """A multiple-choice example whose choices are lettered A, B, ... in the given order: ``fields`` plus
    ``choices`` (one ``"A. text"`` line per choice), the gold letter, and each letter's text (answer 'text')."""
    if not 2 <= len(texts) <= len(_LETTERS):
        raise ForethoughtError(f"{where}: expected 2-{len(_LETTERS)} choices, got {len(texts)}")
    if not 0 <= answer < len(texts):
        raise ForethoughtError(f"{where}: the answer points at choice {answer + 1}, but there are {len(texts)}")
    letters = _LETTERS[: len(texts)]
    # A text answer cannot tell two choices with the same text apart (5 SIQA and 3 OpenBookQA rows have one),
    # so options keep one letter per text: the gold one if it is among them, else the first.
    order = [answer] + [i for i in range(len(texts)) if i != answer]
    kept: dict[str, int] = {}
    for i in order:
        kept.setdefault(texts[i].strip(), i)
    options = {letters[i]: texts[i].strip() for i in sorted(kept.values())}
    choices = "\n".join(f"{letter}. {text}" for letter, text in zip(letters, texts, strict=True))
    return Example({**fields, "choices": choices}, letters[answer], ex_id, options)


def _index(label: Any, n: int, base: int, where: str, what: str) -> int:
    """A choice number as a 0-based index: ``base`` 1 for "1".."n" (SIQA, WinoGrande), 0 for 0..n-1 (HellaSwag)."""
    text = as_text(label)
    if not (text.isdigit() and base <= int(text) < base + n):
        raise ForethoughtError(f"{where}: {what} must be one of {', '.join(str(base + i) for i in range(n))}, "
                               f"got {label!r}")
    return int(text) - base


def _line_labels(path: Path, n: int, what: Path) -> list[str]:
    """An official ``*-labels.lst``: one label per line, line-aligned with the ``n`` examples of ``what``."""
    with open_text(path) as fh:
        labels = [line.strip() for line in fh if line.strip()]
    if len(labels) != n:
        raise ForethoughtError(f"{path} has {len(labels)} labels but {what} has {n} examples; they must be "
                               "line-aligned")
    return labels


# --- Social IQa -------------------------------------------------------------------------------------------


def _siqa_example(record: dict[str, Any], label: Any, where: str, example_id: str) -> Example:
    fields = {k: as_text(need(record, k, where)) for k in ("context", "question")}
    texts = [as_text(need(record, f"answer{x}", where)) for x in "ABC"]
    return _mc_example(fields, texts, _index(label, 3, 1, where, "label"), where, example_id)


def _siqa_local(root: Path, split: str, seed: int) -> list[Example]:
    path = root / "siqa" / "dev.jsonl"
    records = list(jsonl_rows(path))
    labels_path = root / "siqa" / "dev-labels.lst"
    # the official labels file when present (the original dev.jsonl has no label field), else each row's label
    labels = (_line_labels(labels_path, len(records), path) if labels_path.is_file()
              else [need(r, "label", f"{path} line {line}") for line, r in records])
    examples = [
        _siqa_example(r, label, f"{path} line {line}", f"siqa-{i}")
        for i, ((line, r), label) in enumerate(zip(records, labels, strict=True))
    ]
    return seeded_split(examples, split, seed, DEFAULT_EVAL_FRACTION, str(path))


def _siqa_hub(loaded: Any, split: str, seed: int) -> list[Example]:
    examples = [
        _siqa_example(r, need(r, "label", where), where, f"siqa-{i}")
        for i, (where, r) in enumerate(_hub_split(loaded, "allenai/social_i_qa", "validation"))
    ]
    return seeded_split(examples, split, seed, DEFAULT_EVAL_FRACTION, "hub dataset allenai/social_i_qa validation")


# --- HellaSwag --------------------------------------------------------------------------------------------


def _hellaswag_clean(text: str) -> str:
    """lm-eval-harness's HellaSwag preprocessing: WikiHow's ``[title]`` becomes a sentence end, other ``[...]``
    markers and double spaces go. The offline copy is already cleaned this way (idempotent there); the hub's raw
    text gets the same, so both give the same prompts."""
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ").strip()


def _hellaswag_example(record: dict[str, Any], where: str, example_id: str) -> Example:
    fields = {"activity": _hellaswag_clean(as_text(need(record, "activity_label", where))),
              "context": _hellaswag_clean(as_text(need(record, "ctx", where)))}
    endings = need(record, "endings", where)
    if not isinstance(endings, list) or len(endings) != 4:
        raise ForethoughtError(f"{where}: 'endings' must be a list of 4 texts")
    texts = [_hellaswag_clean(as_text(e)) for e in endings]
    return _mc_example(fields, texts, _index(need(record, "label", where), 4, 0, where, "label"), where, example_id)


def _hellaswag_local(root: Path, split: str, seed: int) -> list[Example]:
    path = root / "hellaswag" / "hellaswag_val.jsonl"
    examples = [_hellaswag_example(r, f"{path} line {line}", f"hellaswag-{r.get('line_idx', line)}")
                for line, r in jsonl_rows(path)]
    return seeded_split(examples, split, seed, DEFAULT_EVAL_FRACTION, str(path))


def _hellaswag_hub(loaded: Any, split: str, seed: int) -> list[Example]:
    examples = [
        _hellaswag_example(r, where, f"hellaswag-{i}")
        for i, (where, r) in enumerate(_hub_split(loaded, "Rowan/hellaswag", "validation"))
    ]
    return seeded_split(examples, split, seed, DEFAULT_EVAL_FRACTION, "hub dataset Rowan/hellaswag validation")


# --- WinoGrande -------------------------------------------------------------------------------------------


def _winogrande_example(record: dict[str, Any], label: Any, where: str, example_id: str) -> Example:
    fields = {"sentence": as_text(need(record, "sentence", where))}
    texts = [as_text(need(record, k, where)) for k in ("option1", "option2")]
    return _mc_example(fields, texts, _index(label, 2, 1, where, "answer"), where, example_id)


def _winogrande_local(root: Path, split: str, seed: int) -> list[Example]:
    path = root / "winogrande" / "dev.jsonl"
    records = list(jsonl_rows(path))
    labels_path = root / "winogrande" / "dev-labels.lst"
    labels = (_line_labels(labels_path, len(records), path) if labels_path.is_file()
              else [need(r, "answer", f"{path} line {line}") for line, r in records])
    examples = [
        _winogrande_example(r, label, f"{path} line {line}", f"winogrande-{i}")
        for i, ((line, r), label) in enumerate(zip(records, labels, strict=True))
    ]
    return seeded_split(examples, split, seed, DEFAULT_EVAL_FRACTION, str(path))


def _winogrande_hub(loaded: Any, split: str, seed: int) -> list[Example]:
    examples = [
        _winogrande_example(r, need(r, "answer", where), where, f"winogrande-{i}")
        for i, (where, r) in enumerate(_hub_split(loaded, "allenai/winogrande", "validation"))
    ]
    return seeded_split(examples, split, seed, DEFAULT_EVAL_FRACTION, "hub dataset allenai/winogrande validation")


# --- OpenBookQA -------------------------------------------------------------------------------------------

def _obqa_choices(text: str, where: str) -> tuple[list[str], list[str]]:
    """``"(A) a marsh (B) a tundra ..."`` -> (["A", "B", ...], ["a marsh", "a tundra", ...]). Markers are
    looked for in letter order, each after the previous one, so a repeated marker stays inside its choice's
    text (train row 12-1145 reads "... (D) baby birds chewing worms (D) mother dogs nursing their pups")."""
    text = text.strip()
    starts = []  # where each "(X) " marker begins, in letter order
    pos = 0
    for letter in _LETTERS:
        found = text.find(f"({letter}) ", pos)
        if found < 0:
            break
        starts.append(found)
        pos = found + 4
    if len(starts) < 2 or starts[0] != 0:
        raise ForethoughtError(f"{where}: 'Choices' must read '(A) ... (B) ...', got {text[:60]!r}")
    ends = starts[1:] + [len(text)]
    texts = [text[a + 4 : b].strip() for a, b in zip(starts, ends, strict=True)]
    return list(_LETTERS[: len(starts)]), texts


def _obqa_example(stem: Any, labels: list[Any], texts: list[Any], answer: Any, where: str, ex_id: str) -> Example:
    letters = [as_text(x).upper() for x in labels]
    if letters != list(_LETTERS[: len(letters)]):
        raise ForethoughtError(f"{where}: choice labels must be A, B, ... in order, got {letters}")
    key = as_text(answer).upper()
    if key not in letters:
        raise ForethoughtError(f"{where}: answer key {answer!r} is not one of the choices {letters}")
    return _mc_example({"question": as_text(stem)}, [as_text(t) for t in texts], letters.index(key), where, ex_id)


def _obqa_local(root: Path, split: str, seed: int) -> list[Example]:
    path = root / "openbookqa" / ("train.tsv" if split == "train" else "test.tsv")
    _, records = header_records(path, "\t", csv.QUOTE_NONE)
    examples = []
    for line, r in records:
        where = f"{path} line {line}"
        labels, texts = _obqa_choices(as_text(need(r, "Choices", where)), where)
        stem, answer = need(r, "Question Stem", where), need(r, "Answer Key", where)
        examples.append(_obqa_example(stem, labels, texts, answer, where, f"obqa-{r.get('ID', line)}"))
    return examples


def _obqa_hub(loaded: Any, split: str, seed: int) -> list[Example]:
    hub_split = "train" if split == "train" else "test"
    examples = []
    for i, (where, r) in enumerate(_hub_split(loaded, "allenai/openbookqa", hub_split)):
        choices = need(r, "choices", where)
        if not isinstance(choices, dict):
            raise ForethoughtError(f"{where}: 'choices' must be an object with 'text' and 'label' lists")
        labels = list(need(choices, "label", f"{where} choices"))
        texts = list(need(choices, "text", f"{where} choices"))
        stem, answer = need(r, "question_stem", where), need(r, "answerKey", where)
        examples.append(_obqa_example(stem, labels, texts, answer, where, f"obqa-{r.get('id', i)}"))
    return examples


# --- CompLex LCP 2021 -------------------------------------------------------------------------------------


def _lcp_local(kind: str, root: Path, split: str, seed: int) -> list[Example]:
    path = root / "complex_lcp2021" / f"lcp_{kind}_{'train' if split == 'train' else 'test'}.tsv"
    _, records = header_records(path, "\t", csv.QUOTE_NONE)
    examples = []
    for line, r in records:
        where = f"{path} line {line}"
        fields = {k: as_text(need(r, k, where)) for k in ("sentence", "token")}
        score = as_number(need(r, "complexity", where), where, "complexity")
        examples.append(Example(fields, score, f"lcp-{kind}-{r.get('id', line)}"))
    return examples


# --- CLEAR ------------------------------------------------------------------------------------------------


def _clear_local(root: Path, split: str, seed: int) -> list[Example]:
    path = root / "clear_corpus" / "CLEAR_corpus_final.csv"
    _, records = header_records(path, ",", csv.QUOTE_MINIMAL)  # quoted excerpts hold newlines
    examples = []
    for line, r in records:
        where = f"{path} line {line}"
        excerpt = " ".join(as_text(need(r, "Excerpt", where)).split())  # one paragraph: newlines -> spaces
        score = as_number(need(r, "BT_easiness", where), where, "BT_easiness")
        examples.append(Example({"excerpt": excerpt}, score, f"clear-{r.get('ID', line)}"))
    return seeded_split(examples, split, seed, DEFAULT_EVAL_FRACTION, str(path))


# --- Humicroedit (SemEval-2020 Task 7, subtask 1) ---------------------------------------------------------

_EDITED_WORD = re.compile(r"<([^<>]*)/>")


def _humicroedit_example(record: dict[str, Any], where: str, example_id: str) -> Example:
    original = as_text(need(record, "original", where))
    edit = as_text(need(record, "edit", where))
    if len(_EDITED_WORD.findall(original)) != 1:
        raise ForethoughtError(f"{where}: 'original' must mark the edited word once as <word/>, got {original!r}")
    fields = {"original": _EDITED_WORD.sub(lambda m: m.group(1), original),
              "edited": _EDITED_WORD.sub(lambda m: edit, original)}
    grade = as_number(need(record, "meanGrade", where), where, "meanGrade")
    return Example(fields, grade, example_id)


def _humicroedit_local(root: Path, split: str, seed: int) -> list[Example]:
    path = root / "humicroedit" / ("train.csv" if split == "train" else "dev.csv")
    _, records = header_records(path, ",", csv.QUOTE_MINIMAL)
    return [_humicroedit_example(r, f"{path} line {line}", f"humicroedit-{r.get('id', line)}")
            for line, r in records]


def _humicroedit_hub(loaded: Any, split: str, seed: int) -> list[Example]:
    hub_split = "train" if split == "train" else "validation"
    return [
        _humicroedit_example(r, where, f"humicroedit-{r.get('id', i)}")
        for i, (where, r) in enumerate(_hub_split(loaded, "SemEvalWorkshop/humicroedit", hub_split))
    ]


# --- The registry -----------------------------------------------------------------------------------------

_MC_TEMPLATE = "Question: {question}\n{choices}\nAnswer:"
_LCP_TEMPLATE = "Sentence: {sentence}\nWord: {token}\nComplexity (0 to 1):"
_WASSA_TEMPLATE = "Tweet: {tweet}\nEmotion: {emotion}\nIntensity (0 to 1):"


def _wassa_builtin(name: str, emotions: tuple[str, ...]) -> _Builtin:
    spec = TaskSpec(name, "regression", [], _WASSA_TEMPLATE, value_range=(0.0, 1.0), long_field="tweet")
    return _Builtin(spec, _wassa_files(emotions), functools.partial(_wassa_local, emotions))


MULTIPLE_CHOICE = (
    "arc-easy", "arc-challenge", "piqa", "siqa", "hellaswag", "winogrande", "openbookqa",
)  # their examples carry options: answer 'text' works

_BUILTINS: dict[str, _Builtin] = {
    "sst2": _Builtin(
        TaskSpec("sst2", "classification", ["negative", "positive"], "Review: {sentence}\nSentiment:",
                 long_field="sentence"),
        ("sst2/train.tsv", "sst2/dev.tsv"), _sst2_local, "stanfordnlp/sst2", None, _sst2_hub,
    ),
    "boolq": _Builtin(
        TaskSpec("boolq", "classification", ["no", "yes"], "Passage: {passage}\nQuestion: {question}\nAnswer:",
                 long_field="passage"),
        ("boolq/val.jsonl",), _boolq_local, "google/boolq", None, _boolq_hub,
    ),
    "arc-easy": _Builtin(
        TaskSpec("arc-easy", "classification", list("ABCDE"), _MC_TEMPLATE, long_field="question"),
        ("arc/ARC-Easy-Dev.jsonl", "arc/ARC-Easy-Test.jsonl"), functools.partial(_arc_local, "Easy"),
        "allenai/ai2_arc", "ARC-Easy", functools.partial(_arc_hub, "Easy"),
    ),
    "arc-challenge": _Builtin(
        TaskSpec("arc-challenge", "classification", list("ABCDE"), _MC_TEMPLATE, long_field="question"),
        ("arc/ARC-Challenge-Dev.jsonl", "arc/ARC-Challenge-Test.jsonl"), functools.partial(_arc_local, "Challenge"),
        "allenai/ai2_arc", "ARC-Challenge", functools.partial(_arc_hub, "Challenge"),
    ),
    "piqa": _Builtin(
        TaskSpec("piqa", "classification", ["A", "B"], "Goal: {goal}\nA. {sol1}\nB. {sol2}\nAnswer:",
                 long_field="goal"),
        ("piqa/valid.jsonl", "piqa/valid-labels.lst"), _piqa_local, "ybisk/piqa", None, _piqa_hub,
        named_template="Goal: {goal}\n{choices}\nAnswer:",
    ),
    "siqa": _Builtin(
        TaskSpec("siqa", "classification", list("ABC"), "Context: {context}\nQuestion: {question}\n{choices}\nAnswer:",
                 long_field="context"),
        ("siqa/dev.jsonl",), _siqa_local, "allenai/social_i_qa", None, _siqa_hub,
    ),
    "hellaswag": _Builtin(
        TaskSpec("hellaswag", "classification", list("ABCD"),
                 "Activity: {activity}\nContext: {context}\nWhich ending fits?\n{choices}\nAnswer:",
                 long_field="context"),
        ("hellaswag/hellaswag_val.jsonl",), _hellaswag_local, "Rowan/hellaswag", None, _hellaswag_hub,
    ),
    "winogrande": _Builtin(
        TaskSpec("winogrande", "classification", list("AB"), "Sentence: {sentence}\nWhich option fills the _?\n"
                 "{choices}\nAnswer:", long_field="sentence"),
        ("winogrande/dev.jsonl",), _winogrande_local, "allenai/winogrande", "winogrande_xl", _winogrande_hub,
    ),
    "openbookqa": _Builtin(
        TaskSpec("openbookqa", "classification", list("ABCD"), _MC_TEMPLATE, long_field="question"),
        ("openbookqa/train.tsv", "openbookqa/test.tsv"), _obqa_local, "allenai/openbookqa", "main", _obqa_hub,
    ),
    "stsb": _Builtin(
        TaskSpec("stsb", "regression", [], "Sentence 1: {sentence1}\nSentence 2: {sentence2}\nSimilarity (0 to 5):",
                 value_range=(0.0, 5.0)),
        ("stsb/sts-train.csv", "stsb/sts-dev.csv"), _stsb_local, "sentence-transformers/stsb", None, _stsb_hub,
    ),
    "sick": _Builtin(
        TaskSpec("sick", "regression", [],
                 "Sentence 1: {sentence1}\nSentence 2: {sentence2}\nRelatedness (1 to 5):", value_range=(1.0, 5.0)),
        ("sick/SICK.txt",), _sick_local, "RobZamp/sick", None, _sick_hub,
    ),
    "wassa": _wassa_builtin("wassa", WASSA_EMOTIONS),
    **{f"wassa-{emo}": _wassa_builtin(f"wassa-{emo}", (emo,)) for emo in WASSA_EMOTIONS},
    "lcp": _Builtin(
        TaskSpec("lcp", "regression", [], _LCP_TEMPLATE, value_range=(0.0, 1.0), long_field="sentence"),
        ("complex_lcp2021/lcp_single_train.tsv", "complex_lcp2021/lcp_single_test.tsv"),
        functools.partial(_lcp_local, "single"),
    ),
    "lcp-multi": _Builtin(
        TaskSpec("lcp-multi", "regression", [], _LCP_TEMPLATE, value_range=(0.0, 1.0), long_field="sentence"),
        ("complex_lcp2021/lcp_multi_train.tsv", "complex_lcp2021/lcp_multi_test.tsv"),
        functools.partial(_lcp_local, "multi"),
    ),
    "clear": _Builtin(
        TaskSpec("clear", "regression", [], "Excerpt: {excerpt}\nReading ease (-4 to 2):", value_range=(-4.0, 2.0),
                 long_field="excerpt"),
        ("clear_corpus/CLEAR_corpus_final.csv",), _clear_local,
    ),
    "humicroedit": _Builtin(
        TaskSpec("humicroedit", "regression", [],
                 "Original headline: {original}\nEdited headline: {edited}\nFunniness (0 to 3):",
                 value_range=(0.0, 3.0)),
        ("humicroedit/train.csv", "humicroedit/dev.csv"), _humicroedit_local, "SemEvalWorkshop/humicroedit",
        "subtask-1", _humicroedit_hub,
    ),
}  # fmt: skip
