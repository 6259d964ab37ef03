"""PredGen methods end to end on a tiny random Llama saved locally: encoding, constrained decoding, the three
losses, the adapter's input (no gold leak), training through the CLI, save / reload, eval, predict, errors."""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from forethought.cli import main
from forethought.predgen.decoding import AnswerTrie, answer_distribution, constrained_greedy
from forethought.predgen.methods import (
    Encoder,
    PredGenSettings,
    PromptConfig,
    generator_loss,
    predgen_loss,
    predictor_loss,
    with_sampling,
)
from forethought.predgen.model import AdapterConfig, PredGenModel, apply_adapter, build_head
from forethought.predgen.tasks import load_task
from forethought.testing import tiny_gpt2, tiny_llama, tiny_llama_folder, write_csv

WORDS = ["good", "bad", "great", "awful", "fine", "dull", "movie", "plot", "actor", "scene", "the", "a", "was"]


def _rows(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 8))]
        pos = sum(w in ("good", "great", "fine") for w in words)
        neg = sum(w in ("bad", "awful", "dull") for w in words)
        rows.append({"id": f"r{i}", "text": " ".join(words), "label": "positive" if pos >= neg else "negative",
                     "score": f"{min(pos, 4) * 0.5 + 0.25 * (i % 3):.3f}"})
    return rows


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A task file, a tokenizer trained on it, and a tiny Llama saved as a model folder."""
    root = tmp_path_factory.mktemp("predgen")
    rows = _rows(120, 0)
    data = write_csv(root / "reviews.csv", rows)
    text = "\n".join(f"Review: {r['text']}\nAnswer: {r['label']} {r['score']}" for r in rows) * 3
    text += " 0.00 1.25 2.50 3.75 4.00 5.5 6 7 8 9"
    folder = root / "tiny-llama"
    tok = tiny_llama_folder(folder, text, 300, hidden_size=32, layers=2, heads=4, kv_heads=2)
    return {"root": root, "data": data, "tok": tok, "model": folder}


def _encoder(world: dict, regression: bool = False) -> tuple[Encoder, list]:
    opts = dict(target_field="score" if regression else "label", text_fields=["text"], id_field="id",
                task_type="regression" if regression else "classification", template="Review: {text}\nAnswer:")
    spec, ex = load_task(str(world["data"]), "train", 0, **opts)
    enc = Encoder(spec, world["tok"], PromptConfig(max_prompt_tokens=48))
    return enc, enc.encode(ex)


def _model(world: dict, kind: str, enc: Encoder) -> PredGenModel:
    torch.manual_seed(0)
    lm = tiny_llama(vocab_size=len(world["tok"]), hidden_size=32, layers=2, heads=4, kv_heads=2,
                    eos_token_id=world["tok"].eos_token_id)
    lm = apply_adapter(lm, AdapterConfig(r=4), 10)
    return PredGenModel(lm, build_head(kind, 32, enc.n_out, "last" if kind == "predictor" else "attention", 16, None))


def test_encoder_answers_and_candidates(world: dict) -> None:
    enc, items = _encoder(world)
    assert enc.values == [0, 1] and enc.texts == ["negative", "positive"]
    assert all(it["answer"][-1] == enc.eos_id for it in items)
    b = enc.collate(items[:5])
    assert b["prompt_ids"].shape[0] == 5 and (b["prompt_mask"][:, -1] == 1).all()  # left padding
    assert b["answer_mask"].sum(1).tolist() == [len(it["answer"]) for it in items[:5]]
    renc, ritems = _encoder(world, regression=True)
    lo, hi = renc.spec.value_range
    assert len(renc.values) == round((hi - lo) * 100) + 1
    assert renc.texts[0] == f"{lo:.2f}" and all(len(t.split(".")[1]) == 2 for t in renc.texts)


def test_trie_rejects_prefixes() -> None:
    with pytest.raises(ValueError, match="prefix"):
        AnswerTrie([[1, 2], [1, 2, 3]], ["a", "b"])


@pytest.mark.parametrize("make,max_rows", [(tiny_llama, 256), (tiny_gpt2, 256), (tiny_llama, 1), (tiny_llama, 3)])
def test_expected_value_matches_brute_force(make, max_rows) -> None:  # noqa: ANN001
    lm = make(vocab_size=40, hidden_size=32, layers=2, heads=4, eos_token_id=1).double()
    ids = torch.tensor([[0, 0, 3, 4], [2, 3, 4, 11]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    # answers of one length, then of lengths 1-4 (the level walk meets leaves at every depth)
    for seqs in ([[5, 6, 7], [5, 6, 8], [5, 9, 7], [10, 6, 7]], [[5], [6, 7], [6, 8, 9, 2], [6, 8, 3], [9, 6, 7]]):
        _check_expected_value(lm, seqs, ids, mask, max_rows)


def _check_expected_value(lm, seqs: list[list[int]], ids: torch.Tensor, mask: torch.Tensor,  # noqa: ANN001
                          max_rows: int) -> None:
    trie = AnswerTrie(seqs, [0.5 * (i + 1) for i in range(len(seqs))])
    dist = answer_distribution(lm, trie, ids, mask, max_rows=max_rows)
    for b in range(2):
        prompt = ids[b, mask[b].bool()].tolist()
        scores = []
        for seq in seqs:
            lp = torch.log_softmax(lm(input_ids=torch.tensor([prompt + seq])).logits[0], -1)
            scores.append(sum(lp[len(prompt) - 1 + j, t] for j, t in enumerate(seq)))
        assert torch.allclose(dist[b], torch.softmax(torch.stack(scores), 0).detach(), atol=1e-10)
        # the greedy decoder's log-probability is its chosen answer's brute-force score under the full softmax
        greedy = constrained_greedy(lm, trie, ids[b:b + 1], mask[b:b + 1])
        assert float(greedy.logprob[0]) == pytest.approx(float(scores[greedy.choice[0]].detach()), abs=1e-9)
        assert greedy.tokens[0].tolist() == seqs[greedy.choice[0]]
    greedy = constrained_greedy(lm, trie, ids, mask)
    assert greedy.states.shape[:2] == greedy.tokens.shape
    assert greedy.mask.sum(1).tolist() == [len(seqs[c]) for c in greedy.choice]


def test_losses_finite_and_adapter_reads_model_fed_states(world: dict) -> None:
    enc, items = _encoder(world)
    batch = with_sampling(enc.collate(items[:8]), 0.5, 3)
    for kind in ("predictor", "generator", "predgen"):
        m = _model(world, kind, enc)
        if kind == "predictor":
            loss, _ = m(predictor_loss, batch, "classification", -1)
        elif kind == "generator":
            loss = m(generator_loss, batch, True)[0].value()
            loss_unmasked = m(generator_loss, batch, False)[0].value()
            assert loss_unmasked.item() != pytest.approx(loss.item())
        else:
            averaged, _ = m(predgen_loss, batch, PredGenSettings(), enc, "classification", -1, True)
            loss, stats = averaged.value(), averaged.means()
            assert stats["l_w"] > 0 and stats["l_d"] > 0
            assert torch.allclose(loss, stats["l_w"] * stats["l_d"])  # paper WDAL = L_W · L_D
        assert torch.isfinite(loss)
        loss.backward()
        grads = [p.grad for n, p in m.named_parameters() if p.requires_grad and "lora" in n]
        assert any(g is not None and g.abs().sum() > 0 for g in grads)


def test_wdal_forms_scale_the_heads_gradient(world: dict) -> None:
    """The head sees L_D only through WDAL, so its gradient is dWDAL/dL_D times the gradient of L_D alone:
    L_W for the paper's product, 1/(1+L_D) + (1+L_W) for the reference form, 1 for the sum. The trainer's
    grad_norms reports exactly those ratios on one batch (the roll-out is greedy: the same for every form)."""
    from forethought.core.trainer import grad_norms

    enc, items = _encoder(world)
    batch = with_sampling(enc.collate(items[:8]), 0.5, 3)
    norms, means = {}, {}
    for form in ("sum", "paper", "reference"):
        m = _model(world, "predgen", enc)
        averaged, _ = m(predgen_loss, batch, PredGenSettings(wdal=form), enc, "classification", -1, True)
        averaged.value().backward()
        means[form] = {k: float(v) for k, v in averaged.means().items()}
        norms[form] = grad_norms({"head": list(m.head.parameters()),
                                  "writer": [p for p in m.lm.parameters() if p.requires_grad]})
    lw, ld = means["sum"]["l_w"], means["sum"]["l_d"]
    assert means["paper"] == pytest.approx(means["sum"], rel=1e-6)
    assert norms["paper"]["grad_norm_head"] == pytest.approx(lw * norms["sum"]["grad_norm_head"], rel=1e-4)
    ref = 1 / (1 + ld) + (1 + lw)
    assert norms["reference"]["grad_norm_head"] == pytest.approx(ref * norms["sum"]["grad_norm_head"], rel=1e-4)
    assert all(n["grad_norm_writer"] > 0 for n in norms.values())


def _adapter_heldout_loss(world: dict, adapter_states: str, steps: int = 40) -> float:
    """Train only the task adapter (frozen LM) on random labels, reading states from the given pass; return
    its loss on held-out examples. Random labels cannot be predicted from the input, so only a leak of the
    gold answer tokens into Z can make the held-out loss small."""
    enc, items = _encoder(world)
    rng = random.Random(0)
    for it in items:
        it["target"] = rng.randrange(2)
        it["answer"] = enc.answer_tokens(enc.texts[it["target"]]) + [enc.eos_id]
    m = _model(world, "predgen", enc)
    for p in m.lm.parameters():
        p.requires_grad_(False)
    opt = torch.optim.Adam(m.head.parameters(), lr=1e-2)
    s = PredGenSettings(adapter_states=adapter_states, wdal="sum")
    # no scheduled sampling: the mixed pass is the teacher-forced one
    fit, held = (with_sampling(enc.collate(chunk), 0.0, 0) for chunk in (items[:48], items[48:96]))
    for _ in range(steps):
        loss = m(predgen_loss, fit, s, enc, "classification", -1, True)[0].value()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return float(m(predgen_loss, held, s, enc, "classification", -1, True)[0].means()["l_d"])


def test_adapter_does_not_read_the_gold_label(world: dict) -> None:
    """Reading teacher-forced states hands the adapter the label: its loss collapses even on held-out random
    labels. The model-fed roll-out (the default) cannot: the held-out loss stays near log 2."""
    leak = _adapter_heldout_loss(world, "teacher_forced")
    honest = _adapter_heldout_loss(world, "rollout")
    assert leak < 0.1
    assert honest > 0.5


def _cli_train(world: dict, out: Path, method: str, *extra: str) -> dict:
    code = main(["predgen", "train", "--method", method, "--base", str(world["model"]), "--task.name",
                 str(world["data"]), "--task.target_field", "label", "--task.text_fields", "[text]",
                 "--task.id_field", "id", "--adapter.r", "4", "--train.steps", "4", "--train.batch_size", "4",
                 "--train.checkpoint_every", "2", "--eval.batch_size", "8", "--eval.latency_examples", "2",
                 "--run.out_dir", str(out), "--run.name", method, *extra])
    assert code == 0
    return json.loads((out / method / "results.json").read_text())


@pytest.mark.parametrize("method", ["predictor", "predgen"])
def test_interrupted_run_resumes_to_the_same_model(world: dict, tmp_path: Path, method: str,
                                                   capsys: pytest.CaptureFixture) -> None:
    """A run cut off after its step-2 checkpoint and resumed ends with the weights (LoRA and head) and the
    predictions of the run that was never interrupted: the head, the optimizer, the scheduled-sampling
    schedule and the data order all come back."""
    ref = _cli_train(world, tmp_path / "ref", method, "--train.keep_checkpoints", "3")
    cut = tmp_path / "cut" / method
    shutil.copytree(tmp_path / "ref" / method, cut)
    for p in ["step-000004", "model", "results.json", "predictions.jsonl", "report.md"]:
        shutil.rmtree(cut / p) if (cut / p).is_dir() else (cut / p).unlink(missing_ok=True)
    metrics = (cut / "metrics.jsonl").read_text().splitlines()
    (cut / "metrics.jsonl").write_text("\n".join(x for x in metrics if json.loads(x).get("step", 0) <= 2) + "\n")
    capsys.readouterr()
    again = _cli_train(world, tmp_path / "cut", method, "--train.keep_checkpoints", "3", "--resume", "auto")
    out = capsys.readouterr().out
    assert "resumed from" in out and "step-000002" in out  # it did not simply train again from step 0
    a = load_file(str(tmp_path / "ref" / method / "step-000004" / "model.safetensors"))
    b = load_file(str(cut / "step-000004" / "model.safetensors"))
    assert a.keys() == b.keys() and any("head" in k for k in a)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert again["accuracy"] == ref["accuracy"]

    def predicted(run: Path) -> list:
        return [json.loads(x)["prediction"] for x in (run / "predictions.jsonl").read_text().splitlines()]

    assert predicted(cut) == predicted(tmp_path / "ref" / method)


@pytest.mark.parametrize("method", ["predictor", "generator", "predgen"])
def test_cli_train_eval_predict(world: dict, tmp_path: Path, method: str) -> None:
    res = _cli_train(world, tmp_path, method)
    assert res["eval_examples"] == 24 and res["examples_per_s"] > 0
    run = tmp_path / method
    assert (run / "model" / "predgen.json").is_file() and (run / "model" / "adapter").is_dir()
    preds = [json.loads(x) for x in (run / "predictions.jsonl").read_text().splitlines()]
    assert len(preds) == 24 and {p["prediction"] for p in preds} <= {"negative", "positive"}
    # the reported metrics are those of the written predictions against the written targets
    assert res["accuracy"] == pytest.approx(sum(p["prediction"] == p["target"] for p in preds) / 24)
    if method != "predictor":
        assert res["parse_failure_rate"] == 0
        assert res["decoded"]["accuracy"] == pytest.approx(sum(p["decoded"] == p["target"] for p in preds) / 24)
        assert all(p["decoded_text"].strip() == p["decoded"] for p in preds)
    if method == "generator":
        assert all(p["prediction"] == p["decoded"] for p in preds)  # the Generator's answer is the decoded one
    # reload and re-evaluate: the same predictions
    assert main(["predgen", "eval", "--model", str(run), "--eval.latency_examples", "0"]) == 0
    again = [json.loads(x) for x in (run / "eval-eval.predictions.jsonl").read_text().splitlines()]
    assert [p["prediction"] for p in again] == [p["prediction"] for p in preds]
    inputs = write_csv(tmp_path / "new.csv", [{"text": "good good movie"}, {"text": "awful plot"}])
    assert main(["predgen", "predict", "--model", str(run), "--input", str(inputs)]) == 0
    out = [json.loads(x) for x in (tmp_path / "new.predictions.jsonl").read_text().splitlines()]
    assert len(out) == 2 and all(o["prediction"] in ("negative", "positive") for o in out)


def test_cli_regression_expected_value_and_resume(world: dict, tmp_path: Path) -> None:
    extra = ["--task.target_field", "score", "--task.task_type", "regression", "--eval.decoder", "expected"]
    code = main(["predgen", "train", "--method", "predgen", "--base", str(world["model"]), "--task.name",
                 str(world["data"]), "--task.text_fields", "[text]", "--adapter.r", "4", "--train.steps", "3",
                 "--train.batch_size", "4", "--eval.latency_examples", "0", "--task.max_eval_examples", "6",
                 "--run.out_dir", str(tmp_path), "--run.name", "reg", *extra])
    assert code == 0
    res = json.loads((tmp_path / "reg" / "results.json").read_text())
    assert {"mse", "mae", "pearson", "spearman"} <= res.keys() and res["parse_failure_rate"] == 0
    preds = [json.loads(x) for x in (tmp_path / "reg" / "predictions.jsonl").read_text().splitlines()]
    assert len(preds) == 6
    for key, column in (("mse", "prediction"), ("expected_value", "expected_value")):
        mse = sum((p[column] - p["target"]) ** 2 for p in preds) / 6
        assert (res[key] if key == "mse" else res[key]["mse"]) == pytest.approx(mse)
    lo, hi = json.loads((tmp_path / "reg" / "model" / "predgen.json").read_text())["task_spec"]["value_range"]
    assert all(lo <= p["expected_value"] <= hi for p in preds)  # a mean of well-formed numbers
    # a finished run resumes without retraining and gives the same results
    code = main(["predgen", "train", "--method", "predgen", "--base", str(world["model"]), "--task.name",
                 str(world["data"]), "--task.text_fields", "[text]", "--adapter.r", "4", "--train.steps", "3",
                 "--train.batch_size", "4", "--eval.latency_examples", "0", "--task.max_eval_examples", "6",
                 "--run.out_dir", str(tmp_path), "--run.name", "reg", "--resume", "auto", *extra])
    assert code == 0
    again = json.loads((tmp_path / "reg" / "results.json").read_text())
    assert again["mse"] == res["mse"]


@pytest.mark.parametrize("adapter", ["adalora", "dora", "full"])
def test_other_adapters_train(world: dict, tmp_path: Path, adapter: str) -> None:
    res = _cli_train(world, tmp_path, "generator", "--adapter.method", adapter, "--train.steps", "3",
                     "--task.max_eval_examples", "4", "--eval.latency_examples", "0")
    assert res["adapter"]["method"] == adapter
    assert main(["predgen", "eval", "--model", str(tmp_path / "generator"), "--max_examples", "4",
                 "--eval.latency_examples", "0"]) == 0
    # the reloaded adapter decodes exactly as the trained one did
    run = tmp_path / "generator"
    before = [json.loads(x)["decoded_text"] for x in (run / "predictions.jsonl").read_text().splitlines()]
    after = [json.loads(x)["decoded_text"] for x in (run / "eval-eval.predictions.jsonl").read_text().splitlines()]
    assert after == before


def test_bad_inputs(world: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    base = ["predgen", "train", "--base", str(world["model"]), "--run.out_dir", str(tmp_path)]
    assert main([*base, "--task.name", "nope"]) == 2
    assert "unknown task 'nope'" in capsys.readouterr().err
    bad = write_csv(tmp_path / "bad.csv", [{"text": "x", "score": "high"}, {"text": "y", "score": "1"}])
    assert main([*base, "--task.name", str(bad), "--task.target_field", "score", "--task.task_type",
                 "regression"]) == 2
    assert "not a number" in capsys.readouterr().err
    assert main([*base, "--task.name", str(bad), "--task.target_field", "missing"]) == 2
    assert "missing" in capsys.readouterr().err
    empty = tmp_path / "empty.csv"
    empty.write_text("text,label\n")
    assert main([*base, "--task.name", str(empty), "--task.target_field", "label"]) == 2
    assert "no examples" in capsys.readouterr().err
    assert main(["predgen", "eval", "--model", str(tmp_path / "nothing")]) == 2
    assert "predgen.json is missing" in capsys.readouterr().err
    assert main([*base, "--task.name", "sst2", "--task.target_field", "x"]) == 2
    assert "built in" in capsys.readouterr().err
    assert not list(tmp_path.glob("predgen*"))  # nothing half-written


def test_mine_estimator_separates_informative_from_independent() -> None:
    from forethought.predgen.mine import dv_bound, label_entropy, mine_estimate

    assert float(dv_bound(torch.zeros(5), torch.zeros(7))) == pytest.approx(0.0, abs=1e-6)
    g = torch.Generator().manual_seed(0)
    y = torch.randint(2, (800,), generator=g)
    informative = torch.nn.functional.one_hot(y, 2).float() * 2 + 0.3 * torch.randn(800, 2, generator=g)
    noise = torch.randn(800, 2, generator=g)
    kw = dict(steps=300, batch_size=128, lr=1e-3, hidden=32)
    good = mine_estimate(informative[:400], y[:400], informative[400:], y[400:], 2, **kw)
    bad = mine_estimate(noise[:400], y[:400], noise[400:], y[400:], 2, **kw)
    h = label_entropy(y.tolist())
    assert good["eval"] > 0.5 * h and abs(bad["eval"]) < 0.1
    assert good["eval"] <= h + 0.05  # a lower bound on I(Y;Z) <= H(Y), up to estimation noise


def test_cli_mine(world: dict, tmp_path: Path) -> None:
    _cli_train(world, tmp_path, "predgen")
    code = main(["predgen", "mine", "--model", str(tmp_path / "predgen"), "--steps", "20", "--seeds", "[0, 1]",
                 "--batch_size", "8"])
    assert code == 0
    res = json.loads((tmp_path / "predgen" / "mine.json").read_text())
    assert set(res["estimates"]) == {"pooled_last", "pooled_mean", "tokens"}
    assert res["estimates"]["tokens"]["dim"] > res["estimates"]["pooled_last"]["dim"]
    assert len(res["estimates"]["tokens"]["heldout"]["per_seed"]) == 2 and res["H_Y"] > 0
    assert (tmp_path / "predgen" / "mine.png").is_file()


def test_corrupt_saved_model_is_a_clear_error(world: dict, tmp_path: Path, capsys: pytest.CaptureFixture,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from peft import PeftModel

    from forethought.predgen.model import load_model, read_meta

    _cli_train(world, tmp_path, "predgen", "--train.steps", "1", "--task.max_eval_examples", "2")
    model = tmp_path / "predgen" / "model"

    def bug(*args: Any, **kwargs: Any) -> None:
        raise TypeError("a bug in the loading code")

    with monkeypatch.context() as patch:  # a programming error keeps its type and traceback
        patch.setattr(PeftModel, "from_pretrained", bug)
        with pytest.raises(TypeError, match="a bug in the loading code"):
            load_model(model, read_meta(model))
    head = model / "head.safetensors"
    head.write_bytes(head.read_bytes()[:40])
    assert main(["predgen", "eval", "--model", str(tmp_path / "predgen")]) == 2
    assert "head.safetensors is missing or corrupt" in capsys.readouterr().err
    adapter = next((model / "adapter").glob("*.safetensors"))
    adapter.write_bytes(b"\0" * 16)
    assert main(["predgen", "eval", "--model", str(tmp_path / "predgen")]) == 2
    assert "cannot load the saved model" in capsys.readouterr().err


@pytest.mark.parametrize("task", ["sst2", "boolq", "arc-easy", "arc-challenge", "piqa", "stsb", "sick", "wassa",
                                  "wassa-joy"])
def test_every_builtin_task_trains_and_evaluates(world: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 task: str) -> None:
    from test_predgen_tasks import _make_root  # the fake data root with the real file layouts

    monkeypatch.setenv("FORETHOUGHT_DATA", str(_make_root(tmp_path / "data")))
    code = main(["predgen", "train", "--config", "tiny", "--base", str(world["model"]), "--task.name", task,
                 "--train.steps", "1", "--eval.latency_examples", "0", "--eval.decoder", "expected",
                 "--run.out_dir", str(tmp_path), "--run.name", task])
    assert code == 0
    res = json.loads((tmp_path / task / "results.json").read_text())
    assert res["parse_failure_rate"] == 0 and res["eval_examples"] > 0
    assert ("accuracy" in res) != ("mse" in res)
    assert ("expected_value" in res) == ("mse" in res)


def test_text_answers_decode_only_the_examples_own_choices(world: dict, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """ARC with text answers: every example decodes under its own choices' trie (the fake ARC's choices of
    different questions share all but their first words, so a task-wide trie would mix them), batched decoding
    equals one-at-a-time decoding, and the CLI's predictions are always one of the example's own choices."""
    from test_predgen_tasks import _make_root

    monkeypatch.setenv("FORETHOUGHT_DATA", str(_make_root(tmp_path / "data")))
    spec, ex = load_task("arc-easy", "eval", 0, answer="text")
    spec2, ex2 = load_task("arc-easy", "train", 0, answer="text")
    examples = ex + ex2
    enc = Encoder(spec, world["tok"], PromptConfig(max_prompt_tokens=48))
    items = enc.encode(examples)
    assert enc.trie is None and all(it["trie"].values == [spec.labels.index(k) for k in e.options]
                                    for it, e in zip(items, examples, strict=True))
    assert [it["answer"] for it in items] == [enc.answer_tokens(e.options[e.target]) + [enc.eos_id]
                                              for e in examples]
    m = _model(world, "generator", enc)
    b = enc.collate(items)
    d = constrained_greedy(m.lm, enc.tries(b), b["prompt_ids"], b["prompt_mask"], pad_id=enc.pad_id)
    for r, (it, _example) in enumerate(zip(items, examples, strict=True)):
        toks = d.tokens[r][d.mask[r]].tolist()
        assert toks in it["trie"].sequences and toks == it["trie"].sequences[d.choice[r]]
        one = enc.collate([it])
        alone = constrained_greedy(m.lm, enc.tries(one), one["prompt_ids"], one["prompt_mask"])
        assert alone.choice == [d.choice[r]]
    for method in ("generator", "predgen"):
        code = main(["predgen", "train", "--config", "tiny", "--base", str(world["model"]), "--method", method,
                     "--task.name", "arc-easy", "--task.answer", "text", "--train.steps", "2",
                     "--eval.latency_examples", "0", "--run.out_dir", str(tmp_path), "--run.name", method])
        assert code == 0
        rows = [json.loads(line) for line in (tmp_path / method / "predictions.jsonl").read_text().splitlines()]
        by_id = {e.id: e for e in ex}
        assert len(rows) == len(ex)
        for row in rows:
            options = by_id[row["id"]].options
            assert row["decoded_text"].strip() == options[row["decoded"]]  # its own choice, letter and text agree
        assert json.loads((tmp_path / method / "model" / "predgen.json").read_text())["task_spec"]["answer"] == "text"
    code = main(["predgen", "eval", "--model", str(tmp_path / "predgen"), "--eval.latency_examples", "0"])
    assert code == 0  # the saved model decodes text answers again


def test_two_process_training(world: dict, tmp_path: Path) -> None:
    """torchrun, 2 CPU processes (gloo): the Predictor's losses (a mean over examples, so the mean of the two
    ranks' means is the global mean) match the 1-process run on the same global batch; PredGen runs under DDP.
    (Token-averaged losses are averaged over the global batch too: their sums and counts are all-reduced, see
    core/accumulate.py.)"""
    import os
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    torchrun = Path(sys.executable).parent / "torchrun"
    base = ["predgen", "train", "--base", str(world["model"]), "--task.name", str(world["data"]),
            "--task.target_field", "label", "--task.text_fields", "[text]", "--adapter.r", "4", "--train.steps", "4",
            "--train.batch_size", "8", "--train.log_every", "1", "--task.max_eval_examples", "4",
            "--eval.latency_examples", "0", "--run.out_dir", str(tmp_path)]
    curves = {}
    for name, launcher in (("one", [sys.executable, "-m", "forethought.cli"]),
                           ("two", [str(torchrun), "--nproc-per-node", "2", "--master-port", "29547", "-m",
                                    "forethought.cli"])):
        proc = subprocess.run([*launcher, *base, "--method", "predictor", "--run.name", name], env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        curves[name] = [json.loads(line)["loss"] for line in lines]
    assert len(curves["one"]) == len(curves["two"]) == 4
    assert max(abs(a - b) for a, b in zip(curves["one"], curves["two"], strict=True)) < 1e-4
    proc = subprocess.run([str(torchrun), "--nproc-per-node", "2", "--master-port", "29548", "-m", "forethought.cli",
                           *base, "--method", "predgen", "--run.name", "pg"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((tmp_path / "pg" / "results.json").read_text())["parse_failure_rate"] == 0


def test_eval_and_mine_use_the_runs_own_split(world: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture) -> None:
    """A run on a file without eval_path holds out the split of its split seed (task.split_seed 1 here; never the
    run seed); eval and mine must score exactly those examples (another split seed's held-out part is partly the
    training data), and refuse when the data changed."""
    from forethought.predgen import mine
    from forethought.predgen.config import TaskConfig
    from forethought.predgen.data import split_seed

    data = write_csv(tmp_path / "reviews.csv", _rows(120, 0))
    opts = dict(target_field="label", text_fields=["text"], id_field="id")
    task = TaskConfig(name=str(data), split_seed=1)
    held_out = [ex.id for ex in load_task(str(data), "eval", split_seed(task), **opts)[1]]
    trained = {ex.id for ex in load_task(str(data), "train", split_seed(task), **opts)[1]}
    other = split_seed(TaskConfig(name=str(data)))  # the default split seed 0: a different split
    assert held_out != [ex.id for ex in load_task(str(data), "eval", other, **opts)[1]]
    code = main(["predgen", "train", "--method", "predictor", "--base", str(world["model"]), "--task.name", str(data),
                 "--task.target_field", "label", "--task.text_fields", "[text]", "--task.id_field", "id",
                 "--task.split_seed", "1", "--adapter.r", "4", "--train.steps", "1", "--train.batch_size", "4",
                 "--eval.latency_examples", "0", "--run.seed", "3", "--run.out_dir", str(tmp_path),
                 "--run.name", "s1"])
    assert code == 0
    run = tmp_path / "s1"
    ids = [json.loads(x)["id"] for x in (run / "predictions.jsonl").read_text().splitlines()]
    assert ids == held_out
    assert main(["predgen", "eval", "--model", str(run), "--eval.latency_examples", "0"]) == 0
    ids = [json.loads(x)["id"] for x in (run / "eval-eval.predictions.jsonl").read_text().splitlines()]
    assert ids == held_out and not set(ids) & trained
    assert json.loads((run / "eval-eval.json").read_text())["split_checked"] is True
    seen: list[list[str]] = []
    extract = mine.extract

    def spy(model: Any, enc: Any, items: list[dict], *rest: Any) -> dict:
        seen.append([i["id"] for i in items])
        return extract(model, enc, items, *rest)

    monkeypatch.setattr(mine, "extract", spy)
    assert main(["predgen", "mine", "--model", str(run), "--representations", "[pooled_last]", "--seeds", "[0]",
                 "--steps", "2", "--max_examples", "0"]) == 0
    assert seen == [held_out]
    # a model saved before runs recorded their split falls back to its run's config.yaml (same seed)
    meta_path = run / "model" / "predgen.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({k: v for k, v in meta.items() if k != "data"}))
    assert main(["predgen", "eval", "--model", str(run), "--eval.latency_examples", "0"]) == 0
    ids = [json.loads(x)["id"] for x in (run / "eval-eval.predictions.jsonl").read_text().splitlines()]
    assert ids == held_out and json.loads((run / "eval-eval.json").read_text())["split_checked"] is False
    (run / "config.yaml").rename(run / "config.yaml.away")  # ... and without that either, it cannot tell
    capsys.readouterr()
    assert main(["predgen", "eval", "--model", str(run)]) == 2
    assert "cannot tell which examples the model was trained on" in capsys.readouterr().err
    meta_path.write_text(json.dumps(meta))
    # the data changed since training: the recorded ids no longer match, a clear error instead of a silent split
    write_csv(data, _rows(119, 0))
    capsys.readouterr()
    assert main(["predgen", "eval", "--model", str(run)]) == 2
    assert "changed since training" in capsys.readouterr().err


def test_regression_predictor_with_a_wide_range(world: dict, tmp_path: Path) -> None:
    """The Predictor never decodes, so it must not build the set of well-formed numbers: 0..100000 with two
    decimals is 10 million of them (it refused the task). Its learning curve has MSE and Pearson."""
    rng = random.Random(0)
    data = write_csv(tmp_path / "wide.csv", [{"text": " ".join(rng.choice(WORDS) for _ in range(4)),
                                         "score": f"{rng.uniform(0, 100000):.2f}"} for _ in range(40)]
                + [{"text": "the plot", "score": "0"}, {"text": "a scene", "score": "100000"}])
    code = main(["predgen", "train", "--method", "predictor", "--base", str(world["model"]), "--task.name", str(data),
                 "--task.target_field", "score", "--task.task_type", "regression", "--adapter.r", "4",
                 "--train.steps", "2", "--train.batch_size", "4", "--train.eval_every", "1",
                 "--eval.latency_examples", "0", "--run.out_dir", str(tmp_path), "--run.name", "wide"])
    assert code == 0
    res = json.loads((tmp_path / "wide" / "results.json").read_text())
    assert res["mse"] > 0 and [r["step"] for r in res["learning_curve"]] == [1, 2]
    assert {"mse", "pearson", "examples_seen"} <= res["learning_curve"][0].keys()
    assert res["learning_curve"][-1]["mse"] == pytest.approx(res["mse"])


def test_learning_curve_and_report(world: dict, tmp_path: Path) -> None:
    """--train.eval_every 2 over 4 steps: two curve points (steps 2 and 4) in results.json and metrics.jsonl;
    the last one is the final evaluation (same model, same examples); report.md links the plot."""
    res = _cli_train(world, tmp_path, "predictor", "--train.eval_every", "2", "--task.max_eval_examples", "10",
                     "--eval.latency_examples", "0")
    run = tmp_path / "predictor"
    curve = res["learning_curve"]
    assert [(r["step"], r["examples_seen"]) for r in curve] == [(2, 8), (4, 16)]
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r.get("eval")] == [2, 4]
    assert curve[-1]["accuracy"] == pytest.approx(res["accuracy"]) and res["eval_examples"] == 10
    logged = [r for r in rows if "loss" in r]
    assert logged and all(r["grad_norm_head"] > 0 and r["grad_norm_writer"] > 0 for r in logged)
    assert (run / "learning_curve.png").stat().st_size > 0
    report = (run / "report.md").read_text()
    assert "predictor" in report and "learning_curve.png" in report and f"{res['accuracy']:.4f}" in report


def test_predgen_curve_has_its_decoded_answer(world: dict, tmp_path: Path) -> None:
    """PredGen's curve points carry the decoded answer's metrics beside the adapter's; the last point is the
    final evaluation of both. Other methods' points do not (the Generator's prediction is its decoded answer)."""
    res = _cli_train(world, tmp_path, "predgen", "--train.eval_every", "2", "--task.max_eval_examples", "10",
                     "--eval.latency_examples", "0")
    curve = res["learning_curve"]
    assert [r["step"] for r in curve] == [2, 4] and all({"accuracy", "decoded_accuracy"} <= r.keys() for r in curve)
    assert curve[-1]["accuracy"] == pytest.approx(res["accuracy"])
    assert curve[-1]["decoded_accuracy"] == pytest.approx(res["decoded"]["accuracy"])
    assert (tmp_path / "predgen" / "learning_curve.png").stat().st_size > 0
    gen = _cli_train(world, tmp_path, "generator", "--train.eval_every", "4", "--task.max_eval_examples", "10",
                     "--eval.latency_examples", "0")
    assert not any(k.startswith("decoded_") for k in gen["learning_curve"][0])


def test_check_layer_bounds() -> None:
    from forethought.core.errors import ForethoughtError
    from forethought.predgen.model import check_layer

    lm = tiny_llama(vocab_size=40, hidden_size=16, layers=2, heads=2, eos_token_id=1)
    n_states = len(lm(input_ids=torch.tensor([[3, 4]]), output_hidden_states=True).hidden_states)
    for layer in range(-n_states, n_states):  # every index the hidden states accept is accepted
        assert check_layer(layer, lm) == layer
    for layer in (n_states, -n_states - 1, 99):
        with pytest.raises(ForethoughtError, match=f"layer {layer} is out of range"):
            check_layer(layer, lm)


def test_paired_matches_rows_by_id_and_hand_computed_values() -> None:
    """A right on r0-r2, B on r2-r3 (B's rows in another order): accuracy +0.25, McNemar b = 2, c = 1,
    p = 2 · P[Bin(3, ½) ≤ 1] = 1. Regression: MSE 4/3 vs 1/3, Pearson as numpy's."""
    from forethought.predgen.compare import paired

    a = [{"id": f"r{i}", "prediction": p, "target": "pos"} for i, p in enumerate(["pos", "pos", "pos", "neg"])]
    b = [{"id": f"r{i}", "prediction": p, "target": "pos"} for i, p in enumerate(["neg", "neg", "pos", "pos"])]
    res = paired(a, b[::-1], n_boot=2_000)
    assert res["difference"] == pytest.approx(0.25) and res["n"] == 4
    assert (res["mcnemar"]["b"], res["mcnemar"]["c"], res["mcnemar"]["p_value"]) == (2, 1, pytest.approx(1.0))
    lo, hi = res["ci95"]
    assert -1 <= lo <= 0.25 <= hi <= 1
    t, pa, pb = [1.0, 2.0, 3.0], [1.0, 2.0, 5.0], [2.0, 2.0, 3.0]
    ra = [{"id": i, "prediction": x, "target": y} for i, (x, y) in enumerate(zip(pa, t, strict=True))]
    rb = [{"id": i, "prediction": x, "target": y} for i, (x, y) in enumerate(zip(pb, t, strict=True))]
    reg = paired(ra, rb, "regression", n_boot=500)
    assert reg["mse"]["difference"] == pytest.approx(1.0) and reg["mse"]["a"] == pytest.approx(4 / 3)
    r = np.corrcoef(pa, t)[0, 1] - np.corrcoef(pb, t)[0, 1]
    assert reg["pearson"]["difference"] == pytest.approx(r)


def test_curve_points_keep_predictions_and_compare_pairs_them(world: dict, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture) -> None:
    """Each curve point's predictions are kept (the last one scores as the final evaluation), and
    ``predgen compare`` pairs a run's adapter with its own decoded answer and two of its curve points, matching
    the counts computed here from the rows."""
    from forethought.predgen.compare import paired

    res = _cli_train(world, tmp_path, "predgen", "--train.eval_every", "2", "--task.max_eval_examples", "10",
                     "--eval.latency_examples", "0")
    run = tmp_path / "predgen"
    kept = sorted(p.name for p in (run / "curve_predictions").iterdir())
    assert kept == ["step-000002.jsonl", "step-000004.jsonl"]
    for point in res["learning_curve"]:
        rows = [json.loads(x) for x in (run / "curve_predictions" / f"step-{point['step']:06d}.jsonl").read_text()
                .splitlines()]
        assert len(rows) == 10
        assert np.mean([r["prediction"] == r["target"] for r in rows]) == pytest.approx(point["accuracy"])
        assert np.mean([r["decoded"] == r["target"] for r in rows]) == pytest.approx(point["decoded_accuracy"])

    capsys.readouterr()
    out = tmp_path / "cmp.json"
    assert main(["predgen", "compare", "--a", str(run), "--b", str(run), "--key_b", "decoded", "--out", str(out)]) == 0
    cmp = json.loads(out.read_text())
    rows = [json.loads(x) for x in (run / "predictions.jsonl").read_text().splitlines()]
    b = sum(r["prediction"] == r["target"] and r["decoded"] != r["target"] for r in rows)
    c = sum(r["prediction"] != r["target"] and r["decoded"] == r["target"] for r in rows)
    assert (cmp["mcnemar"]["b"], cmp["mcnemar"]["c"], cmp["n"]) == (b, c, len(rows))
    assert cmp["difference"] == pytest.approx(res["accuracy"] - res["decoded"]["accuracy"])
    assert cmp["task_type"] == "classification" and "accuracy A − B" in capsys.readouterr().out

    assert main(["predgen", "compare", "--a", str(run), "--step_a", "4", "--b", str(run), "--step_b", "2",
                 "--out", str(out)]) == 0
    steps = [[json.loads(x) for x in (run / "curve_predictions" / f"step-00000{s}.jsonl").read_text().splitlines()]
             for s in (4, 2)]
    assert json.loads(out.read_text())["mcnemar"] == paired(*steps)["mcnemar"]


def _step_grads(model: PredGenModel, loss_fn: Any, batch: dict, k: int) -> tuple[dict[str, torch.Tensor], float]:
    """One optimizer step's gradients and loss, the batch split into k micro-batches as the trainer splits it."""
    from forethought.core.accumulate import accumulate_gradients, split_batch
    from forethought.core.runtime import compute_init

    rt = compute_init("cpu", seed=0)
    model.zero_grad(set_to_none=True)
    out = accumulate_gradients(model, loss_fn, [split_batch(batch, i, k) for i in range(k)], rt.accelerator)
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, float(out.loss)


@pytest.mark.parametrize("method", ["generator", "predgen", "predgen-choices", "predgen-logits"])
def test_text_answers_accumulate_exactly(world: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         method: str) -> None:
    """Text answers carry one trie per row: split with the batch, a step of 2 micro-batches is the step of one
    batch (it crashed: '4 tries for 2 rows'), and the CLI trains with grad_accum 2."""
    from test_predgen_tasks import _make_root

    monkeypatch.setenv("FORETHOUGHT_DATA", str(_make_root(tmp_path / "data")))
    spec, ex = load_task("arc-easy", "eval", 0, answer="text")
    _, ex2 = load_task("arc-easy", "train", 0, answer="text")
    enc = Encoder(spec, world["tok"], PromptConfig(max_prompt_tokens=48))
    batch = with_sampling(enc.collate(enc.encode((ex + ex2)[:4])), 0.5, 7)
    s = PredGenSettings()
    loss_fn = (lambda m, b: m(generator_loss, b, True)) if method == "generator" else \
        (lambda m, b: m(predgen_loss, b, s, enc, "classification", -1, True))
    model = _model(world, method.split("-")[0], enc)
    if "-" in method:  # the other adapters
        torch.manual_seed(0)
        model.head = build_head("predgen", 32, enc.n_out, "attention", 16, None, method.split("-")[1],
                                len(world["tok"]))
    one, loss1 = _step_grads(model, loss_fn, batch, 1)
    two, loss2 = _step_grads(model, loss_fn, batch, 2)
    assert one.keys() == two.keys() and any(g.abs().max() > 0 for n, g in one.items() if "lora" in n)
    for n, g in one.items():
        assert torch.allclose(g, two[n], rtol=0, atol=1e-5), (n, (g - two[n]).abs().max())  # fp32 reorder
    assert loss1 == pytest.approx(loss2, rel=1e-6, abs=1e-6)
    if "-" in method:
        return
    code = main(["predgen", "train", "--config", "tiny", "--base", str(world["model"]), "--method", method,
                 "--task.name", "arc-easy", "--task.answer", "text", "--train.steps", "2", "--train.grad_accum", "2",
                 "--train.batch_size", "4", "--eval.latency_examples", "0", "--run.out_dir", str(tmp_path),
                 "--run.name", method])
    assert code == 0


def test_two_process_training_with_text_answers(world: dict, tmp_path: Path) -> None:
    """torchrun, 2 CPU processes (gloo), text answers: each process gets its own rows' tries."""
    import os
    import subprocess
    import sys

    from test_predgen_tasks import _make_root

    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "FORETHOUGHT_DATA": str(_make_root(tmp_path / "data"))}
    torchrun = Path(sys.executable).parent / "torchrun"
    proc = subprocess.run([str(torchrun), "--nproc-per-node", "2", "--master-port", "29549", "-m", "forethought.cli",
                           "predgen", "train", "--config", "tiny", "--base", str(world["model"]), "--task.name",
                           "arc-easy", "--task.answer", "text", "--train.steps", "2", "--train.batch_size", "4",
                           "--train.grad_accum", "2", "--eval.latency_examples", "0", "--run.out_dir", str(tmp_path),
                           "--run.name", "pg"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((tmp_path / "pg" / "results.json").read_text())["eval_examples"] == 2


def _bos_tokenizer(world: dict) -> Any:
    """The world's tokenizer, made to add a BOS token (as Llama-3's does) and given a chat template that writes it."""
    import copy

    from tokenizers.processors import TemplateProcessing

    tok = copy.deepcopy(world["tok"])
    tok.add_special_tokens({"bos_token": "<s>"})
    tok._tokenizer.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.bos_token_id)])
    tok.chat_template = ("{{ bos_token }}{% for m in messages %}<u>{{ m['content'] }}</u>{% endfor %}"
                         "{% if add_generation_prompt %}<a>{% endif %}")
    return tok


def test_chat_prompts_have_one_bos(world: dict) -> None:
    tok = _bos_tokenizer(world)
    spec, ex = load_task(str(world["data"]), "train", 0, target_field="label", text_fields=["text"], id_field="id")
    assert tok("x")["input_ids"][0] == tok.bos_token_id  # the tokenizer adds BOS ...
    for chat in (False, True):
        ids = Encoder(spec, tok, PromptConfig(max_prompt_tokens=48, chat=chat)).prompt_tokens(ex[0])
        assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1, (chat, ids[:4])  # ... once


def test_absent_choices_get_zero_probability(world: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ARC items with 3 or 4 choices: the Predictor's and PredGen's heads never give the absent letters any
    probability, even when the head prefers them; the decoder picks only present letters."""
    from test_predgen_tasks import _make_root

    from forethought.predgen.methods import mask_absent, predict

    monkeypatch.setenv("FORETHOUGHT_DATA", str(_make_root(tmp_path / "data")))
    spec, ex = load_task("arc-easy", "eval", 0)
    _, ex2 = load_task("arc-easy", "train", 0)
    examples = ex + ex2
    enc = Encoder(spec, world["tok"], PromptConfig(max_prompt_tokens=48))
    items = enc.encode(examples)
    present = torch.tensor([it["present"] for it in items])
    assert present.tolist() == [[k in e.options for k in "ABCDE"] for e in examples] and not present.all()
    probs = torch.softmax(mask_absent(torch.randn(len(items), 5), present), -1)
    assert (probs[~present] == 0).all() and torch.allclose(probs.sum(-1), torch.ones(len(items)))
    for kind in ("predictor", "predgen"):
        m = _model(world, kind, enc)
        last = m.head.out if kind == "predictor" else m.head.mlp[-1]
        with torch.no_grad():
            last.bias.copy_(torch.tensor([0.0, 0, 0, 50, 100]))  # prefers E, then D
        preds = predict(m, kind, enc, items, 4, -1)
        assert preds.prediction == [4 if "E" in e.options else 3 if "D" in e.options else preds.prediction[i]
                                    for i, e in enumerate(examples)]
        assert all(e.options and spec.labels[p] in e.options for p, e in zip(preds.prediction, examples, strict=True))
        if preds.decoded is not None:
            assert all(spec.labels[d] in e.options for d, e in zip(preds.decoded, examples, strict=True))
        batch = with_sampling(enc.collate(items), 0.0, 0)
        loss = predictor_loss(m, batch, "classification", -1)[0] if kind == "predictor" else \
            predgen_loss(m, batch, PredGenSettings(), enc, "classification", -1, True)[0].value()
        assert torch.isfinite(loss)


def test_compare_pairs_the_expected_value(tmp_path: Path) -> None:
    """A regression run's expected value vs its greedy answer, paired: the hand-computed MSE difference."""
    rows = [{"id": f"e{i}", "prediction": p, "decoded": p, "expected_value": e, "target": t}
            for i, (p, e, t) in enumerate([(1.0, 1.5, 2.0), (3.0, 2.5, 2.0), (0.0, 0.5, 1.0), (4.0, 3.0, 3.5)])]
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "cmp.json"
    assert main(["predgen", "compare", "--a", str(path), "--b", str(path), "--key_a", "expected_value",
                 "--key_b", "decoded", "--n_boot", "200", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    mse_e = np.mean([(r["expected_value"] - r["target"]) ** 2 for r in rows])
    mse_d = np.mean([(r["decoded"] - r["target"]) ** 2 for r in rows])
    assert res["mse"]["difference"] == pytest.approx(mse_e - mse_d) and res["a"]["key"] == "expected_value"


def test_rank_decoder_matches_brute_force(world: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ARC with text answers, batched: each choice's summed log-probability equals a plain forward over the
    unpadded prompt + " " + choice (no EOS), and the rank / per-character picks are its argmaxes."""
    from test_predgen_tasks import _make_root

    from forethought.predgen.decoding import choice_logprobs
    from forethought.predgen.methods import predict

    monkeypatch.setenv("FORETHOUGHT_DATA", str(_make_root(tmp_path / "data")))
    spec, ex = load_task("arc-easy", "eval", 0, answer="text")
    _, ex2 = load_task("arc-easy", "train", 0, answer="text")
    examples = ex + ex2
    enc = Encoder(spec, world["tok"], PromptConfig(max_prompt_tokens=48))
    items = enc.encode(examples)
    m = _model(world, "generator", enc)
    m.eval()
    b = enc.collate(items)
    got = choice_logprobs(m.lm, [[t for _, t, _ in c] for c in b["choices"]], b["prompt_ids"], b["prompt_mask"])
    for it, e, lps in zip(items, examples, got, strict=True):
        assert [c for c, _, _ in it["choices"]] == [spec.labels.index(k) for k in e.options]
        for (_, toks, n_chars), text, lp in zip(it["choices"], e.options.values(), lps, strict=True):
            assert n_chars == len(" " + text) and toks == enc.answer_tokens(text)
            ids = torch.tensor([it["prompt"] + toks])
            with torch.no_grad():
                logp = torch.log_softmax(m.lm(input_ids=ids).logits[0].double(), -1)
            P = len(it["prompt"])
            want = sum(float(logp[P - 1 + j, t]) for j, t in enumerate(toks))
            assert lp == pytest.approx(want, abs=1e-4)
    preds = predict(m, "generator", enc, items, 2, -1, rank=True)
    for it, lps, r, rn in zip(items, got, preds.rank, preds.rank_norm, strict=True):
        cands = it["choices"]
        assert r == cands[int(np.argmax(lps))][0]
        assert rn == cands[int(np.argmax([lp / c[2] for lp, c in zip(lps, cands, strict=True)]))][0]


def test_cli_zero_shot_base_and_rank(world: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--method base`` evaluates the untrained model (nothing trained or saved); ``--eval.decoder rank`` adds
    the rank scores to train, eval and the predictions, which compare can pair."""
    from test_predgen_tasks import _make_root

    monkeypatch.setenv("FORETHOUGHT_DATA", str(_make_root(tmp_path / "data")))
    common = ["--config", "tiny", "--base", str(world["model"]), "--task.name", "arc-easy", "--task.answer", "text",
              "--eval.decoder", "rank", "--eval.latency_examples", "0", "--run.out_dir", str(tmp_path)]
    assert main(["predgen", "train", *common, "--method", "base", "--run.name", "base"]) == 0
    assert main(["predgen", "train", *common, "--method", "generator", "--train.steps", "1", "--run.name", "gen"]) == 0
    base = json.loads((tmp_path / "base" / "results.json").read_text())
    assert base["steps"] == 0 and not (tmp_path / "base" / "model").exists()
    assert {"accuracy", "decoded", "rank", "rank_norm"} <= base.keys()
    assert "rank (per character)" in (tmp_path / "base" / "report.md").read_text()
    rows = [json.loads(line) for line in (tmp_path / "gen" / "predictions.jsonl").read_text().splitlines()]
    assert rows and all({"rank", "rank_norm"} <= r.keys() for r in rows)
    assert main(["predgen", "eval", "--model", str(tmp_path / "gen"), "--eval.decoder", "rank",
                 "--eval.latency_examples", "0"]) == 0
    assert "rank" in json.loads((tmp_path / "gen" / "eval-eval.json").read_text())
    assert main(["predgen", "compare", "--a", str(tmp_path / "gen"), "--b", str(tmp_path / "base"), "--key_a", "rank",
                 "--key_b", "rank", "--n_boot", "100"]) == 0


@pytest.mark.parametrize("loglik", [0.0, 1.0], ids=["states", "states+loglik"])
def test_choice_adapter_permutes_with_the_choices(world: dict, loglik: float) -> None:
    """The choice-scoring adapter on a tiny random Llama: the same question with its choices' texts under other
    letters (a prompt that does not list them, as lm-eval's ARC format) gives each text the same probability
    under its new letter; the absent fifth class gets none. Also when it reads the choices' log-likelihoods."""
    from forethought.predgen.methods import predict
    from forethought.predgen.tasks import Example, TaskSpec

    spec = TaskSpec("mc", "classification", list("ABCDE"), "Question: {question}\nAnswer:", answer="text")
    texts = ["good movie", "bad plot", "great actor", "dull scene"]
    perm = [2, 0, 3, 1]  # the text at letter i moves to letter perm[i]
    moved = [texts[perm.index(j)] for j in range(4)]
    examples = [Example({"question": "the movie was fine"}, "A", "x", dict(zip("ABCD", texts, strict=True))),
                Example({"question": "the movie was fine"}, "ABCD"[perm[0]], "y",
                        dict(zip("ABCD", moved, strict=True)))]
    enc = Encoder(spec, world["tok"], PromptConfig(max_prompt_tokens=48))
    items = enc.encode(examples)
    torch.manual_seed(0)
    lm = tiny_llama(vocab_size=len(world["tok"]), hidden_size=32, layers=2, heads=4, kv_heads=2,
                    eos_token_id=world["tok"].eos_token_id)
    m = PredGenModel(lm, build_head("predgen", 32, enc.n_out, "attention", 16, None, "choices",
                                    choice_loglik=loglik))
    assert (m.head.beta is None) == (loglik == 0)
    preds = predict(m, "predgen", enc, items, 2, -1)
    p0, p1 = torch.tensor(preds.probs[0]), torch.tensor(preds.probs[1])
    assert p0[4] == 0 and p1[4] == 0 and p0[:4].min() > 0
    assert torch.allclose(p1[perm], p0[:4], atol=1e-5), (p0, p1)
    assert p0[:4].max() - p0[:4].min() > 1e-4  # the scores differ, so the check above can fail
    assert preds.decoded[1] == perm[preds.decoded[0]]  # the decoder wrote the same text


def test_choice_loglik_is_the_rank_decoders_score(world: dict) -> None:
    """The log-likelihoods the adapter reads (choice_states, loglik=True) are exactly the rank decoder's scores
    (choice_logprobs): the same choices after the same prompt, EOS excluded."""
    from forethought.predgen.decoding import choice_logprobs, prompt_pass
    from forethought.predgen.methods import choice_states

    torch.manual_seed(1)
    lm = tiny_llama(vocab_size=len(world["tok"]), hidden_size=32, layers=2, heads=4, kv_heads=2,
                    eos_token_id=world["tok"].eos_token_id).eval()
    tok = world["tok"]
    prompts = [tok("the movie was fine")["input_ids"], tok("a dull plot")["input_ids"]]
    n = max(map(len, prompts))
    ids = torch.tensor([[tok.eos_token_id] * (n - len(p)) + p for p in prompts])  # left-padded
    mask = torch.tensor([[False] * (n - len(p)) + [True] * len(p) for p in prompts])
    words = [["good movie", "bad", "great actor here"], ["dull scene", "fine"]]
    choices = [[(k, tok(" " + w)["input_ids"], len(w)) for k, w in enumerate(row)] for row in words]
    pp = prompt_pass(lm, ids, mask, -1)
    ch = choice_states(lm, pp, mask, choices, tok.eos_token_id, -1, loglik=True)
    want = choice_logprobs(lm, [[t for _, t, _ in row] for row in choices], ids, mask, prompt=pp)
    for b, row in enumerate(want):
        assert ch.loglik[b, :len(row)].tolist() == pytest.approx(row, abs=1e-5)
    assert choice_states(lm, pp, mask, choices, tok.eos_token_id, -1).loglik is None


@pytest.mark.parametrize("extra", [["--task.answer", "text"],
                                   ["--head.reads", "choices", "--task.answer", "text", "--head.choice_loglik", "1"],
                                   ["--head.reads", "choices_loglik", "--task.answer", "text"],
                                   ["--head.reads", "logits", "--task.answer", "text"],
                                   ["--task.answer", "name"], ["--task.answer", "name", "--head.reads", "choices"]],
                         ids=["auto-text", "choices-loglik-text", "choices_loglik-text", "logits-text", "name",
                              "choices-name"])
def test_cli_multiple_choice_adapters(world: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      extra: list[str]) -> None:
    """PredGen with each adapter and answer format trains, saves, reloads (same predictions) and predicts only
    the examples' own choices."""
    from test_predgen_tasks import _make_root

    monkeypatch.setenv("FORETHOUGHT_DATA", str(_make_root(tmp_path / "data")))
    code = main(["predgen", "train", "--config", "tiny", "--base", str(world["model"]), "--task.name", "arc-easy",
                 "--train.steps", "2", "--eval.latency_examples", "0", "--run.out_dir", str(tmp_path),
                 "--run.name", "pg", *extra])
    assert code == 0
    rows = [json.loads(line) for line in (tmp_path / "pg" / "predictions.jsonl").read_text().splitlines()]
    _, ex = load_task("arc-easy", "eval", 0)
    by_id = {e.id: e for e in ex}
    names = "name" in extra
    for r in rows:
        letters = list(by_id[r["id"]].options)
        own = [f"answer{'ABCDE'.index(k) + 1}" for k in letters] if names else letters
        assert r["prediction"] in own and r["decoded"] in own
        if names:
            assert r["decoded_text"].strip() == r["decoded"]
    assert main(["predgen", "eval", "--model", str(tmp_path / "pg"), "--eval.latency_examples", "0"]) == 0
    again = [json.loads(line) for line in (tmp_path / "pg" / "eval-eval.predictions.jsonl").read_text().splitlines()]
    assert [r["prediction"] for r in again] == [r["prediction"] for r in rows]
    meta = json.loads((tmp_path / "pg" / "model" / "predgen.json").read_text())
    given = extra[extra.index("--head.reads") + 1] if "--head.reads" in extra else None
    reads = given or ("choices" if "text" in extra else "states")  # auto: choices with text answers
    loglik = "--head.choice_loglik" in extra or reads == "choices_loglik"  # the likelihood variant, either way
    assert meta["head"]["reads"] == reads.removesuffix("_loglik")
    assert meta["head"]["choice_loglik"] == (1.0 if loglik else 0.0)
    results = json.loads((tmp_path / "pg" / "results.json").read_text())
    assert ("likelihood variant" in results["prediction_by"]) == loglik
    assert ("not PredGen" in results["prediction_by"]) == loglik
    # multiple choice: the rank decoder runs without --eval.decoder rank, and the prediction's agreement with it
    # and with the written answer is what predictions.jsonl holds
    for key in ("rank", "rank_norm", "decoded"):
        same = sum(r["prediction"] == r[key] for r in rows) / len(rows)
        assert results["agreement"][key] == pytest.approx(same), key
    # text answers: the writing methods' default prompt is lm-eval-harness's, which does not list the choices
    template = meta["task_spec"]["template"]
    assert ("{choices}" in template) == ("text" not in extra), template


def test_validation_split_is_carved_from_training(world: dict, tmp_path: Path) -> None:
    """--task.val_examples: a seeded draw from the train split, never trained on, recorded in the run; the
    learning curve and results['validation'] score it, and eval --split validation scores it again."""
    from forethought.predgen.config import TaskConfig
    from forethought.predgen.data import load_splits

    task = TaskConfig(name=str(world["data"]), target_field="label", text_fields=["text"], id_field="id",
                      val_examples=10)
    _, train, val, evals = load_splits(task, 3)
    _, train0, _, _ = load_splits(dataclasses.replace(task, val_examples=0), 3)
    assert len(val) == 10 and not {e.id for e in val} & {e.id for e in train + evals}
    assert sorted(e.id for e in train + val) == sorted(e.id for e in train0)
    assert [e.id for e in load_splits(task, 3)[2]] == [e.id for e in val]  # seeded
    assert [e.id for e in load_splits(task, 4)[2]] != [e.id for e in val]
    code = main(["predgen", "train", "--base", str(world["model"]), "--method", "predictor", "--task.name",
                 str(world["data"]), "--task.target_field", "label", "--task.text_fields", "[text]", "--task.id_field",
                 "id", "--task.val_examples", "10", "--adapter.r", "2", "--train.steps", "2", "--train.batch_size", "4",
                 "--train.eval_every", "2", "--eval.latency_examples", "0", "--run.seed", "3",
                 "--run.out_dir", str(tmp_path), "--run.name", "v"])
    assert code == 0
    res = json.loads((tmp_path / "v" / "results.json").read_text())
    assert res["val_examples"] == 10 and res["learning_curve_split"] == "validation"
    assert res["learning_curve"][-1]["accuracy"] == pytest.approx(res["validation"]["accuracy"])
    rows = (tmp_path / "v" / "validation_predictions.jsonl").read_text().splitlines()
    assert [json.loads(r)["id"] for r in rows] == [e.id for e in val]
    meta = json.loads((tmp_path / "v" / "model" / "predgen.json").read_text())
    assert meta["data"]["val_ids"] == [e.id for e in val] and meta["data"]["train_examples"] == len(train)
    assert main(["predgen", "eval", "--model", str(tmp_path / "v"), "--split", "validation",
                 "--eval.latency_examples", "0"]) == 0
    again = json.loads((tmp_path / "v" / "eval-validation.json").read_text())
    assert again["accuracy"] == pytest.approx(res["validation"]["accuracy"]) and again["examples"] == 10


def test_adapters_saved_before_the_pooling_module_still_load() -> None:
    """A TaskAdapter's head.safetensors from before its pooling became a submodule (norm.*, query at the top)."""
    from forethought.predgen.model import TaskAdapter, _renamed_keys

    torch.manual_seed(0)
    new = TaskAdapter(8, 3, "attention", 4)
    old = {k.removeprefix("pool."): v for k, v in new.state_dict().items()}
    assert "query" in old and "norm.weight" in old
    loaded = TaskAdapter(8, 3, "attention", 4)
    loaded.load_state_dict(_renamed_keys(old, loaded))
    z, mask = torch.randn(2, 5, 8), torch.ones(2, 5, dtype=torch.bool)
    assert torch.equal(loaded(z, mask), new(z, mask))


def test_untrained_choice_adapter_starts_from_the_decoded_answer(world: dict, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Z of the written choice equals that choice's own states, so the untrained choice-scoring adapter (cosine
    term at its initial weight) already predicts what the model decoded."""
    from test_predgen_tasks import _make_root

    from forethought.predgen.methods import predict

    monkeypatch.setenv("FORETHOUGHT_DATA", str(_make_root(tmp_path / "data")))
    spec, ex = load_task("arc-easy", "eval", 0, answer="text")
    _, ex2 = load_task("arc-easy", "train", 0, answer="text")
    enc = Encoder(spec, world["tok"], PromptConfig(max_prompt_tokens=48))
    items = enc.encode(ex + ex2)
    m = _model(world, "predgen", enc)
    torch.manual_seed(0)
    m.head = build_head("predgen", 32, enc.n_out, "attention", 16, None, "choices")
    preds = predict(m, "predgen", enc, items, 3, -1)
    assert preds.prediction == preds.decoded


def test_regression_metrics_correlations_and_non_finite_predictions() -> None:
    """Pearson/Spearman are eval.stats' (ties get average ranks); a diverged run's nan/inf predictions give nan
    correlations rather than an error, constant predictions nan, and MSE/MAE still report what was predicted."""
    import math

    import scipy.stats

    from forethought.predgen.metrics import regression_metrics

    t, p = [1.0, 2.0, 2.0, 4.0, 5.0], [1.5, 1.0, 3.0, 3.0, 6.0]
    r = regression_metrics(t, p)
    assert r["pearson"] == pytest.approx(scipy.stats.pearsonr(t, p)[0])
    assert r["spearman"] == pytest.approx(scipy.stats.spearmanr(t, p)[0])
    assert r["mse"] == pytest.approx(np.mean((np.array(p) - np.array(t)) ** 2))
    bad = regression_metrics(t, [1.0, math.nan, 3.0, math.inf, 5.0])
    assert math.isnan(bad["pearson"]) and math.isnan(bad["spearman"]) and not math.isfinite(bad["mse"])
    flat = regression_metrics(t, [2.0] * 5)
    assert math.isnan(flat["pearson"]) and math.isnan(flat["spearman"]) and flat["mae"] == pytest.approx(1.2)


def _shift_lm(vocab: int = 16) -> Any:
    """A one-layer Llama whose next token is always the input token + 1 (mod vocab): attention and MLP write
    nothing (their output projections are zero), the embeddings are one-hot and the LM head shifts by one."""
    lm = tiny_llama(vocab_size=vocab, hidden_size=vocab, layers=1, heads=2, kv_heads=1, eos_token_id=0).double()
    with torch.no_grad():
        for layer in lm.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        lm.model.embed_tokens.weight.copy_(torch.eye(vocab))
        lm.lm_head.weight.copy_(torch.eye(vocab).roll(1, 0))  # row j reads e_{j-1}: logit j is high after j - 1
    return lm


def _ss_batch(prompt: list[list[int]], gold: list[list[int]], p: float, coins: list[list[float]]) -> dict:
    P, M = max(map(len, prompt)), max(map(len, gold))
    ids, pmask = torch.zeros(len(prompt), P, dtype=torch.long), torch.zeros(len(prompt), P, dtype=torch.long)
    answer, amask = torch.zeros(len(gold), M, dtype=torch.long), torch.zeros(len(gold), M, dtype=torch.bool)
    for b, (pr, g) in enumerate(zip(prompt, gold, strict=True)):
        ids[b, P - len(pr):], pmask[b, P - len(pr):] = torch.tensor(pr), 1
        answer[b, :len(g)], amask[b, :len(g)] = torch.tensor(g), True
    u = torch.zeros(len(gold), M, 2)
    u[:, :M - 1, 0] = torch.tensor(coins)
    return {"prompt_ids": ids, "prompt_mask": pmask, "answer_ids": answer, "answer_mask": amask, "p": p,
            "uniform": u, "coin": 0.0}


def test_scheduled_sampling_rollout_feeds_the_models_own_previous_tokens() -> None:
    from forethought.predgen.decoding import prompt_pass
    from forethought.predgen.methods import scheduled_inputs

    lm = _shift_lm()
    batch = _ss_batch([[3, 5]], [[9, 12, 7, 1]], 1.0, [[0.0, 0.0, 0.0]])  # p = 1: every input replaced
    pp = prompt_pass(lm, batch["prompt_ids"], batch["prompt_mask"])
    roll = scheduled_inputs(lm, pp, batch, PredGenSettings())  # the default: the paper's roll-out
    one = scheduled_inputs(lm, pp, batch, PredGenSettings(own_tokens="one_pass"))
    # roll-out: 5 -> 6 -> 7 -> 8, what the model writes after its own tokens; one pass: gold token + 1
    assert roll.tolist() == [[6, 7, 8]] and one.tolist() == [[6, 10, 13]]
    # they differ exactly after a replaced input: with input 1 alone replaced both read gold 9 before it
    part = _ss_batch([[3, 5]], [[9, 12, 7, 1]], 0.5, [[0.9, 0.1, 0.9]])
    assert scheduled_inputs(lm, pp, part, PredGenSettings()).tolist() == [[9, 10, 7]]
    assert scheduled_inputs(lm, pp, part, PredGenSettings(own_tokens="one_pass")).tolist() == [[9, 10, 7]]
    # the reference's per-batch coin: heads feeds the whole roll-out, tails none of it
    ref = PredGenSettings(per="batch")
    assert scheduled_inputs(lm, pp, {**part, "coin": 0.4}, ref).tolist() == [[6, 7, 8]]
    assert scheduled_inputs(lm, pp, {**part, "coin": 0.6}, ref).tolist() == [[9, 12, 7]]


def test_scheduled_sampling_rollout_is_greedy_generation_on_a_random_model() -> None:
    from forethought.predgen.decoding import prompt_pass
    from forethought.predgen.methods import scheduled_inputs

    lm = tiny_llama(vocab_size=40, hidden_size=32, layers=2, heads=4, eos_token_id=1).double()
    prompts, gold = [[2, 3, 4, 11], [7, 8]], [[5, 6, 7, 9, 1], [10, 1]]  # left padding; a short answer's pads
    batch = _ss_batch(prompts, gold, 1.0, [[0.0] * 4, [0.0] * 4])
    pp = prompt_pass(lm, batch["prompt_ids"], batch["prompt_mask"])
    roll = scheduled_inputs(lm, pp, batch, PredGenSettings())
    for b, prompt in enumerate(prompts):  # the model's greedy continuation, re-running the whole sequence
        seq = list(prompt)
        for _ in range(len(gold[b]) - 1):
            seq.append(int(lm(input_ids=torch.tensor([seq])).logits[0, -1].argmax()))
        fed = roll[b, :len(gold[b]) - 1].tolist()
        assert fed == seq[len(prompt):]
        assert roll[b, len(gold[b]) - 1:].tolist() == batch["answer_ids"][b, len(gold[b]) - 1:-1].tolist()
    one = scheduled_inputs(lm, pp, batch, PredGenSettings(own_tokens="one_pass"))
    assert one[:, 0].tolist() == roll[:, 0].tolist()  # the first input follows the prompt either way


def test_speed_times_both_forms_of_the_models_own_tokens(world: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """`predgen speed` times the roll-out and the one-pass form at each p on the same batches: each form's
    loss runs once per batch (plus the warm-up), and the forms really differ (own_tokens is passed through)."""
    from forethought.predgen import speed

    enc, items = _encoder(world, regression=True)
    model = _model(world, "predgen", enc)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    seen: list[str] = []
    real = speed._predgen_step

    def spy(m: PredGenModel, batch: dict, e: Encoder, settings: Any = None) -> torch.Tensor:
        seen.append(f"{settings.own_tokens}@{batch['p']:g}")
        return real(m, batch, e, settings)

    monkeypatch.setattr(speed, "_predgen_step", spy)
    out = speed.own_tokens_times(model, opt, enc, items, steps=2, batch_size=4, ps=(0.5, 1.0))
    assert set(out) == {"p=0.5", "p=1"}
    assert all(v["rollout_s"] > 0 and v["one_pass_s"] > 0 and v["ratio"] == v["rollout_s"] / v["one_pass_s"]
               for v in out.values())
    assert sorted(seen) == sorted([f"{f}@{p}" for p in ("0.5", "1") for f in ("rollout", "one_pass")] * 3)
