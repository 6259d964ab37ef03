"""PredGen tasks: loading every built-in from a tiny fake data root (real file layouts), data-file tasks, errors,
prompt rendering with truncation, and the answer format.

The real-data check at the end is marked ``data`` and runs only when FORETHOUGHT_DATA points at the data root.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from forethought.core.errors import ForethoughtError
from forethought.data.tokenizers import gpt2_tiktoken_file, load_tokenizer
from forethought.predgen.tasks import (
    Example,
    TaskSpec,
    format_target,
    known_tasks,
    load_task,
    parse_target,
    render_prompt,
)

_USER_DATA_ROOT = os.environ.get("FORETHOUGHT_DATA")  # read before the fixtures below hide it

pytestmark = pytest.mark.usefixtures("isolated_env")  # conftest.py: no data root, no hub, a private cache


@pytest.fixture(scope="module")
def gpt2(cache: Path):  # noqa: ANN201 - a transformers tokenizer
    if gpt2_tiktoken_file() is None:
        pytest.skip("openai-whisper (gpt2.tiktoken) not installed")
    return load_tokenizer("gpt2", cache_dir=cache / "tokenizers")


# ---------------------------------------------------------------------------------------------- fake data root


def _write(path: Path, text: str, newline: str = "\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as fh:
        fh.write(text.replace("\n", newline))
    return path


def _jsonl(path: Path, records: list[dict]) -> Path:
    return _write(path, "".join(json.dumps(r) + "\n" for r in records))


def _arc_record(qid: str, stem: str, labels: list[str], answer: str) -> dict:
    choices = [{"text": f"{stem} option {i}", "label": label} for i, label in enumerate(labels)]
    return {"id": qid, "question": {"stem": stem, "choices": choices}, "answerKey": answer}


def _make_root(root: Path) -> Path:
    # SST-2: GLUE TSV with header, trailing spaces, a stray double quote (needs QUOTE_NONE).
    _write(
        root / "sst2" / "train.tsv",
        'sentence\tlabel\nhide new secretions from the parental units \t0\n'
        'that loves its characters \t1\n" a quoted start and no end \t1\ncontains no wit \t0\n',
    )
    _write(root / "sst2" / "dev.tsv", "sentence\tlabel\nit 's a charming journey \t1\nunfunny and slow \t0\n")
    # BoolQ: only val.jsonl; labels are the strings "true"/"false" as in the SuperGLUE copy (one JSON bool too).
    _jsonl(
        root / "boolq" / "val.jsonl",
        [
            {"question": f"is thing {i} true", "passage": f"Thing {i} -- a passage about thing {i}.", "idx": i,
             "label": (True if i == 3 else ("true" if i % 2 else "false"))}
            for i in range(20)
        ],
    )  # fmt: skip
    # ARC: original AI2 JSONL; numeric labels 1-4, a 3-choice and a 5-choice question.
    for level in ("Easy", "Challenge"):
        _jsonl(
            root / "arc" / f"ARC-{level}-Dev.jsonl",
            [
                _arc_record(f"{level}-d1", "Which is a mammal?", ["A", "B", "C", "D"], "C"),
                _arc_record(f"{level}-d2", "What melts ice?", ["1", "2", "3", "4"], "2"),
                _arc_record(f"{level}-d3", "Pick one of three.", ["A", "B", "C"], "A"),
            ],
        )
        _jsonl(
            root / "arc" / f"ARC-{level}-Test.jsonl",
            [
                _arc_record(f"{level}-t1", "Pick one of five.", ["A", "B", "C", "D", "E"], "E"),
                _arc_record(f"{level}-t2", "Numeric again?", ["1", "2", "3", "4"], "4"),
            ],
        )
    # PIQA: valid.jsonl + line-aligned valid-labels.lst.
    _jsonl(root / "piqa" / "valid.jsonl", [{"goal": f"goal {i}", "sol1": f"first {i}", "sol2": f"second {i}"}
                                           for i in range(20)])  # fmt: skip
    _write(root / "piqa" / "valid-labels.lst", "".join(f"{i % 2}\n" for i in range(20)))
    # STS-B: tab-separated, no header, no quoting; one row with 2 extra trailing columns.
    _write(
        root / "stsb" / "sts-train.csv",
        "main-captions\tMSRvid\t2012test\t0001\t5.000\tA plane is taking off.\tAn air plane is taking off.\n"
        'main-captions\tMSRvid\t2012test\t0004\t3.800\tA man "plays" a flute.\tA man is playing a flute.\n'
        "main-news\theadlines\t2013\t0010\t0.500\tOne.\tTwo.\tsrc-a\tsrc-b\n",
    )
    _write(root / "stsb" / "sts-dev.csv", "main-forums\tdeft\t2014\t0002\t2.250\tHi there.\tHello there.\n")
    # SICK: TSV with header, CRLF line endings, 12 columns, TRAIN / TRIAL / TEST rows.
    header = ("pair_ID\tsentence_A\tsentence_B\tentailment_label\trelatedness_score\tentailment_AB\tentailment_BA\t"
              "sentence_A_original\tsentence_B_original\tsentence_A_dataset\tsentence_B_dataset\t"
              "SemEval_set")  # fmt: skip
    rows = [
        (1, "A kid plays", "A child plays", "4.5", "TRAIN"),
        (2, "A dog runs", "A cat sleeps", "1.2", "TRAIN"),
        (3, "A man cooks", "A man is cooking", "4.9", "TRIAL"),
        (4, "Two men talk", "Nobody talks", "2.1", "TEST"),
    ]
    lines = [header] + [
        f"{pid}\t{a}\t{b}\tNEUTRAL\t{score}\tA_neutral_B\tB_neutral_A\t{a}.\t{b}.\tFLICKR\tFLICKR\t{split}"
        for pid, a, b, score, split in rows
    ]
    _write(root / "sick" / "SICK.txt", "\n".join(lines) + "\n", newline="\r\n")
    # WASSA-2017: TSV without header: id, tweet, emotion, intensity.
    for k, emotion in enumerate(("anger", "fear", "joy", "sadness")):
        base = 10000 * (k + 1)
        _write(
            root / "wassa2017" / f"{emotion}-ratings-0to1.train.txt",
            f'{base}\tSo "{emotion}" right now #{emotion}\t{emotion}\t0.938\n{base + 1}\tmeh @user\t{emotion}\t0.2\n',
        )
        dev = root / "wassa2017" / f"{emotion}-ratings-0to1.dev.gold.txt"
        _write(dev, f"{base + 900}\tdev tweet\t{emotion}\t0.5\n")
    return root


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    data = _make_root(tmp_path / "data")
    monkeypatch.setenv("FORETHOUGHT_DATA", str(data))
    return data


# ---------------------------------------------------------------------------------------------- built-ins


def test_known_tasks() -> None:
    names = known_tasks()
    for name in ("sst2", "boolq", "arc-easy", "arc-challenge", "piqa", "stsb", "sick", "wassa", "wassa-joy"):
        assert name in names


def test_sst2(root: Path) -> None:
    spec, train = load_task("sst2", "train")
    assert spec.task_type == "classification" and spec.labels == ["negative", "positive"]
    assert [ex.target for ex in train] == ["negative", "positive", "positive", "negative"]
    assert train[0].fields == {"sentence": "hide new secretions from the parental units"}
    assert train[2].fields["sentence"] == '" a quoted start and no end'  # QUOTE_NONE keeps the quote
    assert render_prompt(spec, train[0]) == "Review: hide new secretions from the parental units\nSentiment:"
    _, dev = load_task("sst2", "eval")
    assert [ex.target for ex in dev] == ["positive", "negative"]
    assert len({ex.id for ex in train + dev}) == 6


def test_boolq_seeded_split(root: Path) -> None:
    spec, train = load_task("boolq", "train", seed=3)
    _, evals = load_task("boolq", "eval", seed=3)
    assert spec.labels == ["no", "yes"] and spec.long_field == "passage" and spec.truncate_side == "right"
    assert len(train) == 16 and len(evals) == 4  # 80 / 20 of 20 rows
    ids_train, ids_eval = {ex.id for ex in train}, {ex.id for ex in evals}
    assert not ids_train & ids_eval and len(ids_train | ids_eval) == 20
    assert [ex.id for ex in load_task("boolq", "train", seed=3)[1]] == [ex.id for ex in train]  # deterministic
    assert {ex.id for ex in load_task("boolq", "eval", seed=4)[1]} != ids_eval  # the seed matters
    by_id = {ex.id: ex for ex in train + evals}
    assert by_id["boolq-1"].target == "yes" and by_id["boolq-2"].target == "no" and by_id["boolq-3"].target == "yes"
    assert by_id["boolq-1"].fields["question"] == "is thing 1 true?"
    assert render_prompt(spec, by_id["boolq-1"]).endswith("Question: is thing 1 true?\nAnswer:")


@pytest.mark.parametrize("level", ["easy", "challenge"])
def test_arc_numeric_labels_mapped(root: Path, level: str) -> None:
    spec, train = load_task(f"arc-{level}", "train")
    assert spec.labels == ["A", "B", "C", "D", "E"]
    assert [ex.target for ex in train] == ["C", "B", "A"]  # "2" -> B
    numeric = train[1]
    assert numeric.fields["choices"].splitlines() == [f"{L}. What melts ice? option {i}" for i, L in enumerate("ABCD")]
    assert train[2].fields["choices"].count("\n") == 2  # three choices
    prompt = render_prompt(spec, numeric)
    assert prompt.startswith("Question: What melts ice?\nA. ")
    assert prompt.endswith("\nD. What melts ice? option 3\nAnswer:")
    _, test = load_task(f"arc-{level}", "eval")  # the Test file is the eval split
    assert [ex.target for ex in test] == ["E", "D"] and test[0].id == f"{level.title()}-t1"


def test_text_answers_and_renamed_labels(root: Path) -> None:
    spec, train = load_task("arc-easy", "train", answer="text")
    assert spec.answer == "text" and spec.labels == list("ABCDE")
    assert train[1].options == {L: f"What melts ice? option {i}" for i, L in enumerate("ABCD")}  # "1".."4" -> A-D
    assert train[1].options[train[1].target] == "What melts ice? option 1"
    _, piqa = load_task("piqa", "train", answer="text")
    assert all(ex.options == {"A": ex.fields["sol1"], "B": ex.fields["sol2"]} for ex in piqa)
    with pytest.raises(ForethoughtError, match="answer 'text' applies to the multiple-choice tasks"):
        load_task("sst2", "train", answer="text")
    # label words of several tokens for a built-in task: targets and spec follow, class order kept
    spec, renamed = load_task("sst2", "train", labels=["rather bad", "quite good"])
    assert spec.labels == ["rather bad", "quite good"]
    assert [ex.target for ex in renamed] == ["rather bad", "quite good", "quite good", "rather bad"]
    for bad, match in ((["one"], "has 2 classes"), (["x", "x"], "distinct")):
        with pytest.raises(ForethoughtError, match=match):
            load_task("sst2", "train", labels=bad)
    with pytest.raises(ForethoughtError, match="regression task"):
        load_task("stsb", "train", labels=["a"])


def test_piqa(root: Path) -> None:
    spec, train = load_task("piqa", "train")
    _, evals = load_task("piqa", "eval")
    assert spec.labels == ["A", "B"] and len(train) == 16 and len(evals) == 4
    assert not {ex.id for ex in train} & {ex.id for ex in evals}
    for ex in train + evals:
        i = int(ex.id.split("-")[1])
        assert ex.fields == {"goal": f"goal {i}", "sol1": f"first {i}", "sol2": f"second {i}"}
        assert ex.target == "AB"[i % 2]  # line-aligned labels
    assert render_prompt(spec, train[0]) == f"Goal: {train[0].fields['goal']}\nA. {train[0].fields['sol1']}\nB. " \
        f"{train[0].fields['sol2']}\nAnswer:"


def test_stsb(root: Path) -> None:
    spec, train = load_task("stsb", "train")
    assert spec.task_type == "regression" and spec.value_range == (0.0, 5.0) and spec.labels == []
    assert [ex.target for ex in train] == [5.0, 3.8, 0.5]
    assert train[1].fields == {"sentence1": 'A man "plays" a flute.', "sentence2": "A man is playing a flute."}
    assert train[2].fields == {"sentence1": "One.", "sentence2": "Two."}  # extra columns ignored
    _, dev = load_task("stsb", "eval")
    assert [ex.target for ex in dev] == [2.25]


def test_sick_crlf_and_trial_ignored(root: Path) -> None:
    spec, train = load_task("sick", "train")
    _, test = load_task("sick", "eval")
    assert spec.value_range == (1.0, 5.0)
    assert [ex.id for ex in train] == ["sick-1", "sick-2"] and [ex.id for ex in test] == ["sick-4"]
    assert [ex.target for ex in train] == [4.5, 1.2] and test[0].target == 2.1
    assert test[0].fields == {"sentence1": "Two men talk", "sentence2": "Nobody talks"}
    assert all("\r" not in v for ex in train + test for v in ex.fields.values())


def test_wassa(root: Path) -> None:
    spec, joy = load_task("wassa-joy", "train")
    assert spec.value_range == (0.0, 1.0) and [ex.target for ex in joy] == [0.938, 0.2]
    assert joy[0].fields == {"tweet": 'So "joy" right now #joy', "emotion": "joy"}
    assert render_prompt(spec, joy[0]) == 'Tweet: So "joy" right now #joy\nEmotion: joy\nIntensity (0 to 1):'
    _, everything = load_task("wassa", "train")
    assert len(everything) == 8 and {ex.fields["emotion"] for ex in everything} == {"anger", "fear", "joy", "sadness"}
    _, dev = load_task("wassa", "eval")
    assert len(dev) == 4 and all(ex.target == 0.5 for ex in dev)


def test_builtin_template_override(root: Path) -> None:
    spec, train = load_task("sst2", "train", template="{sentence} Overall:")
    assert render_prompt(spec, train[1]) == "that loves its characters Overall:"
    with pytest.raises(ForethoughtError, match="field 'text'.*fields: sentence"):
        load_task("sst2", "train", template="{text} ->")
    with pytest.raises(ForethoughtError, match="eval_fraction"):
        load_task("sst2", "train", eval_fraction=0.5)


_FAKE_HUB = {
    ("stanfordnlp/sst2", None): {
        "train": [{"idx": 0, "sentence": "great fun ", "label": 1}, {"idx": 1, "sentence": "dull", "label": 0}],
        "validation": [{"idx": 0, "sentence": "fine", "label": 1}],
    },
    ("google/boolq", None): {
        "validation": [{"question": f"is it {i}", "passage": f"P{i}", "answer": bool(i % 2)} for i in range(10)]
    },
    ("allenai/ai2_arc", "ARC-Easy"): {
        "validation": [{"id": "v1", "question": "Q1?", "choices": {"text": ["x", "y", "z", "w"],
                                                                    "label": ["1", "2", "3", "4"]}, "answerKey": "3"}],
        "test": [{"id": "t1", "question": "Q2?", "choices": {"text": ["x", "y"], "label": ["A", "B"]},
                  "answerKey": "B"}],
    },
    ("ybisk/piqa", None): {
        "validation": [{"goal": f"g{i}", "sol1": "s1", "sol2": "s2", "label": i % 2} for i in range(10)]
    },
    ("sentence-transformers/stsb", None): {
        "train": [{"sentence1": "a", "sentence2": "b", "score": 0.76}],
        "validation": [{"sentence1": "c", "sentence2": "d", "score": 0.1}],
    },
    ("RobZamp/sick", None): {
        "train": [{"id": "1", "sentence_A": "a", "sentence_B": "b", "relatedness_score": 4.5}],
        "validation": [{"id": "2", "sentence_A": "c", "sentence_B": "d", "relatedness_score": 3.0}],
        "test": [{"id": "3", "sentence_A": "e", "sentence_B": "f", "relatedness_score": 1.5}],
    },
}  # fmt: skip


def test_hub_fallback_conversions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a data root the hub copies are read (here a fake `datasets`) into the same fields and splits."""
    from forethought.core import env
    from forethought.predgen.tasks import builtin

    monkeypatch.setattr(env, "datasets_available", lambda: True)
    monkeypatch.setattr(builtin, "_hub_dataset", lambda hub_id, config: _FAKE_HUB[(hub_id, config)])
    _, sst2 = load_task("sst2", "train")
    assert [(ex.fields["sentence"], ex.target) for ex in sst2] == [("great fun", "positive"), ("dull", "negative")]
    _, train = load_task("boolq", "train")
    _, evals = load_task("boolq", "eval")
    assert len(train) == 8 and len(evals) == 2 and not {ex.id for ex in train} & {ex.id for ex in evals}
    assert {ex.target for ex in train + evals} == {"yes", "no"}
    _, arc_train = load_task("arc-easy", "train")  # validation -> train, test -> eval, as with the local files
    _, arc_eval = load_task("arc-easy", "eval")
    assert arc_train[0].target == "C" and arc_train[0].fields["choices"] == "A. x\nB. y\nC. z\nD. w"
    assert arc_eval[0].target == "B"
    assert len(load_task("piqa", "eval")[1]) == 2
    assert load_task("stsb", "train")[1][0].target == pytest.approx(3.8)  # the hub copy is scaled to 0-1
    assert [ex.target for ex in load_task("sick", "eval")[1]] == [1.5]
    with pytest.raises(ForethoughtError, match="no reliable"):
        load_task("wassa", "train")


def test_hub_load_failure_names_both_places(monkeypatch: pytest.MonkeyPatch) -> None:
    from forethought.core import env
    from forethought.predgen.tasks import builtin

    def fail(hub_id: str, config: str | None) -> None:
        raise ConnectionError("offline\nmore detail")

    monkeypatch.setattr(env, "datasets_available", lambda: True)
    monkeypatch.setattr(builtin, "_hub_dataset", fail)
    with pytest.raises(ForethoughtError) as info:
        load_task("sick", "train")
    message = str(info.value)
    assert "FORETHOUGHT_DATA is not set" in message and "RobZamp/sick" in message and "offline" in message
    assert "\n" not in message


# ---------------------------------------------------------------------------------------------- errors: built-ins


def test_unknown_task_lists_names() -> None:
    with pytest.raises(ForethoughtError) as info:
        load_task("sst3", "train")
    message = str(info.value)
    assert "sst3" in message and "sst2" in message and "wassa-joy" in message and "\n" not in message


def test_unknown_split(root: Path) -> None:
    with pytest.raises(ForethoughtError, match="unknown split 'test'"):
        load_task("sst2", "test")  # type: ignore[arg-type]


def test_missing_data_root_names_both_places() -> None:
    with pytest.raises(ForethoughtError) as info:
        load_task("sst2", "train")
    message = str(info.value)
    assert "FORETHOUGHT_DATA is not set" in message and "stanfordnlp/sst2" in message and "\n" not in message


def test_missing_file_names_root_and_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORETHOUGHT_DATA", str(tmp_path))
    with pytest.raises(ForethoughtError) as info:
        load_task("arc-challenge", "eval")
    message = str(info.value)
    assert str(tmp_path) in message and "ARC-Challenge-Test.jsonl" in message
    assert "allenai/ai2_arc" in message and "ARC-Challenge" in message
    with pytest.raises(ForethoughtError) as info:
        load_task("wassa-fear", "train")
    message = str(info.value)
    assert str(tmp_path) in message and "fear-ratings-0to1.train.txt" in message and "no reliable" in message


def test_builtin_bad_rows(root: Path) -> None:
    _write(root / "sst2" / "dev.tsv", "sentence\tlabel\ngood film\t1\nno label here\n")
    with pytest.raises(ForethoughtError, match=r"dev\.tsv line 3: missing field 'label' \(fields present: sentence\)"):
        load_task("sst2", "eval")
    _write(root / "stsb" / "sts-dev.csv", "g\tf\t2014\t1\tfive\tA.\tB.\n")
    with pytest.raises(ForethoughtError, match=r"sts-dev\.csv line 1: regression target .*'five'"):
        load_task("stsb", "eval")
    _write(root / "piqa" / "valid-labels.lst", "0\n1\n")
    with pytest.raises(ForethoughtError, match=r"valid-labels\.lst has 2 labels but .*valid\.jsonl has 20"):
        load_task("piqa", "train")
    _jsonl(root / "arc" / "ARC-Easy-Dev.jsonl", [_arc_record("x", "Q?", ["A", "B"], "D")])
    with pytest.raises(ForethoughtError, match=r"ARC-Easy-Dev\.jsonl line 1: answerKey 'D'"):
        load_task("arc-easy", "train")
    _write(root / "boolq" / "val.jsonl", "")
    with pytest.raises(ForethoughtError, match="val.jsonl has 0 example"):
        load_task("boolq", "train")


# ---------------------------------------------------------------------------------------------- data files


def test_generic_csv_seeded_split(tmp_path: Path) -> None:
    rows = ["text,topic,label"] + [f'"item {i}, with a comma",t{i},{"abc"[i % 3]}' for i in range(30)]
    rows.append('"a quoted text\nacross two lines",t99,a')
    path = _write(tmp_path / "items.csv", "\n".join(rows) + "\n")
    spec, train = load_task(str(path), "train", seed=1, text_fields=["text", "topic"], target_field="label")
    _, evals = load_task(str(path), "eval", seed=1, text_fields=["text", "topic"], target_field="label")
    assert spec.name == "items" and spec.task_type == "classification" and spec.labels == ["a", "b", "c"]
    assert spec.template == "text: {text}\ntopic: {topic}\nAnswer:"
    assert len(train) + len(evals) == 31 and len(evals) == 6
    assert not {ex.id for ex in train} & {ex.id for ex in evals}
    assert [ex.id for ex in load_task(str(path), "eval", seed=1, target_field="label",
                                      text_fields=["text", "topic"])[1]] == [ex.id for ex in evals]  # fmt: skip
    multiline = next(ex for ex in train + evals if ex.fields["topic"] == "t99")
    assert multiline.fields["text"] == "a quoted text\nacross two lines" and multiline.id == "items-32"
    assert render_prompt(spec, train[0]).startswith("text: item ")


def test_generic_tsv_regression_with_eval_path(tmp_path: Path) -> None:
    train_path = _write(tmp_path / "train.tsv", 'id\ttext\tscore\nr1\tsay "hi\t1.5\nr2\tbye\t4\nr3\tok\t2.25\n')
    eval_path = _write(tmp_path / "dev.tsv", "id\ttext\tscore\nd1\tnew\t3\n")
    opts = {"text_fields": ["text"], "target_field": "score", "task_type": "regression", "id_field": "id"}
    spec, train = load_task(str(train_path), "train", eval_path=str(eval_path), **opts)
    assert spec.task_type == "regression" and spec.value_range == (1.5, 4.0) and spec.labels == []
    assert [(ex.id, ex.fields["text"], ex.target) for ex in train] == [("r1", 'say "hi', 1.5), ("r2", "bye", 4.0),
                                                                      ("r3", "ok", 2.25)]  # fmt: skip
    spec, evals = load_task(str(train_path), "eval", eval_path=str(eval_path), value_range=(0, 5), **opts)
    assert spec.value_range == (0.0, 5.0) and [ex.target for ex in evals] == [3.0]


def test_generic_jsonl_defaults(tmp_path: Path) -> None:
    records = [{"question": f"q{i}", "context": f"c{i}", "answer": ["no", "yes"][i % 2], "n": i} for i in range(10)]
    path = _jsonl(tmp_path / "qa.jsonl", records)
    spec, train = load_task(str(path), "train", target_field="answer", template="{context} | {question} =>")
    assert spec.labels == ["no", "yes"] and set(train[0].fields) == {"question", "context", "n"}  # default: all
    assert render_prompt(spec, train[0]) == f"{train[0].fields['context']} | {train[0].fields['question']} =>"


def test_generic_eval_label_unseen_in_train(tmp_path: Path) -> None:
    train_path = _jsonl(tmp_path / "train.jsonl", [{"t": "x", "y": "pos"}, {"t": "z", "y": "neg"}])
    eval_path = _jsonl(tmp_path / "eval.jsonl", [{"t": "w", "y": "neutral"}, {"t": "v", "y": "pos"},
                                                 {"t": "u", "y": "mixed"}])  # fmt: skip
    load_task(str(train_path), "train", target_field="y", eval_path=str(eval_path))  # train alone is fine
    with pytest.raises(ForethoughtError) as info:
        load_task(str(train_path), "eval", target_field="y", eval_path=str(eval_path))
    message = str(info.value)
    assert "'mixed'" in message and "'neutral'" in message and "'pos'" not in message and "neg, pos" in message


def test_generic_missing_field_names_line_and_fields(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "d.jsonl", [{"text": "a", "label": "x"}, {"text": "b", "label": "y"},
                                         {"txt": "c", "label": "x"}])  # fmt: skip
    with pytest.raises(ForethoughtError) as info:
        load_task(str(path), "train", text_fields=["text"], target_field="label")
    message = str(info.value)
    assert "d.jsonl line 3" in message and "missing field 'text'" in message and "txt, label" in message
    csv_path = _write(tmp_path / "d.csv", "text,label\na,x\nb\n")
    with pytest.raises(ForethoughtError, match=r"d\.csv line 3: missing field 'label' \(fields present: text\)"):
        load_task(str(csv_path), "train", target_field="label")


def test_generic_column_missing_from_the_header(tmp_path: Path) -> None:
    """A column the header lacks is named once, with the header (a headerless file shows its first row there)."""
    path = _write(tmp_path / "nohead.csv", "good movie,positive\nbad plot,negative\n")
    with pytest.raises(ForethoughtError, match=r"no column 'label' in the header row \(good movie, positive\); "
                                               "the first line must name the columns"):
        load_task(str(path), "train", target_field="label")
    path = _write(tmp_path / "cols.tsv", "text\tlabel\na\tx\nb\ty\n")
    with pytest.raises(ForethoughtError, match=r"no column 'body', 'key' in the header row \(text, label\)"):
        load_task(str(path), "train", target_field="label", text_fields=["body"], id_field="key")


def test_generic_non_numeric_regression_target(tmp_path: Path) -> None:
    path = _write(tmp_path / "r.csv", "text,score\na,1.0\nb,2.5\nc,n/a\n")
    with pytest.raises(ForethoughtError, match=r"r\.csv line 4: regression target 'score' is not a number: 'n/a'"):
        load_task(str(path), "train", target_field="score", task_type="regression")


@pytest.mark.parametrize(
    ("file_name", "content", "expected"),
    [
        ("empty.csv", "", "is empty"),
        ("header_only.tsv", "text\tlabel\n", "has no examples"),
        ("blank.jsonl", "\n\n", "has no examples"),
    ],
)
def test_generic_empty_files(tmp_path: Path, file_name: str, content: str, expected: str) -> None:
    path = _write(tmp_path / file_name, content)
    with pytest.raises(ForethoughtError, match=expected):
        load_task(str(path), "train", target_field="label")


def test_generic_file_errors(tmp_path: Path) -> None:
    txt = _write(tmp_path / "data.txt", "text\n")
    with pytest.raises(ForethoughtError, match=r"unsupported extension '\.txt'.*\.csv, \.tsv, \.jsonl"):
        load_task(str(txt), "train", target_field="label")
    with pytest.raises(ForethoughtError, match="task file not found"):
        load_task(str(tmp_path / "nope.csv"), "train", target_field="label")
    path = _write(tmp_path / "ok.csv", "text,label\na,x\nb,y\nc,x\n")
    with pytest.raises(ForethoughtError, match=r"give target_field=.*text, label"):
        load_task(str(path), "train")
    with pytest.raises(ForethoughtError, match="unknown option.*text_field\\b"):
        load_task(str(path), "train", target_field="label", text_field="text")
    with pytest.raises(ForethoughtError, match="at least two labels"):
        load_task(str(_write(tmp_path / "one.csv", "text,label\na,x\nb,x\nc,x\n")), "train", target_field="label")
    with pytest.raises(ForethoughtError, match=r"line 2: invalid JSON"):
        load_task(str(_write(tmp_path / "bad.jsonl", '{"a": 1}\n{"a": \n')), "train", target_field="a")
    with pytest.raises(ForethoughtError, match=r"line 3: 3 cells but the header has 2"):
        load_task(str(_write(tmp_path / "tabs.tsv", "text\tlabel\na\tx\nb\tstray\ty\n")), "train", target_field="label")
    with pytest.raises(ForethoughtError, match=r"eval file .*\.txt.*unsupported extension"):
        load_task(str(path), "eval", target_field="label", eval_path=str(txt))
    with pytest.raises(ForethoughtError, match="2 example.*at least 2|1 example"):
        load_task(str(_write(tmp_path / "single.csv", "text,label\na,x\n")), "train", target_field="label")


# ---------------------------------------------------------------------------------------------- prompts


def _boolq_like() -> tuple[TaskSpec, Example]:
    spec = TaskSpec("boolq", "classification", ["no", "yes"], "Passage: {passage}\nQuestion: {question}\nAnswer:",
                    long_field="passage")  # fmt: skip
    passage = "START " + " ".join(f"word{i}" for i in range(400)) + " END"
    return spec, Example({"passage": passage, "question": "is the sky blue?"}, "yes", "b0")


def test_render_prompt_truncates_long_field(gpt2) -> None:  # noqa: ANN001
    spec, ex = _boolq_like()
    full = render_prompt(spec, ex)
    assert len(gpt2(full, add_special_tokens=False)["input_ids"]) > 100
    assert render_prompt(spec, ex, gpt2, max_prompt_tokens=10_000) == full
    prompt = render_prompt(spec, ex, gpt2, max_prompt_tokens=100)
    n = len(gpt2(prompt, add_special_tokens=False)["input_ids"])
    assert 95 <= n <= 100
    assert prompt.startswith("Passage: START word0 word1") and "END" not in prompt
    assert prompt.endswith("\nQuestion: is the sky blue?\nAnswer:")
    left = render_prompt(TaskSpec(**{**spec.__dict__, "truncate_side": "left"}), ex, gpt2, max_prompt_tokens=100)
    assert len(gpt2(left, add_special_tokens=False)["input_ids"]) <= 100
    assert "START" not in left and "word399 END\nQuestion: is the sky blue?\nAnswer:" in left


def test_render_prompt_cuts_whole_prompt_from_left(gpt2) -> None:  # noqa: ANN001
    spec, ex = _boolq_like()
    ex.fields["question"] = "why " * 60 + "is the sky blue?"
    prompt = render_prompt(spec, ex, gpt2, max_prompt_tokens=20)
    assert len(gpt2(prompt, add_special_tokens=False)["input_ids"]) <= 20
    assert prompt.endswith("why is the sky blue?\nAnswer:") and "word" not in prompt
    no_long = TaskSpec("t", "regression", [], "{a} {b} =>")
    out = render_prompt(no_long, Example({"a": "x " * 50, "b": "tail"}, 1.0, "1"), gpt2, max_prompt_tokens=5)
    assert out.endswith("tail =>") and len(gpt2(out, add_special_tokens=False)["input_ids"]) <= 5
    with pytest.raises(ForethoughtError, match="needs a tokenizer"):
        render_prompt(spec, ex, None, max_prompt_tokens=20)
    with pytest.raises(ForethoughtError, match="positive integer"):
        render_prompt(spec, ex, gpt2, max_prompt_tokens=0)


def test_render_prompt_chat(cache: Path) -> None:
    if gpt2_tiktoken_file() is None:
        pytest.skip("openai-whisper (gpt2.tiktoken) not installed")
    tok = load_tokenizer("gpt2", cache_dir=cache / "tokenizers")
    spec = TaskSpec("sst2", "classification", ["negative", "positive"], "Review: {sentence}\nSentiment:",
                    long_field="sentence")  # fmt: skip
    ex = Example({"sentence": "good " * 80}, "positive", "1")
    assert render_prompt(spec, ex, tok, chat=True) == render_prompt(spec, ex)  # no chat template: plain prompt
    tok.chat_template = (
        "{% for m in messages %}<|user|>{{ m['content'] }}<|end|>{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    short = Example({"sentence": "fine"}, "positive", "2")
    assert render_prompt(spec, short, tok, chat=True) == "<|user|>Review: fine\nSentiment:<|end|><|assistant|>"
    wrapped = render_prompt(spec, ex, tok, max_prompt_tokens=40, chat=True)
    assert wrapped.startswith("<|user|>Review: good") and wrapped.endswith("\nSentiment:<|end|><|assistant|>")
    assert len(tok(wrapped, add_special_tokens=False)["input_ids"]) <= 40
    with pytest.raises(ForethoughtError, match="too small"):
        render_prompt(spec, ex, tok, max_prompt_tokens=3, chat=True)


class _WordTokenizer:
    """A slow-tokenizer stand-in: one token per word, no offsets mapping (render_prompt decodes ids instead)."""

    is_fast = False

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": list(range(len(text.split())))} if text else {"input_ids": []}

    def decode(self, ids: list[int], clean_up_tokenization_spaces: bool = False) -> str:
        return " ".join(self.words[i] for i in ids)

    words: list[str] = []


def test_render_prompt_without_offsets() -> None:
    spec, ex = _boolq_like()
    tok = _WordTokenizer()
    tok.words = ex.fields["passage"].split()
    prompt = render_prompt(spec, ex, tok, max_prompt_tokens=30)  # type: ignore[arg-type]
    assert len(prompt.split()) <= 30 and prompt.startswith("Passage: START word0")
    assert prompt.endswith("Question: is the sky blue?\nAnswer:")


def test_render_prompt_missing_field() -> None:
    spec = TaskSpec("t", "classification", ["a", "b"], "{text} ->")
    with pytest.raises(ForethoughtError, match=r"'text' is missing from example 'e1' \(fields: other\)"):
        render_prompt(spec, Example({"other": "x"}, "a", "e1"))


# ---------------------------------------------------------------------------------------------- answers


def test_format_parse_regression_round_trip() -> None:
    spec = TaskSpec("stsb", "regression", [], "{a}", value_range=(0.0, 5.0))
    assert format_target(spec, 3.14159) == "3.14"
    assert parse_target(spec, format_target(spec, 3.14159)) == 3.14
    assert format_target(spec, 7.3) == "5.00" and format_target(spec, -2) == "0.00"  # clipped
    assert format_target(spec, 2.5, decimals=0) == "2" and format_target(spec, 1 / 3, decimals=3) == "0.333"
    assert format_target(TaskSpec("r", "regression", [], "{a}"), -0.001) == "0.00"  # no "-0.00"
    assert parse_target(spec, " 4.25\nmore text") == 4.25
    assert parse_target(spec, "9.5") == 5.0 and parse_target(spec, "-1") == 0.0  # clipped
    assert parse_target(spec, ".5") == 0.5 and parse_target(spec, "3.") == 3.0
    assert parse_target(spec, "about 3") is None and parse_target(spec, "") is None
    assert parse_target(spec, "nan") is None
    for value in (0.0, 0.01, 2.37, 4.99, 5.0):
        assert parse_target(spec, format_target(spec, value)) == pytest.approx(value)
    with pytest.raises(ForethoughtError, match="not a number"):
        format_target(spec, "high")


def test_format_parse_classification() -> None:
    spec = TaskSpec("boolq", "classification", ["no", "yes"], "{q}")
    assert format_target(spec, "yes") == "yes"
    assert parse_target(spec, " Yes.") == "yes" and parse_target(spec, "no, because") == "no"
    assert parse_target(spec, "nope") is None and parse_target(spec, "") is None
    letters = TaskSpec("arc", "classification", list("ABCDE"), "{q}")
    assert parse_target(letters, " B") == "B" and parse_target(letters, "(c)") == "C"
    assert parse_target(letters, "D.") == "D"
    assert parse_target(letters, "Answer: A") is None
    multi = TaskSpec("m", "classification", ["not sure", "no"], "{q}")
    assert parse_target(multi, "not sure really") == "not sure" and parse_target(multi, "no") == "no"
    with pytest.raises(ForethoughtError, match="not one of the labels"):
        format_target(spec, "maybe")


def test_spec_validation() -> None:
    with pytest.raises(ForethoughtError, match="task_type"):
        TaskSpec("t", "ranking", [], "{a}")  # type: ignore[arg-type]
    with pytest.raises(ForethoughtError, match="value_range"):
        TaskSpec("t", "regression", [], "{a}", value_range=(5.0, 1.0))
    with pytest.raises(ForethoughtError, match="duplicate"):
        TaskSpec("t", "classification", ["a", "a"], "{a}")


# ---------------------------------------------------------------------------------------------- real data

_REAL_COUNTS = {  # (train, eval) from data/SOURCES.md; BoolQ and PIQA are 80/20 of 3,270 and 1,838
    "sst2": (67_349, 872),
    "boolq": (2_616, 654),
    "arc-easy": (570, 2_376),
    "arc-challenge": (299, 1_172),
    "piqa": (1_470, 368),
    "stsb": (5_749, 1_500),
    "sick": (4_439, 4_906),
    "wassa": (3_613, 347),
    "wassa-anger": (857, 84),
    "wassa-fear": (1_147, 110),
    "wassa-joy": (823, 79),
    "wassa-sadness": (786, 74),
    # tests/test_predgen_datasets.py checks these further (label counts, target ranges)
    "siqa": (1_563, 391),
    "hellaswag": (8_034, 2_008),
    "winogrande": (1_014, 253),
    "openbookqa": (4_957, 500),
    "lcp": (7_662, 917),
    "lcp-multi": (1_517, 184),
    "clear": (3_779, 945),
    "humicroedit": (9_652, 2_419),
}


@pytest.mark.data
def test_real_data_every_builtin(monkeypatch: pytest.MonkeyPatch) -> None:
    if not _USER_DATA_ROOT or not (Path(_USER_DATA_ROOT) / "sst2" / "train.tsv").is_file():
        pytest.skip("set FORETHOUGHT_DATA to the benchmark data root to run the data tests")
    monkeypatch.setenv("FORETHOUGHT_DATA", _USER_DATA_ROOT)
    assert set(_REAL_COUNTS) == set(known_tasks())
    for name, (n_train, n_eval) in _REAL_COUNTS.items():
        spec, train = load_task(name, "train")
        _, evals = load_task(name, "eval")
        assert (len(train), len(evals)) == (n_train, n_eval), name
        if spec.task_type == "classification":
            assert {ex.target for ex in train + evals} <= set(spec.labels), name
        else:
            low, high = spec.value_range
            assert all(low <= ex.target <= high for ex in train + evals), name
        assert render_prompt(spec, evals[0]).endswith(":"), name
    _, sst2 = load_task("sst2", "train")
    assert sum(ex.target == "positive" for ex in sst2) == 37_569
    _, boolq = load_task("boolq", "train")
    _, boolq_eval = load_task("boolq", "eval")
    assert sum(ex.target == "yes" for ex in boolq + boolq_eval) == 2_033
    _, arc = load_task("arc-easy", "eval")
    assert sum(ex.target == "E" for ex in arc) == 1 and all("\n1. " not in ex.fields["choices"] for ex in arc)
