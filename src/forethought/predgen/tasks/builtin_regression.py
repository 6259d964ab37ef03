"""The built-in regression tasks: STS-B, SICK, WASSA-2017 (per emotion and all four), CompLex LCP 2021 (single
and multi-word), CLEAR and Humicroedit (``tasks.builtin`` lists their files and splits, and loads them).

Ranges: STS-B 0-5, SICK relatedness 1-5, WASSA intensity 0-1, LCP complexity 0-1, CLEAR ``BT_easiness`` -4 to 2
(the data spans -3.68 to 1.71; the corpus's readability formulas are not inputs), the Humicroedit mean funniness
grade 0-3 (the edited word is shown in both headlines: the original one and the one with the edit). LCP and
CLEAR have no reliable hub copy (the data root is needed).
"""

from __future__ import annotations

import csv
import functools
import re
from pathlib import Path
from typing import Any

from forethought.core.errors import ForethoughtError
from forethought.predgen.tasks.readers import as_number, as_text, header_records, hub_split, need, tsv_rows
from forethought.predgen.tasks.spec import DEFAULT_EVAL_FRACTION, Builtin, Example, PaperSplit, TaskSpec, seeded_split

WASSA_EMOTIONS = ("anger", "fear", "joy", "sadness")
_LCP_TEMPLATE = "Sentence: {sentence}\nWord: {token}\nComplexity (0 to 1):"
_WASSA_TEMPLATE = "Tweet: {tweet}\nEmotion: {emotion}\nIntensity (0 to 1):"


# --- STS-B ------------------------------------------------------------------------------------------------


def _stsb_local(test: str, root: Path, split: str, seed: int) -> list[Example]:
    """STS-B's training set, or ``test`` (the default: the dev set, as GLUE; task.splits paper: the test set,
    whose gold scores are public)."""
    path = root / "stsb" / ("sts-train.csv" if split == "train" else f"sts-{test}.csv")
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


def _stsb_hub(test: str, loaded: Any, split: str, seed: int) -> list[Example]:
    split_name = "train" if split == "train" else test
    examples = []
    for i, (where, r) in enumerate(hub_split(loaded, "sentence-transformers/stsb", split_name)):
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
    split_name = "train" if split == "train" else "test"
    return [
        _sick_example(r, where, f"sick-{r.get('pair_ID', r.get('id', i))}")
        for i, (where, r) in enumerate(hub_split(loaded, "RobZamp/sick", split_name))
    ]


# --- WASSA-2017 -------------------------------------------------------------------------------------------


def _wassa_files(emotions: tuple[str, ...], test: str = "dev.gold") -> tuple[str, ...]:
    return tuple(
        f"wassa2017/{emo}-ratings-0to1.{kind}.txt" for emo in emotions for kind in ("train", test)
    )


def _wassa_local(emotions: tuple[str, ...], test: str, root: Path, split: str, seed: int) -> list[Example]:
    """The training files, or ``test`` (the default: dev.gold; task.splits paper: test.gold, the official test
    set)."""
    kind = "train" if split == "train" else test
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


def _humicroedit_local(test: str, root: Path, split: str, seed: int) -> list[Example]:
    """The training set, or ``test`` (the default: dev.csv, as the reference code; task.splits paper:
    test_with_label.csv, the official test set)."""
    path = root / "humicroedit" / ("train.csv" if split == "train" else f"{test}.csv")
    _, records = header_records(path, ",", csv.QUOTE_MINIMAL)
    return [_humicroedit_example(r, f"{path} line {line}", f"humicroedit-{r.get('id', line)}")
            for line, r in records]


def _humicroedit_hub(test: str, loaded: Any, split: str, seed: int) -> list[Example]:
    split_name = "train" if split == "train" else test
    return [
        _humicroedit_example(r, where, f"humicroedit-{r.get('id', i)}")
        for i, (where, r) in enumerate(hub_split(loaded, "SemEvalWorkshop/humicroedit", split_name))
    ]


# --- The registry entries (in the order ``known_tasks`` lists them) ----------------------------------------


def _wassa_builtin(name: str, emotions: tuple[str, ...]) -> Builtin:
    spec = TaskSpec(name, "regression", [], _WASSA_TEMPLATE, value_range=(0.0, 1.0), long_field="tweet")
    return Builtin(spec, _wassa_files(emotions), functools.partial(_wassa_local, emotions, "dev.gold"),
                   paper=PaperSplit(_wassa_files(emotions, "test.gold"),
                                    functools.partial(_wassa_local, emotions, "test.gold")))


REGRESSION_BUILTINS: dict[str, Builtin] = {
    "stsb": Builtin(
        TaskSpec("stsb", "regression", [], "Sentence 1: {sentence1}\nSentence 2: {sentence2}\nSimilarity (0 to 5):",
                 value_range=(0.0, 5.0)),
        ("stsb/sts-train.csv", "stsb/sts-dev.csv"), functools.partial(_stsb_local, "dev"),
        "sentence-transformers/stsb", None, functools.partial(_stsb_hub, "validation"),
        paper=PaperSplit(("stsb/sts-train.csv", "stsb/sts-test.csv"), functools.partial(_stsb_local, "test"),
                         functools.partial(_stsb_hub, "test")),
    ),
    "sick": Builtin(
        TaskSpec("sick", "regression", [],
                 "Sentence 1: {sentence1}\nSentence 2: {sentence2}\nRelatedness (1 to 5):", value_range=(1.0, 5.0)),
        ("sick/SICK.txt",), _sick_local, "RobZamp/sick", None, _sick_hub,
    ),
    "wassa": _wassa_builtin("wassa", WASSA_EMOTIONS),
    **{f"wassa-{emo}": _wassa_builtin(f"wassa-{emo}", (emo,)) for emo in WASSA_EMOTIONS},
    "lcp": Builtin(
        TaskSpec("lcp", "regression", [], _LCP_TEMPLATE, value_range=(0.0, 1.0), long_field="sentence"),
        ("complex_lcp2021/lcp_single_train.tsv", "complex_lcp2021/lcp_single_test.tsv"),
        functools.partial(_lcp_local, "single"),
    ),
    "lcp-multi": Builtin(
        TaskSpec("lcp-multi", "regression", [], _LCP_TEMPLATE, value_range=(0.0, 1.0), long_field="sentence"),
        ("complex_lcp2021/lcp_multi_train.tsv", "complex_lcp2021/lcp_multi_test.tsv"),
        functools.partial(_lcp_local, "multi"),
    ),
    "clear": Builtin(
        TaskSpec("clear", "regression", [], "Excerpt: {excerpt}\nReading ease (-4 to 2):", value_range=(-4.0, 2.0),
                 long_field="excerpt"),
        ("clear_corpus/CLEAR_corpus_final.csv",), _clear_local,
    ),
    "humicroedit": Builtin(
        TaskSpec("humicroedit", "regression", [],
                 "Original headline: {original}\nEdited headline: {edited}\nFunniness (0 to 3):",
                 value_range=(0.0, 3.0)),
        ("humicroedit/train.csv", "humicroedit/dev.csv"), functools.partial(_humicroedit_local, "dev"),
        "SemEvalWorkshop/humicroedit", "subtask-1", functools.partial(_humicroedit_hub, "validation"),
        paper=PaperSplit(("humicroedit/train.csv", "humicroedit/test_with_label.csv"),
                         functools.partial(_humicroedit_local, "test_with_label"),
                         functools.partial(_humicroedit_hub, "test")),
    ),
}  # fmt: skip
