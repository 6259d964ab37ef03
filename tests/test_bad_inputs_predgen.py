"""The bad-input matrix, PredGen part: the real CLI (``tests/cli_harness.py``; settings refused as the config
loads in this process, the rest in processes of their own) on a tiny random Llama saved with its tokenizer.
Every case exits with status 2, prints one line on stderr that names the problem and no traceback, and leaves
the run folder as it was (a fresh run's folder is never created: inputs are checked before anything is
written)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_harness import expect_clean_failure

from forethought.cli import main
from forethought.testing import tiny_llama_folder, write_csv

_REVIEWS = [("good movie", "positive"), ("bad plot", "negative"), ("great actor", "positive"),
            ("dull scene", "negative")]
ROWS = [{"id": f"r{i}", "text": _REVIEWS[i % 4][0], "label": _REVIEWS[i % 4][1], "score": f"{i % 5}.5"}
        for i in range(24)]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A task file, a tiny Llama + tokenizer folder, and one run trained on them for a step (its saved model)."""
    root = tmp_path_factory.mktemp("predgen-bad")
    data = write_csv(root / "reviews.csv", ROWS)
    text = "\n".join(f"text: {r['text']}\nAnswer: {r['label']} {r['score']}" for r in ROWS) * 3
    base = root / "tiny-llama"
    tiny_llama_folder(base, text, 300, hidden_size=16, layers=2, heads=2, kv_heads=1)
    code = main(["predgen", "train", "--method", "predictor", "--base", str(base), "--task.name", str(data),
                 "--task.target_field", "label", "--task.text_fields", "[text]", "--adapter.r", "2",
                 "--train.steps", "1", "--train.batch_size", "4", "--eval.latency_examples", "0",
                 "--run.out_dir", str(root / "runs"), "--run.name", "trained"])
    assert code == 0
    return {"root": root, "data": data, "base": base, "run": root / "runs" / "trained"}


def _train(world: dict, tmp_path: Path, args: list[str], names: list[str]) -> None:
    """A fresh ``predgen train`` that must fail before its run folder exists."""
    runs = tmp_path / "runs"
    expect_clean_failure(["predgen", "train", "--method", "predictor", "--base", str(world["base"]),
                          "--train.steps", "1", "--run.out_dir", str(runs), "--run.name", "fresh", *args],
                         tmp_path, runs, names)
    assert not runs.exists(), "the run folder was created"


def _file_task(path: Path, *extra: str) -> list[str]:
    return ["--task.name", str(path), "--task.target_field", "label", *extra]


def test_unknown_task(world: dict, tmp_path: Path) -> None:
    _train(world, tmp_path, ["--task.name", "nosuchtask"], ["unknown task 'nosuchtask'", "sst2"])


def test_missing_target_column(world: dict, tmp_path: Path) -> None:
    _train(world, tmp_path, ["--task.name", str(world["data"]), "--task.target_field", "stars"],
           ["no column 'stars'", "reviews.csv", "id, text, label, score"])


def test_non_numeric_regression_target(world: dict, tmp_path: Path) -> None:
    bad = write_csv(tmp_path / "scores.csv", [{"text": "a", "score": "1.5"}, {"text": "b", "score": "high"},
                                         {"text": "c", "score": "2"}])
    _train(world, tmp_path, ["--task.name", str(bad), "--task.target_field", "score", "--task.task_type",
                             "regression"], ["scores.csv line 3", "'score' is not a number", "'high'"])


def test_eval_label_never_seen_in_training(world: dict, tmp_path: Path) -> None:
    dev = write_csv(tmp_path / "dev.csv", [{"id": "d1", "text": "meh", "label": "neutral", "score": "1"}])
    _train(world, tmp_path, _file_task(world["data"], "--task.eval_path", str(dev)),
           ["'neutral'", "never occur in the train split", "negative, positive"])


@pytest.mark.parametrize("content,names", [("", ["is empty"]), ("text,label\n", ["has no examples"])])
def test_empty_file(world: dict, tmp_path: Path, content: str, names: list[str]) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text(content)
    _train(world, tmp_path, _file_task(empty), ["empty.csv", *names])


def test_headerless_csv(world: dict, tmp_path: Path) -> None:
    headerless = tmp_path / "headerless.csv"
    headerless.write_text("good movie,positive\nbad plot,negative\ngreat actor,positive\n")
    _train(world, tmp_path, _file_task(headerless), ["no column 'label'", "good movie, positive",
                                                     "first line must name the columns"])


def test_train_layer_out_of_range(world: dict, tmp_path: Path) -> None:
    _train(world, tmp_path, [*_file_task(world["data"]), "--layer", "99"], ["layer 99 is out of range", "2 layers"])


def test_device_without_cuda(world: dict, tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    _train(world, tmp_path, [*_file_task(world["data"]), "--run.device", "cuda"], ["cuda", "not available"])


# ---------------------------------------------------------------------------------------------- saved models


def _copy(world: dict, tmp_path: Path) -> Path:
    run = tmp_path / "trained"
    shutil.copytree(world["run"], run)
    return run


def _doctor(run: Path, edit: dict) -> None:
    """Rewrite the saved predgen.json: ``None`` values delete their (dotted) key, others replace it."""
    path = run / "model" / "predgen.json"
    meta = json.loads(path.read_text())
    for key, value in edit.items():
        *parents, last = key.split(".")
        target = meta
        for p in parents:
            target = target[p]
        if value is None:
            del target[last]
        else:
            target[last] = value
    path.write_text(json.dumps(meta))


def test_mine_layer_out_of_range(world: dict, tmp_path: Path) -> None:
    run = _copy(world, tmp_path)
    expect_clean_failure(["predgen", "mine", "--model", str(run), "--layer", "99", "--steps", "1"], tmp_path, run,
                         ["layer 99 is out of range"])


@pytest.mark.parametrize("edit,names", [
    ({"layer": None}, ["predgen.json", "missing layer"]),
    ({"task_spec.labels": None}, ["predgen.json task_spec", "missing key(s) labels"]),
    ({"head": {"pooling": "last"}}, ["predgen.json", "missing key(s) head.hidden"]),
    ({"layer": 99}, ["layer 99 is out of range"]),
])
def test_eval_of_a_doctored_saved_model(world: dict, tmp_path: Path, edit: dict, names: list[str]) -> None:
    run = _copy(world, tmp_path)
    _doctor(run, edit)
    expect_clean_failure(["predgen", "eval", "--model", str(run)], tmp_path, run, names)


def test_eval_after_the_data_changed(world: dict, tmp_path: Path) -> None:
    """The run recorded its held-out ids; a data file edited since training must not be split silently anew."""
    run = _copy(world, tmp_path)
    data = write_csv(tmp_path / "reviews.csv", ROWS[:-1])
    _doctor(run, {"data.task.name": str(data)})
    expect_clean_failure(["predgen", "eval", "--model", str(run)], tmp_path, run,
                         ["eval split is not the one the model was held out from", "changed since training"])


def test_eval_on_a_missing_device(world: dict, tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    run = _copy(world, tmp_path)
    expect_clean_failure(["predgen", "eval", "--model", str(run), "--device", "cuda"], tmp_path, run,
                         ["cuda", "not available"])


def _rows_file(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("case,names", [
    ("missing", ["no such run folder or predictions file", "nowhere"]),
    ("step_not_kept", ["has no curve predictions at step 5", "--train.eval_every"]),
    ("step_of_a_file", ["curve point of a run folder", "is a file"]),
    ("other_ids", ["different examples"]),
    ("decoded_of_a_predictor", ["no 'decoded'", "a predictor's run writes no 'decoded'"]),
    ("regression_vs_classes", ["a classification task's", "a regression task's"]),
    ("not_json", ["line 2: invalid json"]),
])
def test_compare_bad_inputs(world: dict, tmp_path: Path, case: str, names: list[str]) -> None:
    """``predgen compare`` on sides it cannot pair: one line, exit 2, the run folder and the --out target untouched."""
    run = _copy(world, tmp_path)
    rows = [json.loads(x) for x in (run / "predictions.jsonl").read_text().splitlines()]
    made = {"other_ids": [{**r, "id": r["id"] + "x"} for r in rows],
            "regression_vs_classes": [{**r, "target": 1.5, "prediction": 1.0} for r in rows], "not_json": rows[:1]}
    file = str(_rows_file(tmp_path / "x.jsonl", made[case])) if case in made else ""
    if case == "not_json":
        with (tmp_path / "x.jsonl").open("a") as f:
            f.write("{oops\n")
    sides = {"missing": [str(tmp_path / "nowhere"), str(run)],
             "step_not_kept": [str(run), str(run), "--step_a", "5"],
             "step_of_a_file": [str(run / "predictions.jsonl"), str(run), "--step_a", "1"],
             "decoded_of_a_predictor": [str(run), str(run), "--key_b", "decoded"]}.get(case, [file, str(run)])
    a, b, *extra = sides
    out = tmp_path / "cmp" / "out.json"
    expect_clean_failure(["predgen", "compare", "--a", a, "--b", b, "--out", str(out), *extra], tmp_path, run, names)
    assert not out.exists() and not out.parent.exists()


# ---------------------------------------------------------------------------------------------- settings at load

BAD_SETTINGS = [
    (["--eval.batch_size", "0"], ["eval: batch_size must be at least 1", "0"]),
    (["--eval.latency_examples", "-1"], ["latency_examples must be at least 0"]),
    (["--eval.decoder", "beam"], ["eval.decoder", "'greedy', 'expected', 'rank'"]),
    (["--head.pooling", "maxx"], ["head.pooling", "'maxx'"]),
    (["--head.hidden", "0"], ["head: hidden must be at least 1"]),
    (["--head.lr_scale", "0"], ["head: lr_scale must be a positive number"]),
    (["--head.reads", "tokens"], ["head.reads", "'auto', 'states', 'logits', 'choices', 'choices_loglik'"]),
    (["--adapter.r", "0"], ["adapter: r must be at least 1"]),
    (["--adapter.alpha", "-2"], ["adapter: alpha must be a positive number"]),
    (["--adapter.dropout", "1"], ["adapter: dropout must be in [0, 1)"]),
    (["--adapter.method", "qlora"], ["adapter.method", "'lora'"]),
    (["--adapter.target_modules", " , "], ["target_modules must name at least one module"]),
    (["--prompt.max_prompt_tokens", "0"], ["prompt: max_prompt_tokens must be at least 1"]),
    (["--prompt.decimals", "-1"], ["prompt: decimals must be in [0, 6]"]),
    (["--prompt.truncate_side", "middle"], ["prompt.truncate_side", "'left'"]),
    (["--predgen.p_end", "1.5"], ["predgen: p_end must be in [0, 1]"]),
    (["--predgen.ramp_steps", "-3"], ["predgen: ramp_steps must be at least 0"]),
    (["--predgen.schedule", "cubic"], ["predgen.schedule", "'linear'"]),
    (["--predgen.per", "epoch"], ["predgen.per", "'token', 'sequence', 'batch'"]),
    (["--predgen.own_tokens", "teacher"], ["predgen.own_tokens", "'rollout', 'one_pass'"]),
    (["--method", "generator", "--head.reads", "choices_loglik"], ["head.reads choices_loglik", "--method predgen"]),
    (["--task.max_train_examples", "-1"], ["task: max_train_examples must be at least 0"]),
    (["--task.answer", "index"], ["task.answer", "'letter', 'text', 'name'"]),
    (["--task.task_type", "ranking"], ["task.task_type", "'classification'"]),
    (["--method", "oracle"], ["method", "'predictor'"]),
    (["--method", "predictor", "--head.pooling", "attention"], ["head.pooling attention", "last or mean"]),
    (["--method", "predgen", "--head.pooling", "last"], ["head.pooling last", "attention or mean"]),
    (["--method", "generator", "--head.reads", "logits"], ["head.reads logits", "--method predgen"]),
    (["--method", "predictor", "--eval.decoder", "rank"], ["eval.decoder rank", "predictor"]),
    (["--head.choice_alpha", "-1"], ["head: choice_alpha must be at least 0"]),
    (["--method", "predgen", "--head.choice_alpha", "0"], ["head.choice_alpha", "reads states"]),
    (["--head.choice_loglik", "-1"], ["head: choice_loglik must be at least 0"]),
    (["--method", "predgen", "--head.choice_loglik", "1"], ["head.choice_loglik", "reads states"]),
    (["--method", "predgen", "--head.reads", "states", "--head.choice_loglik", "1"],
     ["head.choice_loglik", "--head.reads choices"]),
]


@pytest.mark.parametrize("args,names", BAD_SETTINGS, ids=[" ".join(a) for a, _ in BAD_SETTINGS])
def test_bad_settings_fail_at_load(world: dict, tmp_path: Path, args: list[str], names: list[str]) -> None:
    """Every PredGen setting is checked when the config loads: the base named here does not exist, so reaching
    the model (or the data) would be another error."""
    runs = tmp_path / "runs"
    expect_clean_failure(["predgen", "train", "--base", str(tmp_path / "no-such-model"), "--task.name",
                          str(tmp_path / "no-such.csv"), "--run.out_dir", str(runs), "--run.name", "fresh", *args],
                         tmp_path, runs, names, in_process=True)
    assert not runs.exists(), "the run folder was created"


@pytest.mark.parametrize("args,names", [(["--max_examples", "-2"], ["max_examples must be at least 0"]),
                                        (["--eval.batch_size", "0"], ["eval: batch_size must be at least 1"])])
def test_bad_eval_settings_fail_at_load(world: dict, tmp_path: Path, args: list[str], names: list[str]) -> None:
    run = _copy(world, tmp_path)
    expect_clean_failure(["predgen", "eval", "--model", str(run), *args], tmp_path, run, names, in_process=True)


@pytest.mark.parametrize("extra,names", [(["--eval.decoder", "rank"], ["eval.decoder rank", "regression task"]),
                                         (["--head.reads", "logits"], ["head.reads logits", "regression task"])])
def test_class_settings_on_a_regression_task(world: dict, tmp_path: Path, extra: list[str], names: list[str]) -> None:
    _train(world, tmp_path, ["--task.name", str(world["data"]), "--task.target_field", "score", "--task.task_type",
                             "regression", "--method", "predgen", *extra], names)


def test_validation_split_larger_than_the_training_data(world: dict, tmp_path: Path) -> None:
    _train(world, tmp_path, [*_file_task(world["data"]), "--task.val_examples", "500"],
           ["task.val_examples 500 leaves no training examples", "has 19"])


@pytest.mark.parametrize("args,names", [
    (["--task.name", "sst2", "--task.answer", "name"], ["answer 'name' applies to the multiple-choice tasks"]),
    (["--task.name", "arc-easy", "--task.answer", "name", "--task.labels", "[w,x,y,z,v]"],
     ["answer name", "excludes task.labels"]),
])
def test_name_answers_need_choices(world: dict, tmp_path: Path, args: list[str], names: list[str]) -> None:
    from test_predgen_tasks import _make_root

    runs = tmp_path / "runs"
    expect_clean_failure(["predgen", "train", "--base", str(world["base"]), "--run.out_dir", str(runs),
                          "--run.name", "fresh", *args], tmp_path, runs, names,
                         env={"FORETHOUGHT_DATA": str(_make_root(tmp_path / "data"))})
    assert not runs.exists()
