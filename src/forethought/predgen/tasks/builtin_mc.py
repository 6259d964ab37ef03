"""The built-in multiple-choice tasks: ARC (easy, challenge), PIQA, SIQA, HellaSwag, WinoGrande and OpenBookQA
(``tasks.builtin`` lists their files and splits, and loads them). Their examples carry their choices' texts, so
answer ``text`` (and ``name``) works for them.

Label words: ARC ``A``-``E`` (the few numeric choice labels 1-5 are mapped to A-E), PIQA ``A``/``B``. The others
letter their choices in file order: SIQA ``A``-``C`` (answerA-C), HellaSwag ``A``-``D`` (endings 0-3),
WinoGrande ``A``/``B`` (option1/option2, filling the sentence's ``_``), OpenBookQA ``A``-``D``. Where two choices
of one example have the same text (5 SIQA rows, 3 OpenBookQA train rows), a written text cannot name either, so
the example's choices keep the first of those letters, whichever is gold, and a gold answer among them becomes
that letter: the choice set never depends on the label (:func:`distinct_choices`).

``task.splits paper`` (:class:`PaperSplit`): ARC trains on its Train set (``ARC-*-Train.jsonl``) and tests on its
Test set; PIQA, SIQA, HellaSwag and WinoGrande train on their official training sets and test on the official
validation sets (their test labels are not public), as LLM-Adapters' commonsense benchmark and lm-eval-harness
do. OpenBookQA's default splits are already the paper's.
"""

from __future__ import annotations

import csv
import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forethought.core.errors import ForethoughtError
from forethought.predgen.tasks.readers import as_text, header_records, hub_split, jsonl_rows, need, open_text
from forethought.predgen.tasks.spec import (
    DEFAULT_EVAL_FRACTION,
    Builtin,
    Example,
    PaperSplit,
    TaskSpec,
    seeded_split,
)

LETTERS = "ABCDEFGHIJ"
_MC_TEMPLATE = "Question: {question}\n{choices}\nAnswer:"
_LMEVAL_QA = "Question: {question}\nAnswer:"  # lm-eval-harness's ARC prompt (answer 'text' for the writing methods)
# (record, label, where, example id) -> Example: the readers whose label may come from a separate labels file
_LabelledReader = Callable[[dict[str, Any], Any, str, str], Example]


# --- ARC --------------------------------------------------------------------------------------------------


def _letter(label: Any, where: str) -> str:
    """An ARC choice label as a letter: A-E stay, numeric 1-5 become A-E."""
    text = as_text(label).upper()
    if text.isdigit() and 1 <= int(text) <= len(LETTERS):
        return LETTERS[int(text) - 1]
    if len(text) == 1 and text in LETTERS:
        return text
    raise ForethoughtError(f"{where}: unexpected choice label {label!r}")


def distinct_choices(keys: list[str], texts: list[str], gold: str) -> tuple[dict[str, str], str]:
    """(each key's choice text, one key per distinct text: the first key of each text in the item's order; the
    gold key, moved to the kept key of its text). Which keys are kept never depends on the label, so an item's
    choice set (what the decoders and adapters choose from) is the same whatever its answer."""
    kept: dict[str, str] = {}  # text -> its first key
    for key, text in zip(keys, texts, strict=True):
        kept.setdefault(text.strip(), key)
    options = {key: text for text, key in kept.items()}  # in the item's order (first appearances)
    return options, kept[texts[keys.index(gold)].strip()]


def _arc_example(stem: Any, labels: list[Any], texts: list[Any], answer: Any, where: str, ex_id: str) -> Example:
    letters = [_letter(label, where) for label in labels]
    if not letters or len(letters) != len(texts):
        raise ForethoughtError(f"{where}: expected matching lists of choice labels and texts")
    key = _letter(answer, where)
    if key not in letters:
        raise ForethoughtError(f"{where}: answerKey {answer!r} is not one of the choices {letters}")
    if len(set(letters)) != len(letters):
        raise ForethoughtError(f"{where}: repeated choice labels {letters}")
    options, key = distinct_choices(letters, [as_text(t) for t in texts], key)
    choices = "\n".join(f"{letter}. {as_text(text)}" for letter, text in zip(letters, texts, strict=True))
    return Example({"question": as_text(stem), "choices": choices}, key, ex_id, options)


def _arc_local(level: str, train_set: str, root: Path, split: str, seed: int) -> list[Example]:
    """ARC's ``train_set`` (the default: its small Dev set; task.splits paper: its Train set) or its Test set."""
    path = root / "arc" / f"ARC-{level}-{train_set if split == 'train' else 'Test'}.jsonl"
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


def _arc_hub(level: str, train_split: str, loaded: Any, split: str, seed: int) -> list[Example]:
    split_name = train_split if split == "train" else "test"
    examples = []
    for i, (where, r) in enumerate(hub_split(loaded, "allenai/ai2_arc", split_name)):
        labels, texts = _hub_choices(r, where)
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


def _piqa_file(root: Path, stem: str) -> list[Example]:
    """PIQA's ``<stem>.jsonl`` with its line-aligned ``<stem>-labels.lst`` (stem: valid or train)."""
    path = root / "piqa" / f"{stem}.jsonl"
    records = list(jsonl_rows(path))
    labels = _line_labels(root / "piqa" / f"{stem}-labels.lst", len(records), path)
    prefix = "piqa" if stem == "valid" else f"piqa-{stem}"  # the validation ids as before the paper splits
    return [
        _piqa_example(r, label, f"{path} line {line} (label line {i + 1})", f"{prefix}-{i}")
        for i, ((line, r), label) in enumerate(zip(records, labels, strict=True))
    ]


def _piqa_local(root: Path, split: str, seed: int) -> list[Example]:
    return seeded_split(_piqa_file(root, "valid"), split, seed, DEFAULT_EVAL_FRACTION, str(root / "piqa/valid.jsonl"))


def _piqa_paper_local(root: Path, split: str, seed: int) -> list[Example]:
    return _piqa_file(root, "train" if split == "train" else "valid")


# --- Multiple choice: shared pieces ---------------------------------------------------------------------


def _mc_example(fields: dict[str, str], texts: list[str], answer: int, where: str, ex_id: str) -> Example:
    """A multiple-choice example whose choices are lettered A, B, ... in the given order: ``fields`` plus
    ``choices`` (one ``"A. text"`` line per choice), the gold letter, and each letter's text (answer 'text')."""
    if not 2 <= len(texts) <= len(LETTERS):
        raise ForethoughtError(f"{where}: expected 2-{len(LETTERS)} choices, got {len(texts)}")
    if not 0 <= answer < len(texts):
        raise ForethoughtError(f"{where}: the answer points at choice {answer + 1}, but there are {len(texts)}")
    letters = list(LETTERS[: len(texts)])
    # a text answer cannot tell two choices with the same text apart (5 SIQA and 3 OpenBookQA rows have one)
    options, gold = distinct_choices(letters, texts, letters[answer])
    choices = "\n".join(f"{letter}. {text}" for letter, text in zip(letters, texts, strict=True))
    return Example({**fields, "choices": choices}, gold, ex_id, options)


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


def _with_labels(folder: str, stem: str, label_key: str, example: _LabelledReader, root: Path) -> list[Example]:
    """``<folder>/<stem>.jsonl``, its labels from the official ``<stem>-labels.lst`` when present (the original
    files have no label field), else each row's ``label_key`` (SIQA, WinoGrande)."""
    path = root / folder / f"{stem}.jsonl"
    records = list(jsonl_rows(path))
    labels_path = root / folder / f"{stem}-labels.lst"
    labels = (_line_labels(labels_path, len(records), path) if labels_path.is_file()
              else [need(r, label_key, f"{path} line {line}") for line, r in records])
    prefix = folder if stem == "dev" else f"{folder}-{stem}"  # the dev ids as before the paper splits
    return [
        example(r, label, f"{path} line {line}", f"{prefix}-{i}")
        for i, ((line, r), label) in enumerate(zip(records, labels, strict=True))
    ]


def _dev_with_labels(folder: str, label_key: str, example: _LabelledReader, root: Path, split: str,
                     seed: int) -> list[Example]:
    """``<folder>/dev.jsonl`` split 80/20 (seeded; the only public offline file)."""
    examples = _with_labels(folder, "dev", label_key, example, root)
    return seeded_split(examples, split, seed, DEFAULT_EVAL_FRACTION, str(root / folder / "dev.jsonl"))


def _train_and_dev(folder: str, train_stem: str, label_key: str, example: _LabelledReader, root: Path, split: str,
                   seed: int) -> list[Example]:
    """task.splits paper: the official training set ``<folder>/<train_stem>.jsonl``, or the dev file."""
    return _with_labels(folder, train_stem if split == "train" else "dev", label_key, example, root)


def _hub_examples(hub_id: str, label_key: str, example: _LabelledReader, prefix: str, loaded: Any,
                  split_name: str) -> list[Example]:
    ids = prefix if split_name == "validation" else f"{prefix}-{split_name}"
    return [example(r, need(r, label_key, where), where, f"{ids}-{i}")
            for i, (where, r) in enumerate(hub_split(loaded, hub_id, split_name))]


def _hub_validation(hub_id: str, label_key: str, example: _LabelledReader, prefix: str, loaded: Any, split: str,
                    seed: int) -> list[Example]:
    """The hub's validation split, split 80/20 as the offline dev file is (PIQA, SIQA, WinoGrande)."""
    examples = _hub_examples(hub_id, label_key, example, prefix, loaded, "validation")
    return seeded_split(examples, split, seed, DEFAULT_EVAL_FRACTION, f"hub dataset {hub_id} validation")


def _hub_train_validation(hub_id: str, label_key: str, example: _LabelledReader, prefix: str, loaded: Any,
                          split: str, seed: int) -> list[Example]:
    """task.splits paper from the hub: its train split, or its validation split (PIQA, SIQA, WinoGrande)."""
    return _hub_examples(hub_id, label_key, example, prefix, loaded, "train" if split == "train" else "validation")


def _hub_choices(record: dict[str, Any], where: str) -> tuple[list[Any], list[Any]]:
    """A hub record's ``choices`` object as (labels, texts) (ARC, OpenBookQA)."""
    choices = need(record, "choices", where)
    if not isinstance(choices, dict):
        raise ForethoughtError(f"{where}: 'choices' must be an object with 'text' and 'label' lists")
    return list(need(choices, "label", f"{where} choices")), list(need(choices, "text", f"{where} choices"))


# --- Social IQa -------------------------------------------------------------------------------------------


def _siqa_example(record: dict[str, Any], label: Any, where: str, example_id: str) -> Example:
    fields = {k: as_text(need(record, k, where)) for k in ("context", "question")}
    texts = [as_text(need(record, f"answer{x}", where)) for x in "ABC"]
    return _mc_example(fields, texts, _index(label, 3, 1, where, "label"), where, example_id)


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


def _hellaswag_file(root: Path, stem: str) -> list[Example]:
    path = root / "hellaswag" / f"hellaswag_{stem}.jsonl"
    prefix = "hellaswag" if stem == "val" else f"hellaswag-{stem}"  # the validation ids as before
    return [_hellaswag_example(r, f"{path} line {line}", f"{prefix}-{r.get('line_idx', line)}")
            for line, r in jsonl_rows(path)]


def _hellaswag_local(root: Path, split: str, seed: int) -> list[Example]:
    path = root / "hellaswag" / "hellaswag_val.jsonl"
    return seeded_split(_hellaswag_file(root, "val"), split, seed, DEFAULT_EVAL_FRACTION, str(path))


def _hellaswag_paper_local(root: Path, split: str, seed: int) -> list[Example]:
    return _hellaswag_file(root, "train" if split == "train" else "val")


def _hellaswag_hub_split(loaded: Any, split_name: str) -> list[Example]:
    prefix = "hellaswag" if split_name == "validation" else f"hellaswag-{split_name}"
    return [_hellaswag_example(r, where, f"{prefix}-{i}")
            for i, (where, r) in enumerate(hub_split(loaded, "Rowan/hellaswag", split_name))]


def _hellaswag_hub(loaded: Any, split: str, seed: int) -> list[Example]:
    examples = _hellaswag_hub_split(loaded, "validation")
    return seeded_split(examples, split, seed, DEFAULT_EVAL_FRACTION, "hub dataset Rowan/hellaswag validation")


def _hellaswag_paper_hub(loaded: Any, split: str, seed: int) -> list[Example]:
    return _hellaswag_hub_split(loaded, "train" if split == "train" else "validation")


# --- WinoGrande -------------------------------------------------------------------------------------------


def _winogrande_example(record: dict[str, Any], label: Any, where: str, example_id: str) -> Example:
    fields = {"sentence": as_text(need(record, "sentence", where))}
    texts = [as_text(need(record, k, where)) for k in ("option1", "option2")]
    return _mc_example(fields, texts, _index(label, 2, 1, where, "answer"), where, example_id)


# --- OpenBookQA -------------------------------------------------------------------------------------------

def _obqa_choices(text: str, where: str) -> tuple[list[str], list[str]]:
    """``"(A) a marsh (B) a tundra ..."`` -> (["A", "B", ...], ["a marsh", "a tundra", ...]). Markers are
    looked for in letter order, each after the previous one, so a repeated marker stays inside its choice's
    text (train row 12-1145 reads "... (D) baby birds chewing worms (D) mother dogs nursing their pups")."""
    text = text.strip()
    starts = []  # where each "(X) " marker begins, in letter order
    pos = 0
    for letter in LETTERS:
        found = text.find(f"({letter}) ", pos)
        if found < 0:
            break
        starts.append(found)
        pos = found + 4
    if len(starts) < 2 or starts[0] != 0:
        raise ForethoughtError(f"{where}: 'Choices' must read '(A) ... (B) ...', got {text[:60]!r}")
    ends = starts[1:] + [len(text)]
    texts = [text[a + 4 : b].strip() for a, b in zip(starts, ends, strict=True)]
    return list(LETTERS[: len(starts)]), texts


def _obqa_example(stem: Any, labels: list[Any], texts: list[Any], answer: Any, where: str, ex_id: str) -> Example:
    letters = [as_text(x).upper() for x in labels]
    if letters != list(LETTERS[: len(letters)]):
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
    split_name = "train" if split == "train" else "test"
    examples = []
    for i, (where, r) in enumerate(hub_split(loaded, "allenai/openbookqa", split_name)):
        labels, texts = _hub_choices(r, where)
        stem, answer = need(r, "question_stem", where), need(r, "answerKey", where)
        examples.append(_obqa_example(stem, labels, texts, answer, where, f"obqa-{r.get('id', i)}"))
    return examples


# --- The registry entries (in the order ``known_tasks`` lists them) ----------------------------------------

MC_BUILTINS: dict[str, Builtin] = {
    "arc-easy": Builtin(
        TaskSpec("arc-easy", "classification", list("ABCDE"), _MC_TEMPLATE, long_field="question"),
        ("arc/ARC-Easy-Dev.jsonl", "arc/ARC-Easy-Test.jsonl"), functools.partial(_arc_local, "Easy", "Dev"),
        "allenai/ai2_arc", "ARC-Easy", functools.partial(_arc_hub, "Easy", "validation"),
        text_template=_LMEVAL_QA,
        paper=PaperSplit(("arc/ARC-Easy-Train.jsonl", "arc/ARC-Easy-Test.jsonl"),
                         functools.partial(_arc_local, "Easy", "Train"), functools.partial(_arc_hub, "Easy", "train")),
    ),
    "arc-challenge": Builtin(
        TaskSpec("arc-challenge", "classification", list("ABCDE"), _MC_TEMPLATE, long_field="question"),
        ("arc/ARC-Challenge-Dev.jsonl", "arc/ARC-Challenge-Test.jsonl"),
        functools.partial(_arc_local, "Challenge", "Dev"),
        "allenai/ai2_arc", "ARC-Challenge", functools.partial(_arc_hub, "Challenge", "validation"),
        text_template=_LMEVAL_QA,
        paper=PaperSplit(("arc/ARC-Challenge-Train.jsonl", "arc/ARC-Challenge-Test.jsonl"),
                         functools.partial(_arc_local, "Challenge", "Train"),
                         functools.partial(_arc_hub, "Challenge", "train")),
    ),
    "piqa": Builtin(
        TaskSpec("piqa", "classification", ["A", "B"], "Goal: {goal}\nA. {sol1}\nB. {sol2}\nAnswer:",
                 long_field="goal"),
        ("piqa/valid.jsonl", "piqa/valid-labels.lst"), _piqa_local, "ybisk/piqa", None,
        functools.partial(_hub_validation, "ybisk/piqa", "label", _piqa_example, "piqa"),
        named_template="Goal: {goal}\n{choices}\nAnswer:", text_template="Question: {goal}\nAnswer:",
        paper=PaperSplit(("piqa/train.jsonl", "piqa/train-labels.lst", "piqa/valid.jsonl", "piqa/valid-labels.lst"),
                         _piqa_paper_local,
                         functools.partial(_hub_train_validation, "ybisk/piqa", "label", _piqa_example, "piqa")),
    ),
    "siqa": Builtin(
        TaskSpec("siqa", "classification", list("ABC"), "Context: {context}\nQuestion: {question}\n{choices}\nAnswer:",
                 long_field="context"),
        ("siqa/dev.jsonl",), functools.partial(_dev_with_labels, "siqa", "label", _siqa_example), "allenai/social_i_qa",
        None, functools.partial(_hub_validation, "allenai/social_i_qa", "label", _siqa_example, "siqa"),
        text_template="Q: {context} {question}\nA:",
        paper=PaperSplit(("siqa/train.jsonl", "siqa/dev.jsonl"),
                         functools.partial(_train_and_dev, "siqa", "train", "label", _siqa_example),
                         functools.partial(_hub_train_validation, "allenai/social_i_qa", "label", _siqa_example,
                                           "siqa")),
    ),
    "hellaswag": Builtin(
        TaskSpec("hellaswag", "classification", list("ABCD"),
                 "Activity: {activity}\nContext: {context}\nWhich ending fits?\n{choices}\nAnswer:",
                 long_field="context"),
        ("hellaswag/hellaswag_val.jsonl",), _hellaswag_local, "Rowan/hellaswag", None, _hellaswag_hub,
        paper=PaperSplit(("hellaswag/hellaswag_train.jsonl", "hellaswag/hellaswag_val.jsonl"), _hellaswag_paper_local,
                         _hellaswag_paper_hub),
    ),
    "winogrande": Builtin(
        TaskSpec("winogrande", "classification", list("AB"), "Sentence: {sentence}\nWhich option fills the _?\n"
                 "{choices}\nAnswer:", long_field="sentence"),
        ("winogrande/dev.jsonl",), functools.partial(_dev_with_labels, "winogrande", "answer", _winogrande_example),
        "allenai/winogrande", "winogrande_xl",
        functools.partial(_hub_validation, "allenai/winogrande", "answer", _winogrande_example, "winogrande"),
        paper=PaperSplit(("winogrande/train_xl.jsonl", "winogrande/dev.jsonl"),
                         functools.partial(_train_and_dev, "winogrande", "train_xl", "answer", _winogrande_example),
                         functools.partial(_hub_train_validation, "allenai/winogrande", "answer",
                                           _winogrande_example, "winogrande")),
    ),
    "openbookqa": Builtin(
        TaskSpec("openbookqa", "classification", list("ABCD"), _MC_TEMPLATE, long_field="question"),
        ("openbookqa/train.tsv", "openbookqa/test.tsv"), _obqa_local, "allenai/openbookqa", "main", _obqa_hub,
        text_template=_LMEVAL_QA,
    ),
}  # fmt: skip
