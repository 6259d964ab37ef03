"""The readers of ``--task.splits paper`` (``PaperSplit``): each built-in task's local reader on a few synthetic
rows in its real file format (the official training file for ``train``, the fixed test file for ``eval``, whatever
the split seed), each hub reader on an in-memory stand-in for the loaded dataset, and BoolQ's paper splits through
the real CLI on a tiny model."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from forethought.cli import main
from forethought.core.errors import ForethoughtError
from forethought.predgen.tasks import WASSA_EMOTIONS, load_task
from forethought.predgen.tasks.builtin import _BUILTINS
from forethought.testing import tiny_llama_folder

pytestmark = pytest.mark.usefixtures("isolated_env")  # conftest.py: no data root, no hub, a private cache


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    data = tmp_path / "data"
    monkeypatch.setenv("FORETHOUGHT_DATA", str(data))
    return data


# --------------------------------------------------------------------------------- local files (real formats)
# Each writer puts ``n`` rows tagged ``tag`` into the file(s) of ``stem`` and returns their targets in file order.


def _piqa(root: Path, stem: str, tag: str, n: int) -> list[Any]:  # <stem>.jsonl + line-aligned <stem>-labels.lst
    _jsonl(root / "piqa" / f"{stem}.jsonl", [{"goal": f"{tag} goal {i}", "sol1": f"{tag} pour {i}",
                                              "sol2": f"{tag} stir {i}"} for i in range(n)])
    _lines(root / "piqa" / f"{stem}-labels.lst", [str((i + 1) % 2) for i in range(n)])
    return ["AB"[(i + 1) % 2] for i in range(n)]


def _siqa(root: Path, stem: str, tag: str, n: int) -> list[Any]:  # rows without labels + <stem>-labels.lst (1-3)
    _jsonl(root / "siqa" / f"{stem}.jsonl", [{"context": f"{tag} context {i}", "question": f"What next {i}?",
                                              "answerA": f"{tag} sit", "answerB": f"{tag} run",
                                              "answerC": f"{tag} eat {i}"} for i in range(n)])
    _lines(root / "siqa" / f"{stem}-labels.lst", [str(i % 3 + 1) for i in range(n)])
    return ["ABC"[i % 3] for i in range(n)]


def _hellaswag(root: Path, stem: str, tag: str, n: int) -> list[Any]:  # hellaswag_<stem>.jsonl, label 0-3
    _jsonl(root / "hellaswag" / f"hellaswag_{stem}.jsonl", [
        {"line_idx": i, "activity_label": f"{tag} activity", "ctx": f"{tag} context {i}. the man",
         "endings": [f"{tag} ends {i}{x}." for x in "abcd"], "label": (i + 2) % 4} for i in range(n)])
    return ["ABCD"[(i + 2) % 4] for i in range(n)]


def _arc(root: Path, stem: str, tag: str, n: int) -> list[Any]:  # ARC-<stem>.jsonl
    _jsonl(root / "arc" / f"ARC-{stem}.jsonl", [
        {"id": f"{tag}-{i}", "question": {"stem": f"{tag} q{i}?", "choices": [
            {"text": f"{tag}{i}{x}", "label": x} for x in "ABCD"]}, "answerKey": "ABCD"[(i + 1) % 4]}
        for i in range(n)])
    return ["ABCD"[(i + 1) % 4] for i in range(n)]


def _stsb(root: Path, stem: str, tag: str, n: int) -> list[Any]:  # sts-<stem>.csv: 7 tab-separated columns, no header
    scores = [f"{0.5 * i + 0.2:.3f}" for i in range(n)]
    _lines(root / "stsb" / f"sts-{stem}.csv", [
        f"main-captions\tMSRvid\t2012{stem}\t{i:04d}\t{s}\t{tag} a man sings {i}.\t{tag} a man is singing {i}."
        for i, s in enumerate(scores)])
    return [float(s) for s in scores]


def _wassa(emotions: tuple[str, ...]) -> Callable[[Path, str, str, int], list[Any]]:
    """<emo>-ratings-0to1.<stem>.txt for each emotion: id, tweet, emotion, intensity (tab-separated, no header)."""
    first_id = {"train": 0, "dev.gold": 800, "test.gold": 900}

    def write(root: Path, stem: str, tag: str, n: int) -> list[Any]:
        targets: list[Any] = []
        for k, emo in enumerate(emotions):
            scores = [f"{(i + 1) / 10 + k / 100:.3f}" for i in range(n)]
            _lines(root / "wassa2017" / f"{emo}-ratings-0to1.{stem}.txt", [
                f"{10000 * (WASSA_EMOTIONS.index(emo) + 1) + first_id[stem] + i}\t{tag} tweet {i} #{emo}\t{emo}\t{s}"
                for i, s in enumerate(scores)])
            targets += [float(s) for s in scores]
        return targets

    return write


def _humicroedit(root: Path, stem: str, tag: str, n: int) -> list[Any]:  # <stem>.csv, RFC-4180 with a header
    grades = [f"{(i + 1) * 0.4:.1f}" for i in range(n)]
    path = root / "humicroedit" / f"{stem}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["id", "original", "edit", "grades", "meanGrade"])
        out.writerows([f"{len(stem)}{i:03d}", f"{tag} says 2,000 <cats/> met {i} ministers", "dogs", "21000", g]
                      for i, g in enumerate(grades))
    return [float(g) for g in grades]


@dataclass(frozen=True)
class Local:
    task: str
    write: Callable[[Path, str, str, int], list[Any]]
    train: str  # the paper's training file stem
    test: str  # its fixed test file stem
    field: str  # a field that shows the row's tag
    decoy: str | None = None  # the default splits' file that the paper splits must not read (None: they share it)
    decoy_split: str = "eval"  # the default split that reads the decoy


LOCAL = [
    Local("piqa", _piqa, "train", "valid", "goal"),
    Local("siqa", _siqa, "train", "dev", "context"),
    Local("hellaswag", _hellaswag, "train", "val", "context"),
    Local("arc-challenge", _arc, "Challenge-Train", "Challenge-Test", "question", "Challenge-Dev", "train"),
    Local("stsb", _stsb, "train", "test", "sentence1", "dev"),
    Local("wassa", _wassa(WASSA_EMOTIONS), "train", "test.gold", "tweet", "dev.gold"),
    Local("wassa-fear", _wassa(("fear",)), "train", "test.gold", "tweet", "dev.gold"),
    Local("humicroedit", _humicroedit, "train", "test_with_label", "edited", "dev"),
]


@pytest.mark.parametrize("case", LOCAL, ids=[c.task for c in LOCAL])
def test_paper_split_reads_the_training_file_and_the_fixed_test_file(root: Path, case: Local) -> None:
    train_targets = case.write(root, case.train, "trn", 5)
    test_targets = case.write(root, case.test, "tst", 3)
    decoy_targets = case.write(root, case.decoy, "dcy", 4) if case.decoy else []
    trains = {s: load_task(case.task, "train", s, splits="paper")[1] for s in (0, 5)}
    evals = {s: load_task(case.task, "eval", s, splits="paper")[1] for s in (0, 1, 7)}
    train = trains[0]
    assert [e.target for e in train] == train_targets
    assert all("trn" in e.fields[case.field] for e in train)
    for ev in evals.values():
        assert [e.target for e in ev] == test_targets
        assert all("tst" in e.fields[case.field] for e in ev)
    # the split seed moves neither set (a seeded split of 3 test rows would keep 1 and move with the seed)
    assert len({tuple(e.id for e in ev) for ev in evals.values()}) == 1
    assert len({tuple(e.id for e in t) for t in trains.values()}) == 1
    assert len({e.id for e in train}) == len(train) and not {e.id for e in train} & {e.id for e in evals[0]}
    if case.decoy:  # the default splits do read the decoy file: the paper splits avoided a file that is there
        assert [e.target for e in load_task(case.task, case.decoy_split)[1]] == decoy_targets


def test_humicroedit_rows_show_the_headline_before_and_after_the_edit(root: Path) -> None:
    _humicroedit(root, "train", "trn", 2)
    _humicroedit(root, "test_with_label", "tst", 2)
    (first, _) = load_task("humicroedit", "eval", splits="paper")[1]
    assert first.fields == {"original": "tst says 2,000 cats met 0 ministers",
                            "edited": "tst says 2,000 dogs met 0 ministers"}
    assert first.id == "humicroedit-15000" and first.target == 0.4


def test_wassa_has_no_hub_copy_so_its_paper_split_names_every_test_file() -> None:
    assert _BUILTINS["wassa"].paper is not None and _BUILTINS["wassa"].paper.read_hub is None
    with pytest.raises(ForethoughtError, match="no reliable Hugging Face hub copy") as err:
        load_task("wassa", "eval", splits="paper")
    for emo in WASSA_EMOTIONS:
        assert f"wassa2017/{emo}-ratings-0to1.test.gold.txt" in str(err.value)
        assert f"wassa2017/{emo}-ratings-0to1.train.txt" in str(err.value)


# --------------------------------------------------------------------------------- hub readers (in-memory stand-ins)
# Each row maker gives (record as the hub copy has it, its target) for row ``i`` of a split tagged ``tag``.


def _boolq_row(tag: str, i: int) -> tuple[dict, Any]:
    return {"question": f"is {tag} {i}", "passage": f"{tag} passage {i}", "answer": i % 2 == 1}, ["no", "yes"][i % 2]


def _piqa_row(tag: str, i: int) -> tuple[dict, Any]:
    return {"goal": f"{tag} goal {i}", "sol1": f"{tag} a", "sol2": f"{tag} b", "label": (i + 1) % 2}, "AB"[(i + 1) % 2]


def _siqa_row(tag: str, i: int) -> tuple[dict, Any]:
    return ({"context": f"{tag} context {i}", "question": "Why?", "answerA": "x", "answerB": "y", "answerC": f"z{i}",
             "label": str(i % 3 + 1)}, "ABC"[i % 3])


def _winogrande_row(tag: str, i: int) -> tuple[dict, Any]:
    return {"sentence": f"{tag} {i} _ won.", "option1": "Sam", "option2": "Kim", "answer": str(i % 2 + 1)}, "AB"[i % 2]


def _hellaswag_row(tag: str, i: int) -> tuple[dict, Any]:
    return ({"activity_label": f"{tag} activity", "ctx": f"{tag} context {i} [title] the man",
             "endings": [f"{tag} ends {x}" for x in "abcd"], "label": str((i + 3) % 4)}, "ABCD"[(i + 3) % 4])


def _arc_row(tag: str, i: int) -> tuple[dict, Any]:
    return ({"id": f"{tag}-{i}", "question": f"{tag} q{i}?", "choices": {"text": [f"{tag}{i}{x}" for x in "ABCD"],
             "label": list("ABCD")}, "answerKey": "ABCD"[(i + 1) % 4]}, "ABCD"[(i + 1) % 4])


def _stsb_row(tag: str, i: int) -> tuple[dict, Any]:  # this hub copy's scores are divided by 5
    return {"sentence1": f"{tag} one {i}", "sentence2": f"{tag} two {i}", "score": (i + 1) / 8}, 5 * (i + 1) / 8


def _humicroedit_row(tag: str, i: int) -> tuple[dict, Any]:
    return ({"id": f"{tag}{i}", "original": f"{tag} news {i} about <cats/>", "edit": "dogs", "grades": "11000",
             "meanGrade": (i + 1) / 4}, (i + 1) / 4)


@dataclass(frozen=True)
class Hub:
    task: str
    row: Callable[[str, int], tuple[dict, Any]]
    test: str  # the hub split the paper tests on
    field: str


HUB = [
    Hub("boolq", _boolq_row, "validation", "passage"),  # _boolq_paper_hub
    Hub("piqa", _piqa_row, "validation", "goal"),  # _hub_train_validation
    Hub("siqa", _siqa_row, "validation", "context"),  # _hub_train_validation
    Hub("winogrande", _winogrande_row, "validation", "sentence"),  # _hub_train_validation
    Hub("hellaswag", _hellaswag_row, "validation", "context"),  # _hellaswag_paper_hub
    Hub("arc-easy", _arc_row, "test", "question"),  # _arc_hub(.., "train")
    Hub("arc-challenge", _arc_row, "test", "question"),
    Hub("stsb", _stsb_row, "test", "sentence1"),  # _stsb_hub("test")
    Hub("humicroedit", _humicroedit_row, "test", "edited"),  # _humicroedit_hub("test")
]
SIZES = {"train": 5, "validation": 3, "test": 2}  # every split present, each of its own size and tag


def test_every_paper_hub_reader_is_covered() -> None:
    with_hub = {name for name, b in _BUILTINS.items() if b.paper is not None and b.paper.read_hub is not None}
    assert with_hub == {c.task for c in HUB}


@pytest.mark.parametrize("case", HUB, ids=[c.task for c in HUB])
def test_paper_hub_reader_picks_the_training_split_and_the_papers_test_split(case: Hub) -> None:
    made = {split: [case.row(split, i) for i in range(n)] for split, n in SIZES.items()}
    loaded = {split: [record for record, _ in rows] for split, rows in made.items()}
    read = _BUILTINS[case.task].paper.read_hub
    for split, hub_split in (("train", "train"), ("eval", case.test)):
        examples = read(loaded, split, 3)
        assert [e.target for e in examples] == [t for _, t in made[hub_split]], split
        assert all(e.fields[case.field].startswith(hub_split) for e in examples), split
        assert [e.id for e in read(loaded, split, 4)] == [e.id for e in examples]  # the seed changes nothing
    assert not {e.id for e in read(loaded, "train", 0)} & {e.id for e in read(loaded, "eval", 0)}
    with pytest.raises(ForethoughtError, match=f"has no '{case.test}' split"):  # it reads that split, no other
        read({k: v for k, v in loaded.items() if k != case.test}, "eval", 0)


def test_hellaswag_hub_text_is_cleaned_as_the_offline_copy() -> None:
    (first, *_) = _BUILTINS["hellaswag"].paper.read_hub({"train": [_hellaswag_row("train", 0)[0]]}, "train", 0)
    assert first.fields["context"] == "train context 0. the man"


# --------------------------------------------------------------------------------- end to end through the CLI


def _boolq(n: int, tag: str) -> list[dict]:
    return [{"question": f"is the {tag} lake deep {i}", "passage": f"the {tag} lake is deep {i}", "idx": i,
             "label": i % 3 == 0} for i in range(n)]


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("paper") / "tiny-llama"
    text = json.dumps(_boolq(6, "train") + _boolq(5, "val")) * 3 + " Passage: Question: Answer: yes no"
    tiny_llama_folder(folder, text, 260, hidden_size=32, layers=2, heads=4, kv_heads=2)
    return folder


def test_boolq_paper_splits_through_the_cli(root: Path, tmp_path: Path, tiny_base: Path) -> None:
    _jsonl(root / "boolq" / "train.jsonl", _boolq(6, "train"))
    _jsonl(root / "boolq" / "val.jsonl", _boolq(5, "val"))  # under the tiny preset's max_eval_examples (16)
    out = tmp_path / "runs"
    code = main(["predgen", "train", "--config", "tiny", "--base", str(tiny_base), "--task.name", "boolq",
                 "--task.splits", "paper", "--train.steps", "1", "--eval.latency_examples", "0",
                 "--run.out_dir", str(out), "--run.name", "run"])
    assert code == 0
    res = json.loads((out / "run" / "results.json").read_text())
    assert (res["eval_examples"], res["train_examples"]) == (5, 6)  # default splits: 1 eval row of val's 5
    rows = [json.loads(x) for x in (out / "run" / "predictions.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in rows) == [f"boolq-{i}" for i in range(5)]  # the whole validation file
