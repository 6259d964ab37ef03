"""`forethought myopia init-model`: a seeded random-init Pythia-shaped model folder that `myopia lm --base` reads."""

from __future__ import annotations

import json

import pytest

from forethought.cli import main


def _make(tmp_path, corpus, name: str, seed: int) -> dict:
    argv = ["myopia", "init-model", "--data.corpus", str(corpus), "--data.tokenizer", "bpe:300",
            "--data.cache_dir", str(tmp_path / "cache"), "--run.out_dir", str(tmp_path), "--run.name", name,
            "--run.seed", str(seed)]
    assert main(argv) == 0
    return json.loads((tmp_path / name / "results.json").read_text())


def test_init_model_is_a_function_of_the_seed(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat and the dog sat on the log.\n" * 200)
    res = _make(tmp_path, corpus, "a", 0)
    _make(tmp_path, corpus, "b", 0)
    _make(tmp_path, corpus, "c", 1)
    assert res["shape"] == "pythia-14m"
    models = {n: AutoModelForCausalLM.from_pretrained(tmp_path / n) for n in "abc"}
    assert models["a"].config.num_hidden_layers == 6 and models["a"].config.hidden_size == 128
    assert models["a"].config.vocab_size == res["vocab_size"] <= 300  # the trained BPE's own vocabulary
    assert res["params"] == sum(p.numel() for p in models["a"].parameters())
    w = {n: m.get_input_embeddings().weight for n, m in models.items()}
    assert torch.equal(w["a"], w["b"]) and not torch.equal(w["a"], w["c"])
