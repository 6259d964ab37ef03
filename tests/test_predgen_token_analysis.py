"""``predgen mine --words``: NPMI between input words and the answer the model writes.

The pure statistic is checked against a brute-force evaluation of its definition; the command is checked end to
end on a tiny Llama: its written answers against greedy decoding done by hand (full forwards, no cache, one
example at a time) and its word table against the brute-force statistic over those answers.
"""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

import pytest
import torch
from cli_harness import expect_clean_failure

from forethought.cli import main
from forethought.predgen.mine import example_words, npmi, word_association
from forethought.predgen.saved import load_saved, saved_examples
from forethought.predgen.tasks import Example
from forethought.testing import tiny_llama_folder, write_csv

pytestmark = pytest.mark.usefixtures("isolated_env")

FILLERS = ["movie", "plot", "actor", "scene", "the", "a", "was", "long", "music"]


def _brute(words: list[set[str]], answers: list[int], y: int, w: str) -> float:
    """The definition, term by term: probabilities as averages of indicators over the examples."""
    n = len(answers)
    p_w = sum(w in ws for ws in words) / n
    p_y = sum(a == y for a in answers) / n
    p_wy = sum(w in ws and a == y for ws, a in zip(words, answers, strict=True)) / n
    if p_wy == 0:
        return -1.0
    if p_wy == 1:
        return 0.0
    return math.log(p_wy / (p_w * p_y)) / -math.log(p_wy)


def test_npmi_landmarks() -> None:
    assert npmi(5, 5, 5, 10) == pytest.approx(1.0)  # w occurs exactly when y does
    assert npmi(0, 5, 5, 10) == -1.0  # never together
    assert npmi(25, 50, 50, 100) == pytest.approx(0.0)  # independent: p(w,y) = p(w) p(y)
    assert npmi(3, 4, 6, 10) == pytest.approx(math.log(0.3 / 0.24) / -math.log(0.3))


def test_example_words() -> None:
    ex = Example({"sentence": "It 's a FUNNY, funny film -- don't miss_it", "x": "Pretty"}, "positive", "e")
    assert example_words(ex) == {"it", "s", "a", "funny", "film", "don't", "miss", "pretty"}


def test_word_association_equals_the_definition_by_brute_force() -> None:
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(30)]
    words = [set(rng.sample(vocab, rng.randint(1, 6))) for _ in range(60)]
    answers = [rng.randrange(3) for _ in range(60)]
    labels = ["neg", "neu", "pos"]
    table = word_association(words, answers, labels, top=100, min_count=8)
    counts = {w: sum(w in ws for ws in words) for w in vocab}
    kept = {w for w in vocab if counts[w] >= 8}
    assert kept and kept != set(vocab)  # the threshold drops some words here
    for y, label in enumerate(labels):
        rows = table[label]["top"]
        assert table[label]["answered"] == answers.count(y)
        assert {r["word"] for r in rows} == kept
        for r in rows:
            assert r["npmi"] == pytest.approx(_brute(words, answers, y, r["word"]), abs=1e-12)
            assert r["examples"] == counts[r["word"]]
            assert r["with_answer"] == sum(r["word"] in ws and a == y for ws, a in zip(words, answers, strict=True))
        assert [r["npmi"] for r in rows] == sorted((r["npmi"] for r in rows), reverse=True)
    top2 = word_association(words, answers, labels, top=2, min_count=8)
    assert all(top2[label]["top"] == table[label]["top"][:2] for label in labels)
    # an answer the model never writes has no associated words
    assert word_association(words, [0] * 60, labels, 3, 1)["pos"] == {"answered": 0, "top": []}
    # asked-for words: any count, case-folded; a word never seen has no score
    rare = min(vocab, key=lambda w: counts[w])
    asked = word_association(words, answers, labels, 1, 8, asked=(rare.upper(), "unseen"))
    assert asked["neu"]["asked"] == [
        {"word": rare, "npmi": pytest.approx(_brute(words, answers, 1, rare)), "examples": counts[rare],
         "with_answer": sum(rare in ws and a == 1 for ws, a in zip(words, answers, strict=True))},
        {"word": "unseen", "npmi": None, "with_answer": 0, "examples": 0}]


# ---------------------------------------------------------------------------------------------- the command


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama generator trained a few steps on a words -> sentiment task, so its answers vary."""
    root = tmp_path_factory.mktemp("token-analysis")
    rng = random.Random(0)
    rows = []
    for i in range(200):  # one sentiment word among fillers decides the label (balanced, easy to learn)
        words = [rng.choice(FILLERS) for _ in range(rng.randint(2, 6))]
        words.insert(rng.randint(0, len(words)), "good" if i % 2 else "bad")
        rows.append({"id": f"r{i}", "text": " ".join(words), "label": "positive" if i % 2 else "negative"})
    data = write_csv(root / "reviews.csv", rows)
    text = "\n".join(f"Review: {r['text']}\nAnswer: {r['label']}" for r in rows) * 3
    base = root / "tiny-llama"
    tiny_llama_folder(base, text, 300, hidden_size=32, layers=2, heads=4, kv_heads=2)
    code = main(["predgen", "train", "--config", "tiny", "--method", "generator", "--base", str(base),
                 "--task.name", str(data), "--task.target_field", "label", "--task.id_field", "id",
                 "--task.text_fields", "[text]", "--task.template", "Review: {text}\nAnswer:",
                 "--train.steps", "60", "--train.lr", "0.003", "--adapter.method", "full",
                 "--task.max_train_examples", "0", "--eval.latency_examples", "0",
                 "--run.out_dir", str(root), "--run.name", "gen"])
    assert code == 0
    return root / "gen"


@torch.no_grad()
def _greedy_by_hand(lm: torch.nn.Module, prompt: list[int], trie) -> int:  # noqa: ANN001
    """Constrained greedy decoding with a full forward per step (no cache, no padding): the trie value."""
    node, seq = trie.root, list(prompt)
    while True:
        logits = lm(input_ids=torch.tensor([seq])).logits[0, -1]
        allowed = sorted(node.children)
        tok = allowed[int(torch.argmax(logits[allowed]))]
        node = node.children[tok]
        if node.leaf is not None:
            return int(trie.values[node.leaf])
        seq.append(tok)


def test_mine_words_computes_the_definition(trained: Path) -> None:
    out = trained / "words.json"
    code = main(["predgen", "mine", "--model", str(trained), "--representations", "[]", "--words", "4",
                 "--word_min_count", "2", "--word_list", "[Good, zebra]", "--max_examples", "0", "--out", str(out)])
    assert code == 0
    res = json.loads(out.read_text())
    assert res["estimates"] == {} and not out.with_suffix(".png").exists()  # MINE skipped
    table = res["word_association"]["per_answer"]

    saved = load_saved(str(trained), "cpu", decode=True)
    examples = saved_examples(saved, "eval", 0)
    items = saved.enc.encode(examples)
    answers = [_greedy_by_hand(saved.model.lm, it["prompt"], saved.enc.trie) for it in items]
    assert len(set(answers)) == 2, "the tiny model should write both answers, or the check below is weak"
    words = [example_words(ex) for ex in examples]
    labels = saved.enc.spec.labels
    for y, label in enumerate(labels):
        assert table[label]["answered"] == answers.count(y)
        rows = table[label]["top"]
        kept = [w for w in sorted(set().union(*words)) if sum(w in ws for ws in words) >= 2]
        expected = sorted(kept, key=lambda w: (-_brute(words, answers, y, w),
                                               -sum(w in ws and a == y
                                                    for ws, a in zip(words, answers, strict=True)), w))[:4]
        assert [r["word"] for r in rows] == expected
        for r in rows + table[label]["asked"][:1]:
            assert r["npmi"] == pytest.approx(_brute(words, answers, y, r["word"]), abs=1e-9)
        assert [r["word"] for r in table[label]["asked"]] == ["good", "zebra"]
        assert table[label]["asked"][1]["npmi"] is None
    targets = [it["target"] for it in items]
    assert res["word_association"]["answers_match_targets"] == pytest.approx(
        sum(a == t for a, t in zip(answers, targets, strict=True)) / len(items))


def test_mine_words_bad_inputs(trained: Path, tmp_path: Path) -> None:
    expect_clean_failure(["predgen", "mine", "--model", str(trained), "--representations", "[]"], tmp_path, trained,
                         ["nothing to do", "--words"])
    expect_clean_failure(["predgen", "mine", "--model", str(trained), "--words", "-1"], tmp_path, trained,
                         ["words must be >= 0"])
    regression = tmp_path / "regression"  # the check reads predgen.json only, before any model loads
    shutil.copytree(trained, regression)
    meta_path = regression / "model" / "predgen.json"
    meta = json.loads(meta_path.read_text())
    meta["task_spec"]["task_type"] = "regression"
    meta_path.write_text(json.dumps(meta))
    expect_clean_failure(["predgen", "mine", "--model", str(regression), "--words", "3"], tmp_path, regression,
                         ["needs a classification task"])


def test_mine_words_on_text_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Multiple choice with text answers: each example decodes under its own choices, so every written answer
    is one of that example's choices, and the table counts each example once."""
    from test_predgen_datasets import _make_root

    monkeypatch.setenv("FORETHOUGHT_DATA", str(_make_root(tmp_path / "data")))
    base = tmp_path / "tiny-llama"
    tiny_llama_folder(base, "Context Question Answer Tracy did thing a0 b1 c2 Why 0 1 2 3 4 5 6 7 8 9 " * 20, 150,
                      hidden_size=32, layers=2, heads=4, kv_heads=2)
    assert main(["predgen", "train", "--config", "tiny", "--method", "generator", "--base", str(base),
                 "--task.name", "siqa", "--task.answer", "text", "--train.steps", "1", "--eval.latency_examples",
                 "0", "--run.out_dir", str(tmp_path), "--run.name", "mc"]) == 0
    out = tmp_path / "words.json"
    assert main(["predgen", "mine", "--model", str(tmp_path / "mc"), "--representations", "[]", "--words", "3",
                 "--word_min_count", "1", "--split", "train", "--max_examples", "0", "--out", str(out)]) == 0
    table = json.loads(out.read_text())["word_association"]["per_answer"]
    saved = load_saved(str(tmp_path / "mc"), "cpu", decode=True)
    examples = saved_examples(saved, "train", 0)
    items = saved.enc.encode(examples)
    answers = [_greedy_by_hand(saved.model.lm, it["prompt"], it["trie"]) for it in items]
    assert all(saved.enc.spec.labels[a] in ex.options for a, ex in zip(answers, examples, strict=True))
    assert {label: v["answered"] for label, v in table.items()} == {
        label: answers.count(y) for y, label in enumerate(saved.enc.spec.labels)}
