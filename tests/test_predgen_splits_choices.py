"""The paper's splits (``--task.splits paper``), the split seed that fixes every test set, a choice set that never
depends on the label, and your own multiple-choice files (``--task.choices_field``): small files under temporary
data roots, the shipped example file, and the real CLI on a tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forethought.cli import main
from forethought.core.errors import ForethoughtError
from forethought.predgen.config import TaskConfig
from forethought.predgen.data import load_splits
from forethought.predgen.tasks import load_task, read_inputs, render_prompt
from forethought.predgen.tasks.builtin_mc import distinct_choices
from forethought.testing import tiny_llama_folder

pytestmark = pytest.mark.usefixtures("isolated_env")  # conftest.py: no data root, no hub, a private cache

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "predgen" / "science_mc.jsonl"
MC_FILE = ["--task.name", str(EXAMPLE), "--task.target_field", "answer", "--task.choices_field", "options",
           "--task.id_field", "id"]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _boolq(n: int, tag: str) -> list[dict]:
    return [{"question": f"is {tag} {i} true", "passage": f"{tag} passage {i}", "idx": i, "label": i % 2 == 0}
            for i in range(n)]


def _arc(n: int, tag: str) -> list[dict]:
    return [{"id": f"{tag}-{i}", "question": {"stem": f"{tag} q{i}?", "choices": [
        {"label": x, "text": f"{tag}{i}{x}"} for x in "ABCD"]}, "answerKey": "ABCD"[i % 4]} for i in range(n)]


def _winogrande(n: int, tag: str) -> list[dict]:
    return [{"sentence": f"{tag} {i} _ won.", "option1": "Sam", "option2": "Kim", "answer": str(i % 2 + 1)}
            for i in range(n)]


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    data = tmp_path / "data"
    _jsonl(data / "boolq" / "val.jsonl", _boolq(10, "val"))
    _jsonl(data / "arc" / "ARC-Easy-Dev.jsonl", _arc(4, "dev"))
    _jsonl(data / "arc" / "ARC-Easy-Test.jsonl", _arc(5, "test"))
    _jsonl(data / "winogrande" / "dev.jsonl", _winogrande(10, "dev"))
    monkeypatch.setenv("FORETHOUGHT_DATA", str(data))
    return data


# ---------------------------------------------------------------------------------------------- paper splits


def test_paper_splits_train_on_the_training_set_and_test_on_a_fixed_set(root: Path) -> None:
    _jsonl(root / "boolq" / "train.jsonl", _boolq(7, "train"))
    _jsonl(root / "arc" / "ARC-Easy-Train.jsonl", _arc(6, "train"))
    _jsonl(root / "winogrande" / "train_xl.jsonl", _winogrande(9, "train"))
    for name, n_train, n_eval in (("boolq", 7, 10), ("arc-easy", 6, 5), ("winogrande", 9, 10)):
        _, train = load_task(name, "train", 0, splits="paper")
        _, evals = load_task(name, "eval", 3, splits="paper")  # no seeded split: the seed changes nothing
        assert (len(train), len(evals)) == (n_train, n_eval), name
        assert not {e.id for e in train} & {e.id for e in evals}, name
        assert all("train" in render_prompt(load_task(name, "train", splits="paper")[0], e) for e in train), name
    # the default splits are unchanged: BoolQ and WinoGrande split their dev file, ARC trains on Dev
    assert len(load_task("boolq", "train", 0)[1]) == 8 and len(load_task("arc-easy", "train")[1]) == 4


def test_paper_splits_say_which_files_to_place_where(root: Path, tmp_path: Path) -> None:
    with pytest.raises(ForethoughtError, match=r"boolq/train\.jsonl and boolq/val\.jsonl"):
        load_task("boolq", "train", splits="paper")
    from cli_harness import expect_clean_failure

    expect_clean_failure(["predgen", "train", "--config", "tiny", "--base", str(tmp_path / "no-model"),
                          "--task.name", "arc-easy", "--task.splits", "paper", "--run.out_dir", str(tmp_path / "runs")],
                         tmp_path, tmp_path / "runs",
                         ["task.splits paper", "arc/ARC-Easy-Train.jsonl", "arc/ARC-Easy-Test.jsonl"])


def test_paper_splits_apply_to_built_in_tasks_only() -> None:
    with pytest.raises(ForethoughtError, match="task.splits paper applies to the built-in tasks"):
        TaskConfig(name="mine.csv", target_field="y", splits="paper").options(builtin=False)


def test_the_split_seed_fixes_the_test_set_for_every_run_seed(root: Path) -> None:
    """A single file's split and the eval subset follow task.split_seed, never the run's seed; the run's seed
    still draws the validation examples carved from the training data."""
    task = TaskConfig(name="boolq", max_eval_examples=1, val_examples=2)
    runs = [load_splits(task, seed) for seed in (0, 1, 2, 3)]
    assert len({tuple(e.id for e in r[3]) for r in runs}) == 1  # the same eval example for every run seed
    assert len({frozenset(e.id for e in r[1] + r[2]) for r in runs}) == 1  # the same train split
    assert len({tuple(e.id for e in r[2]) for r in runs}) > 1  # validation: the run's own draw
    moved = [load_splits(TaskConfig(name="boolq", split_seed=s), 0)[3] for s in range(4)]
    assert len({tuple(e.id for e in m) for m in moved}) > 1  # the split seed does move it


# ---------------------------------------------------------------------------------------------- choice sets


@pytest.mark.parametrize("gold", ["A", "B", "C", "D"])
def test_the_choice_set_never_depends_on_the_label(gold: str) -> None:
    keys, texts = ["A", "B", "C", "D"], ["ok", "fine", "ok", "fine"]
    options, target = distinct_choices(keys, texts, gold)
    assert options == {"A": "ok", "B": "fine"}  # whichever letter is gold
    assert options[target] == texts[keys.index(gold)]


def test_repeated_choice_texts_in_a_built_in_task(root: Path) -> None:
    rows = _winogrande(10, "dev")
    rows[0].update(option1="Sam", option2="Sam", answer="2")
    _jsonl(root / "winogrande" / "dev.jsonl", rows)
    examples = load_task("winogrande", "train")[1] + load_task("winogrande", "eval")[1]
    first = next(e for e in examples if e.id == "winogrande-0")
    assert first.options == {"A": "Sam"} and first.target == "A"
    assert first.fields["choices"] == "A. Sam\nB. Sam"  # the prompt still shows every choice


# ---------------------------------------------------------------------------------------------- own MC files


def test_choice_files_lists_maps_and_indices(tmp_path: Path) -> None:
    rows = [{"q": "one?", "choices": ["x", "y", "z"], "gold": 2},  # a list with a 0-based index
            {"q": "two?", "choices": ["x", "y"], "gold": "A"},  # a list with a letter
            {"q": "three?", "choices": ["p", "q", "r", "s", "t"], "gold": "1"}]  # five choices, a digit string
    path = _jsonl(tmp_path / "l.jsonl", rows * 2)
    spec, examples = load_task(str(path), "train", target_field="gold", choices_field="choices", eval_path=str(path))
    assert spec.labels == ["A", "B", "C", "D", "E"] and [e.target for e in examples[:3]] == ["C", "A", "B"]
    assert examples[2].options == dict(zip("ABCDE", "pqrst", strict=True))
    assert spec.template.endswith("{choices}\nAnswer:")
    assert render_prompt(spec, examples[0]) == "q: one?\nA. x\nB. y\nC. z\nAnswer:"
    tsv = tmp_path / "m.tsv"
    tsv.write_text('q\topts\tkey\nwhy?\t{"yes": "because", "no": "never"}\tno\nhow?\t{"yes": "so", "no": "not"}\tyes\n')
    spec, examples = load_task(str(tsv), "train", target_field="key", choices_field="opts", eval_path=str(tsv),
                               answer="text")
    assert spec.labels == ["yes", "no"] and spec.answer == "text" and examples[0].options == {"yes": "because",
                                                                                              "no": "never"}
    spec, examples = load_task(str(tsv), "eval", target_field="key", choices_field="opts", eval_path=str(tsv),
                               answer="name")
    assert spec.labels == ["answer1", "answer2"] and examples[0].target == "answer2"
    assert render_prompt(spec, examples[0]).endswith("answer1: because\nanswer2: never\nAnswer:")


def test_new_inputs_name_each_choice_as_training_did(tmp_path: Path) -> None:
    """answerK is the K-th label word of training (here "yes"), also for a new row that lists its choices in
    another order; a label training never saw is refused with the line."""
    tsv = tmp_path / "m.tsv"
    tsv.write_text('q\topts\tkey\nwhy?\t{"yes": "because", "no": "never"}\tno\nhow?\t{"no": "not", "yes": "so"}\tyes\n')
    spec, examples = load_task(str(tsv), "train", target_field="key", choices_field="opts", eval_path=str(tsv),
                               answer="name")
    assert spec.named_from == ["yes", "no"] and examples[1].options == {"answer2": "not", "answer1": "so"}
    new = _jsonl(tmp_path / "new.jsonl", [{"q": "who?", "opts": {"no": "nah", "yes": "yep"}},
                                          {"q": "what?", "opts": {"yes": "sure", "maybe": "hm"}}])
    with pytest.raises(ForethoughtError, match=r"new.jsonl line 2: choice label\(s\) maybe are not the task's"):
        read_inputs(new, spec)
    new.write_text(new.read_text().splitlines()[0] + "\n")
    (example,) = read_inputs(new, spec)
    assert example.options == {"answer2": "nah", "answer1": "yep"}
    assert render_prompt(spec, example).endswith("answer2: nah\nanswer1: yep\nAnswer:")


@pytest.mark.parametrize("row,message", [
    ({"q": "a", "c": "not json", "y": "A"}, "'c' must be a JSON list"),
    ({"q": "a", "c": ["only one"], "y": "A"}, "'c' must be a JSON list"),
    ({"q": "a", "c": ["x", "y"], "y": "C"}, "target 'C' is not one of the row's choices"),
    ({"q": "a", "c": {"k": "x", "m": ""}, "y": "k"}, "'c' has an empty label or choice text"),
])  # fmt: skip
def test_bad_choice_rows_name_file_line_and_field(tmp_path: Path, row: dict, message: str) -> None:
    path = _jsonl(tmp_path / "bad.jsonl", [{"q": "ok", "c": ["x", "y"], "y": "A"}, row])
    with pytest.raises(ForethoughtError, match=f"bad.jsonl line 2: {message}"):
        load_task(str(path), "train", target_field="y", choices_field="c", eval_path=str(path))


def test_text_answers_need_the_choices(tmp_path: Path) -> None:
    from cli_harness import expect_clean_failure

    expect_clean_failure(["predgen", "train", "--config", "tiny", "--task.name", str(EXAMPLE), "--task.target_field",
                          "answer", "--task.answer", "text", "--run.out_dir", str(tmp_path / "runs")],
                         tmp_path, tmp_path / "runs", ["task.answer text", "task.choices_field"])


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("mc") / "tiny-llama"
    tiny_llama_folder(folder, EXAMPLE.read_text() * 3 + " answer1 answer2 answer3 answer4 answer5", 260,
                      hidden_size=32, layers=2, heads=4, kv_heads=2)
    return folder


@pytest.mark.parametrize("answer,extra", [
    ("letter", ["--method", "predgen", "--head.reads", "states"]),
    ("text", ["--method", "predgen", "--head.reads", "choices", "--head.choice_loglik", "0"]),
    ("text", ["--method", "predgen", "--head.reads", "logits"]),
    ("text", ["--method", "predgen", "--head.reads", "choices", "--head.choice_loglik", "1"]),  # the ll variant
    ("name", ["--method", "predgen", "--head.reads", "choices"]),
    ("text", ["--method", "generator"]),
    ("name", ["--method", "predictor"]),
])  # fmt: skip
def test_the_example_file_trains_and_predicts_through_the_cli(tmp_path: Path, tiny_base: Path, answer: str,
                                                              extra: list[str]) -> None:
    rank = [] if "predictor" in extra else ["--eval.decoder", "rank"]
    code = main(["predgen", "train", "--config", "tiny", "--base", str(tiny_base), *MC_FILE, "--task.answer", answer,
                 *extra, *rank, "--train.steps", "1", "--eval.latency_examples", "0", "--run.out_dir", str(tmp_path),
                 "--run.name", "run"])
    assert code == 0
    evals = load_splits(TaskConfig(name=str(EXAMPLE), target_field="answer", choices_field="options", id_field="id",
                                   answer=answer, max_eval_examples=16), 0)[3]  # the run's eval split
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert res["eval_examples"] == len(evals) and "accuracy" in res and res.get("parse_failure_rate", 0) == 0
    assert ("rank" in res) == bool(rank)
    rows = [json.loads(x) for x in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    by_id = {e.id: e for e in evals}
    assert all(r["prediction"] in by_id[r["id"]].options for r in rows)  # always one of the item's own choices
    new = _jsonl(tmp_path / "new.jsonl", [{"question": "Which is hot?", "options": ["ice", "fire", "snow"]}])
    assert main(["predgen", "predict", "--model", str(tmp_path / "run"), "--input", str(new)]) == 0
    out = json.loads((tmp_path / "new.predictions.jsonl").read_text())
    assert out["prediction"] in ({"A", "B", "C"} if answer != "name" else {"answer1", "answer2", "answer3"})
