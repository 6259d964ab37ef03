"""The paper's other datasets as built-in tasks (SIQA, HellaSwag, WinoGrande, OpenBookQA; LCP, CLEAR,
Humicroedit): each reader on a few rows in the real file layout under a temporary data root, the hub fallback's
conversions (a fake ``datasets``), and the one-line errors. None of these needs /work/shared; the real-data check
at the end is marked ``data`` and runs only when FORETHOUGHT_DATA points at the data root.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from forethought.cli import main
from forethought.core.errors import ForethoughtError
from forethought.predgen.tasks import load_task, render_prompt
from forethought.testing import tiny_llama_folder

_USER_DATA_ROOT = os.environ.get("FORETHOUGHT_DATA")  # read before the fixtures below hide it

pytestmark = pytest.mark.usefixtures("isolated_env")  # conftest.py: no data root, no hub, a private cache

NEW_TASKS = ("siqa", "hellaswag", "winogrande", "openbookqa", "lcp", "lcp-multi", "clear", "humicroedit")


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _jsonl(path: Path, records: list[dict]) -> Path:
    return _write(path, "".join(json.dumps(r) + "\n" for r in records))


def _siqa_rows(n: int) -> list[dict]:
    return [{"context": f"Tracy did thing {i}.", "question": f"Why {i}?", "answerA": f"a{i}", "answerB": f"b{i}",
             "answerC": f"c{i}", "label": str(i % 3 + 1)} for i in range(n)]


def _make_root(root: Path) -> Path:
    # SIQA: rebuilt dev.jsonl with a label field, plus the official line-aligned labels file (which wins).
    _jsonl(root / "siqa" / "dev.jsonl", _siqa_rows(10))
    _write(root / "siqa" / "dev-labels.lst", "".join(f"{i % 3 + 1}\n" for i in range(10)))
    # HellaSwag: klosax's cleaned JSONL, int labels 0-3.
    _jsonl(root / "hellaswag" / "hellaswag_val.jsonl", [
        {"line_idx": i, "activity_label": "Canoeing", "ctx": f"A man is in a canoe {i}. he",
         "endings": [f"paddles {i}.", f"sinks {i}.", f"flies {i}.", f"sings {i}."], "label": i % 4}
        for i in range(10)
    ])  # fmt: skip
    # WinoGrande: sentence with "_", option1/2, answer "1"/"2"; official labels file.
    _jsonl(root / "winogrande" / "dev.jsonl", [
        {"sentence": f"Sarah beat Maria {i} times so _ won.", "option1": "Sarah", "option2": "Maria",
         "answer": str(i % 2 + 1)} for i in range(10)
    ])  # fmt: skip
    _write(root / "winogrande" / "dev-labels.lst", "".join(f"{i % 2 + 1}\n" for i in range(10)))
    # OpenBookQA Main TSV: choices as one string; the repeated "(D)" of the real train row 12-1145.
    header = "ID\tQuestion Stem\tChoices\tComplete Question\tAnswer Key\n"
    _write(root / "openbookqa" / "train.tsv", header
           + "7-980\tThe sun is responsible for\t(A) puppies learning new tricks (B) plants sprouting\t"
             "x\tB\n"
           + "12-1145\tA learned behavior\t(A) newborn turtles (B) seals clapping (C) ducks sitting (D) baby "
             "birds chewing worms (D) mother dogs nursing\tx\tB\n")  # fmt: skip
    _write(root / "openbookqa" / "test.tsv", header
           + "8-343\tThere is fog around:\t(A) a marsh (B) a tundra (C) the plains (D) a desert\tx\tA\n")
    # CompLex LCP: TSV, header, no quoting (a stray quote in a sentence), complexity 0-1.
    lcp_header = "id\tcorpus\tsentence\ttoken\tcomplexity\n"
    for kind in ("single", "multi"):
        _write(root / "complex_lcp2021" / f"lcp_{kind}_train.tsv", lcp_header
               + f'{kind}1\tbible\tHe said "go home.\tgo\t0.25\n{kind}2\tbiomed\tThe protein binds.\tprotein\t0.5\n')
        _write(root / "complex_lcp2021" / f"lcp_{kind}_test.tsv", lcp_header
               + f"{kind}3\teuroparl\tThe vote is closed.\tvote\t0.1\n")
    # CLEAR: RFC-4180 CSV, quoted excerpts with newlines and commas, 10 rows (80/20 seeded split).
    clear_rows = "".join(f'{i},Author {i},"Line one {i}, with a comma.\nLine two {i}.",{-1.5 + i / 10:.3f},0.4\n'
                         for i in range(10))
    _write(root / "clear_corpus" / "CLEAR_corpus_final.csv", "ID,Author,Excerpt,BT_easiness,s.e.\n" + clear_rows)
    # Humicroedit: CSV with the edited word marked <word/> in the original headline.
    hum_header = "id,original,edit,grades,meanGrade\n"
    _write(root / "humicroedit" / "train.csv", hum_header
           + '1723,"Thousands of gay and bisexual <men/> convicted, pardoned",swans,22100,1.0\n'
           + "12736,Special <prosecutor/> appointed to Trump Russia,chef,21100,0.8\n")
    _write(root / "humicroedit" / "dev.csv",
           hum_header + "36,Election tally shows <Austria/> turning right,Cars,31110,1.2\n")
    return root


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    data = _make_root(tmp_path / "data")
    monkeypatch.setenv("FORETHOUGHT_DATA", str(data))
    return data


def _both(name: str) -> tuple:
    spec, train = load_task(name, "train")
    _, evals = load_task(name, "eval")
    return spec, train, evals


# ---------------------------------------------------------------------------------------------- readers


def test_siqa(root: Path) -> None:
    spec, train, evals = _both("siqa")
    assert spec.labels == ["A", "B", "C"] and (len(train), len(evals)) == (8, 2)
    assert not {e.id for e in train} & {e.id for e in evals}
    ex = next(e for e in train + evals if e.id == "siqa-4")  # label line 5 is "2"
    assert ex.target == "B" and ex.options == {"A": "a4", "B": "b4", "C": "c4"}
    assert render_prompt(spec, ex) == "Context: Tracy did thing 4.\nQuestion: Why 4?\nA. a4\nB. b4\nC. c4\nAnswer:"
    # the official labels file wins over the rows' own label field
    _write(root / "siqa" / "dev-labels.lst", "".join("3\n" for _ in range(10)))
    assert {e.target for e in load_task("siqa", "train")[1]} == {"C"}


def test_siqa_without_labels_file_and_repeated_choice_texts(root: Path) -> None:
    (root / "siqa" / "dev-labels.lst").unlink()
    rows = _siqa_rows(10)
    rows[0].update(answerA="ok", answerB="skillful", answerC="ok", label="3")  # gold C repeats A's text
    _jsonl(root / "siqa" / "dev.jsonl", rows)
    examples = load_task("siqa", "train")[1] + load_task("siqa", "eval")[1]
    first = next(e for e in examples if e.id == "siqa-0")
    # the first letter keeps the text, whichever is gold: the choice set never depends on the label
    assert first.target == "A" and first.options == {"A": "ok", "B": "skillful"}
    assert "A. ok\nB. skillful\nC. ok" in first.fields["choices"]  # the prompt still shows every choice
    assert Counter(e.target for e in examples) == Counter({"A": 4, "B": 3, "C": 3})


def test_hellaswag(root: Path) -> None:
    spec, train, evals = _both("hellaswag")
    assert spec.labels == list("ABCD") and (len(train), len(evals)) == (8, 2)
    ex = next(e for e in train + evals if e.id == "hellaswag-3")
    assert ex.target == "D" and ex.options["D"] == "sings 3."
    assert render_prompt(spec, ex) == ("Activity: Canoeing\nContext: A man is in a canoe 3. he\nWhich ending fits?\n"
                                       "A. paddles 3.\nB. sinks 3.\nC. flies 3.\nD. sings 3.\nAnswer:")


def test_winogrande(root: Path) -> None:
    spec, train, evals = _both("winogrande")
    assert spec.labels == ["A", "B"] and (len(train), len(evals)) == (8, 2)
    ex = next(e for e in train + evals if e.id == "winogrande-1")
    assert ex.target == "B" and ex.options == {"A": "Sarah", "B": "Maria"}
    assert render_prompt(spec, ex).startswith("Sentence: Sarah beat Maria 1 times so _ won.\nWhich option fills")


def test_openbookqa(root: Path) -> None:
    spec, train, evals = _both("openbookqa")
    assert spec.labels == list("ABCD") and [e.id for e in train] == ["obqa-7-980", "obqa-12-1145"]
    assert train[0].options == {"A": "puppies learning new tricks", "B": "plants sprouting"}  # 2 choices parse too
    assert train[1].options["D"] == "baby birds chewing worms (D) mother dogs nursing"  # a repeated marker stays
    assert [(e.target, e.options["A"]) for e in evals] == [("A", "a marsh")]
    assert render_prompt(spec, evals[0]) == ("Question: There is fog around:\nA. a marsh\nB. a tundra\nC. the plains\n"
                                             "D. a desert\nAnswer:")


@pytest.mark.parametrize("name,kind", [("lcp", "single"), ("lcp-multi", "multi")])
def test_lcp(root: Path, name: str, kind: str) -> None:
    spec, train, evals = _both(name)
    assert spec.task_type == "regression" and spec.value_range == (0.0, 1.0)
    assert [(e.fields["sentence"], e.fields["token"], e.target) for e in train] == [
        ('He said "go home.', "go", 0.25), ("The protein binds.", "protein", 0.5)]
    assert [e.id for e in evals] == [f"lcp-{kind}-{kind}3"]
    assert render_prompt(spec, evals[0]) == "Sentence: The vote is closed.\nWord: vote\nComplexity (0 to 1):"


def test_clear(root: Path) -> None:
    spec, train, evals = _both("clear")
    assert spec.value_range == (-4.0, 2.0) and (len(train), len(evals)) == (8, 2)
    assert not {e.id for e in train} & {e.id for e in evals}
    ex = next(e for e in train + evals if e.id == "clear-3")
    assert ex.target == pytest.approx(-1.2) and ex.fields["excerpt"] == "Line one 3, with a comma. Line two 3."
    assert load_task("clear", "eval", seed=1)[1] != evals  # the split follows the seed


def test_humicroedit(root: Path) -> None:
    spec, train, evals = _both("humicroedit")
    assert spec.value_range == (0.0, 3.0)
    assert train[0].fields == {"original": "Thousands of gay and bisexual men convicted, pardoned",
                               "edited": "Thousands of gay and bisexual swans convicted, pardoned"}
    assert [e.target for e in train] == [1.0, 0.8] and train[0].id == "humicroedit-1723"
    assert render_prompt(spec, evals[0]) == ("Original headline: Election tally shows Austria turning right\n"
                                             "Edited headline: Election tally shows Cars turning right\n"
                                             "Funniness (0 to 3):")


def test_answer_text_and_renamed_labels_on_the_new_mc_tasks(root: Path) -> None:
    spec, train = load_task("winogrande", "train", answer="text")
    assert spec.answer == "text" and all(e.options for e in train)
    spec, train = load_task("siqa", "train", labels=["answerA", "answerB", "answerC"])
    assert spec.labels == ["answerA", "answerB", "answerC"] and {e.target for e in train} <= set(spec.labels)
    assert set(train[0].options) == set(spec.labels)
    with pytest.raises(ForethoughtError, match="answer 'text' applies to the multiple-choice"):
        load_task("humicroedit", "train", answer="text")


# ---------------------------------------------------------------------------------------------- errors


def test_bad_rows_name_file_line_and_field(root: Path) -> None:
    _jsonl(root / "hellaswag" / "hellaswag_val.jsonl", [{"activity_label": "a", "ctx": "b", "endings": ["x"] * 4,
                                                          "label": 4}])  # fmt: skip
    with pytest.raises(ForethoughtError, match=r"hellaswag_val\.jsonl line 1: label must be one of 0, 1, 2, 3"):
        load_task("hellaswag", "train")
    _write(root / "winogrande" / "dev-labels.lst", "1\n2\n")
    with pytest.raises(ForethoughtError, match=r"dev-labels\.lst has 2 labels but .*dev\.jsonl has 10"):
        load_task("winogrande", "train")
    _write(root / "openbookqa" / "test.tsv", "ID\tQuestion Stem\tChoices\tComplete Question\tAnswer Key\n"
           "1\tQ\t(A) x (B) y\tx\tE\n")
    with pytest.raises(ForethoughtError, match=r"test\.tsv line 2: answer key 'E' is not one of the choices"):
        load_task("openbookqa", "eval")
    _write(root / "complex_lcp2021" / "lcp_single_test.tsv", "id\tcorpus\tsentence\ttoken\tcomplexity\n"
           "a\tbible\tS.\tw\thigh\n")
    with pytest.raises(ForethoughtError, match=r"lcp_single_test\.tsv line 2: regression target 'complexity'"):
        load_task("lcp", "eval")
    _write(root / "humicroedit" / "dev.csv", "id,original,edit,grades,meanGrade\n1,No marker here,x,0,1.0\n")
    with pytest.raises(ForethoughtError, match=r"dev\.csv line 2: 'original' must mark the edited word once"):
        load_task("humicroedit", "eval")
    _write(root / "siqa" / "dev-labels.lst", "".join("4\n" for _ in range(10)))
    with pytest.raises(ForethoughtError, match=r"dev\.jsonl line 1: label must be one of 1, 2, 3, got '4'"):
        load_task("siqa", "train")


@pytest.mark.parametrize("name,file,hub", [
    ("siqa", "siqa/dev.jsonl", "allenai/social_i_qa"),
    ("hellaswag", "hellaswag/hellaswag_val.jsonl", "Rowan/hellaswag"),
    ("winogrande", "winogrande/dev.jsonl", "allenai/winogrande"),
    ("openbookqa", "openbookqa/test.tsv", "allenai/openbookqa"),
    ("humicroedit", "humicroedit/dev.csv", "SemEvalWorkshop/humicroedit"),
    ("lcp", "complex_lcp2021/lcp_single_test.tsv", "no reliable Hugging Face hub copy"),
    ("clear", "clear_corpus/CLEAR_corpus_final.csv", "no reliable Hugging Face hub copy"),
])  # fmt: skip
def test_missing_data_names_root_and_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, file: str,
                                         hub: str) -> None:
    with pytest.raises(ForethoughtError) as info:
        load_task(name, "eval")
    message = str(info.value)
    assert "FORETHOUGHT_DATA is not set" in message and hub in message and "\n" not in message
    monkeypatch.setenv("FORETHOUGHT_DATA", str(tmp_path))
    with pytest.raises(ForethoughtError) as info:
        load_task(name, "eval")
    message = str(info.value)
    assert str(tmp_path) in message and file in message and hub in message and "\n" not in message


# ---------------------------------------------------------------------------------------------- hub fallback

_FAKE_HUB = {
    ("allenai/social_i_qa", None): {"validation": [
        {"context": f"c{i}", "question": f"q{i}", "answerA": "x", "answerB": "y", "answerC": "z", "label": "2"}
        for i in range(10)]},
    ("Rowan/hellaswag", None): {"validation": [
        {"activity_label": "Home", "ctx": "[header] How to clean [title] Wipe it.  Then", "label": "1",
         "endings": ["a [step] b", "c", "d", "e"]} for _ in range(10)]},
    ("allenai/winogrande", "winogrande_xl"): {"validation": [
        {"sentence": "A _ B", "option1": "p", "option2": "q", "answer": "2"} for _ in range(10)]},
    ("allenai/openbookqa", "main"): {
        "train": [{"id": "t1", "question_stem": "Q?", "choices": {"text": ["a", "b", "c", "d"],
                                                                  "label": ["A", "B", "C", "D"]}, "answerKey": "C"}],
        "test": [{"id": "e1", "question_stem": "R?", "choices": {"text": ["a", "b", "c", "d"],
                                                                 "label": ["A", "B", "C", "D"]}, "answerKey": "A"}]},
    ("SemEvalWorkshop/humicroedit", "subtask-1"): {
        "train": [{"id": 5, "original": "A <cat/> sat", "edit": "dog", "grades": "1", "meanGrade": 0.4}],
        "validation": [{"id": 6, "original": "The <sun/> rose", "edit": "pie", "grades": "2", "meanGrade": 1.6}]},
}  # fmt: skip


def test_hub_fallback_conversions(monkeypatch: pytest.MonkeyPatch) -> None:
    from forethought.core import env
    from forethought.predgen.tasks import builtin

    monkeypatch.setattr(env, "datasets_available", lambda: True)
    monkeypatch.setattr(builtin, "_hub_dataset", lambda hub_id, config: _FAKE_HUB[(hub_id, config)])
    _, train, evals = _both("siqa")
    assert (len(train), len(evals)) == (8, 2) and {e.target for e in train + evals} == {"B"}
    _, train, _ = _both("hellaswag")  # the hub's raw text is cleaned as the offline copy was
    assert train[0].fields["context"] == "How to clean. Wipe it. Then" and train[0].options["A"] == "a b"
    assert train[0].target == "B"
    _, train, _ = _both("winogrande")
    assert train[0].target == "B" and train[0].options == {"A": "p", "B": "q"}
    _, train, evals = _both("openbookqa")
    assert (train[0].target, evals[0].target, train[0].id) == ("C", "A", "obqa-t1")
    _, train, evals = _both("humicroedit")
    assert train[0].fields == {"original": "A cat sat", "edited": "A dog sat"} and evals[0].target == 1.6


# ---------------------------------------------------------------------------------------------- through the CLI


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama whose tokenizer knows the fake rows' words and digits."""
    folder = tmp_path_factory.mktemp("datasets") / "tiny-llama"
    text = " ".join(["Context Question Answer Activity Which ending fits option fills Sentence Word Complexity",
                     "Excerpt Reading ease Original Edited headline Funniness A B C D 0.00 1.25 2.50 -3.75 0 1 2 3 4",
                     "5 6 7 8 9 Tracy Sarah Maria canoe paddles sinks flies sings marsh tundra plains desert"] * 20)
    tiny_llama_folder(folder, text, 200, hidden_size=32, layers=2, heads=4, kv_heads=2)
    return folder


@pytest.mark.parametrize("task,answer", [(t, "letter") for t in NEW_TASKS] + [("siqa", "text")])
def test_every_new_task_trains_and_evaluates(root: Path, tmp_path: Path, tiny_base: Path, task: str,
                                             answer: str) -> None:
    code = main(["predgen", "train", "--config", "tiny", "--base", str(tiny_base), "--task.name", task,
                 "--task.answer", answer, "--train.steps", "1", "--eval.latency_examples", "0",
                 "--run.out_dir", str(tmp_path), "--run.name", task])
    assert code == 0
    res = json.loads((tmp_path / task / "results.json").read_text())
    assert res["parse_failure_rate"] == 0 and res["eval_examples"] == len(load_task(task, "eval")[1])
    assert ("accuracy" in res) == (task in ("siqa", "hellaswag", "winogrande", "openbookqa"))
    assert ("accuracy" in res) != ({"mse", "mae"} <= set(res))  # the paper's regression metrics


# ---------------------------------------------------------------------------------------------- real data

_REAL = {  # (train, eval, eval label counts or (eval mean, eval min, eval max)) from the files in SOURCES.md
    "siqa": (1_563, 391, {"A": 123, "B": 137, "C": 131}),
    "hellaswag": (8_034, 2_008, {"A": 515, "B": 492, "C": 503, "D": 498}),
    "winogrande": (1_014, 253, {"A": 119, "B": 134}),
    "openbookqa": (4_957, 500, {"A": 138, "B": 126, "C": 132, "D": 104}),
    "lcp": (7_662, 917, (0.296, 0.0, 0.778)),
    "lcp-multi": (1_517, 184, (0.422, 0.0, 0.800)),
    "clear": (3_779, 945, (-0.993, -3.676, 1.547)),
    "humicroedit": (9_652, 2_419, (0.935, 0.0, 3.0)),
}


@pytest.mark.data
def test_real_data(monkeypatch: pytest.MonkeyPatch) -> None:
    if not _USER_DATA_ROOT or not (Path(_USER_DATA_ROOT) / "siqa" / "dev.jsonl").is_file():
        pytest.skip("set FORETHOUGHT_DATA to the benchmark data root to run the data tests")
    monkeypatch.setenv("FORETHOUGHT_DATA", _USER_DATA_ROOT)
    for name, (n_train, n_eval, stats) in _REAL.items():
        spec, train, evals = _both(name)
        assert (len(train), len(evals)) == (n_train, n_eval), name
        if isinstance(stats, dict):
            assert dict(Counter(e.target for e in evals)) == stats, name
            assert all(e.target in e.options for e in train + evals), name
        else:
            targets = [float(e.target) for e in evals]
            mean = sum(targets) / len(targets)
            assert (round(mean, 3), min(targets), max(targets)) == pytest.approx(stats, abs=1e-3), name
        assert render_prompt(spec, evals[0]).endswith(":"), name


@pytest.mark.parametrize("task,names", [
    ("clear", ["task 'clear' not found", "FORETHOUGHT_DATA", "no reliable Hugging Face hub copy",
               "clear_corpus/CLEAR_corpus_final.csv"]),
    ("hellaswag", ["task 'hellaswag' not found", "FORETHOUGHT_DATA", "Rowan/hellaswag"]),
])  # fmt: skip
def test_cli_missing_data_fails_cleanly(tmp_path: Path, task: str, names: list[str]) -> None:
    """Through the real CLI, without a data root: one line naming both places, exit 2, no run folder."""
    from cli_harness import expect_clean_failure

    expect_clean_failure(["predgen", "train", "--config", "tiny", "--base", str(tmp_path / "no-model"),
                          "--task.name", task, "--run.out_dir", str(tmp_path / "runs")], tmp_path, tmp_path / "runs",
                         names, env={"FORETHOUGHT_DATA": ""})


def test_every_multiple_choice_task_has_a_name_format_prompt() -> None:
    """answer 'name' rewrites the ``choices`` field, so every multiple-choice task's name-format prompt lists it
    (PIQA's own template lists sol1/sol2 instead and has its own), and the options list the tasks."""
    from forethought.predgen.config import TaskConfig
    from forethought.predgen.tasks.builtin import MULTIPLE_CHOICE, known_tasks, named_template

    assert set(MULTIPLE_CHOICE) <= set(known_tasks())
    for task in MULTIPLE_CHOICE:
        assert "{choices}" in named_template(task), task
    assert named_template("piqa") == "Goal: {goal}\n{choices}\nAnswer:"
    with pytest.raises(ForethoughtError, match="openbookqa"):  # the error names every multiple-choice task
        TaskConfig(name="x.csv", answer="name").options(builtin=False)


def test_name_answers_on_a_new_task_through_the_cli(root: Path, tmp_path: Path, tiny_base: Path) -> None:
    """--task.answer name on SIQA: answer1..answer3 are the label words, the prompt lists each choice after its
    name, and training and evaluation run."""
    spec, evals = load_task("siqa", "eval", answer="name")
    assert spec.labels == ["answer1", "answer2", "answer3"] and {e.target for e in evals} <= set(spec.labels)
    prompt = render_prompt(spec, evals[0])
    assert "answer1: a" in prompt and "answer3: c" in prompt and "A. " not in prompt
    code = main(["predgen", "train", "--config", "tiny", "--base", str(tiny_base), "--task.name", "siqa",
                 "--task.answer", "name", "--train.steps", "1", "--eval.latency_examples", "0",
                 "--run.out_dir", str(tmp_path), "--run.name", "siqa-name"])
    assert code == 0
    res = json.loads((tmp_path / "siqa-name" / "results.json").read_text())
    assert res["parse_failure_rate"] == 0 and res["eval_examples"] == len(evals) and "accuracy" in res
    rows = [json.loads(line) for line in (tmp_path / "siqa-name" / "predictions.jsonl").read_text().splitlines()]
    assert {r["target"] for r in rows} <= set(spec.labels) and {r["prediction"] for r in rows} <= set(spec.labels)
