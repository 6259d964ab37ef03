"""The synthetic task, the LM / probe pipelines and the demo on tiny settings."""

import json
import math
from pathlib import Path

import torch

from forethought.cli import main
from forethought.core.config import load_config
from forethought.core.runtime import step_generator
from forethought.models.gpt import GPT, GPTConfig
from forethought.myopia.probe import fit_ridge, future_lens_accuracy
from forethought.myopia.synthetic import (
    ProbeSettings,
    TaskConfig,
    copy_prediction,
    normalised_loss,
    predict_zero_loss,
    probe_r2,
    sample_task,
)


def test_synthetic_targets_follow_the_definition():
    task = TaskConfig(seq_len=16, window=3, shift=2, frequency=10.0, function="sin")
    b = sample_task(task, 0.5, 4, step_generator(0, 0))
    x, z = b["inputs"][..., 0], b["inputs"][..., 1]
    for i in range(4):
        for n in range(16):
            s = sum(math.sin(10 * x[i, n - j].item()) for j in range(2, 5) if n - j >= 0)
            want = z[i, n].item() * s + (1 - z[i, n].item()) * x[i, n].item()
            assert abs(b["targets"][i, n].item() - want) < 1e-5
    # before the first position: by default each missing term is 0 (the reference's padding); with history f0 each
    # missing input is x = 0, so each missing term is cos(0) = 1
    cos = TaskConfig(seq_len=8, window=2, shift=1, function="cos")
    b = sample_task(cos, 1.0, 1, step_generator(0, 1))
    x = b["inputs"][0, :, 0]
    assert abs(b["targets"][0, 0].item()) < 1e-6 and abs(b["targets"][0, 1].item() - math.cos(10 * x[0])) < 1e-5
    f0 = TaskConfig(seq_len=8, window=2, shift=1, function="cos", history="f0")
    b = sample_task(f0, 1.0, 1, step_generator(0, 1))
    assert abs(b["targets"][0, 0].item() - 2.0) < 1e-6
    assert abs(b["targets"][0, 1].item() - 1.0 - math.cos(10 * x[0])) < 1e-5


def test_copy_level_is_the_loss_of_copying_on_the_models_evaluation_sequences():
    # a "model" that copies x_n where z = 0 and outputs zero elsewhere scores exactly the copy level, on the same
    # sequences; at p = 1 (no position copies) that is predicting zero
    task = TaskConfig(seq_len=16, window=3)

    class Copy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(()))  # only so that it has a device

        def forward(self, inputs):
            return ((1 - inputs[..., 1]) * inputs[..., 0]).unsqueeze(-1)

    for p in (0.3, 1.0):
        level = normalised_loss(copy_prediction, task, p, 200, seed=5, chunk=64)[0]
        assert level == normalised_loss(Copy(), task, p, 200, seed=5, chunk=64)[0]
        assert level != normalised_loss(copy_prediction, task, p, 200, seed=6, chunk=64)[0]
    zero = normalised_loss(lambda b: torch.zeros_like(b["targets"]), task, 1.0, 200, seed=5, chunk=64)[0]
    assert zero == normalised_loss(copy_prediction, task, 1.0, 200, seed=5, chunk=64)[0]


def test_predict_zero_matches_paper_scale():
    assert 1.2 < predict_zero_loss(TaskConfig(), 1.0) < 1.35  # measured value: benchmarks/results/myopia_synthetic.json


def test_ridge_recovers_linear_map():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(500, 6, generator=g)
    W = torch.randn(6, 3, generator=g)
    Wh, b = fit_ridge(X, X @ W + 0.5, 1e-9)
    torch.testing.assert_close(Wh.float(), W, atol=1e-4, rtol=0)
    torch.testing.assert_close(b.float(), torch.full((3,), 0.5), atol=1e-4, rtol=0)


def test_synthetic_probes_of_states_without_information_score_zero():
    # Inputs and positions embedded as zeros: every layer's state is the same everywhere. The shared ridge solve
    # keeps its penalty positive, so the probes report no information instead of a singular system.
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_positions=16, n_embd=16, n_layer=2, n_head=2, input_dim=2, output_dim=1))
    with torch.no_grad():
        for p in [*model.wte.parameters(), *model.wpe.parameters()]:
            p.zero_()
    task = TaskConfig(seq_len=16, window=3)
    r2 = probe_r2(model, task, ProbeSettings(max_lag=4, train_sequences=32, test_sequences=16), seed=0)
    assert len(r2) == 3 and all(math.isfinite(v) and -0.1 < v <= 0 for layer in r2 for v in layer)


def test_synthetic_eval_every_logs_the_normalised_loss(tmp_path):
    code = main(["myopia", "synthetic", "--config", "tiny", "--run.out_dir", str(tmp_path), "--train.steps", "5",
                 "--train.eval_every", "2", "--modes", "[vanilla, detach_hidden]", "--eval_sequences", "64",
                 "--curve_sequences", "32", "--probe.train_sequences", "32", "--probe.test_sequences", "16"])
    assert code == 0
    run = tmp_path / "myopia-synthetic-tiny"
    results = json.loads((run / "results.json").read_text())
    for mode in ("vanilla", "detach_hidden"):
        rows = [json.loads(line) for line in (run / "p=1" / mode / "metrics.jsonl").read_text().splitlines()]
        evals = [r for r in rows if r.get("eval")]
        assert [r["step"] for r in evals] == [2, 4, 5]
        assert all(0 < r["normalised_loss"] < 10 for r in evals)
        assert results["p=1"][mode]["eval_curve"] == [{k: v for k, v in r.items() if k != "eval"} for r in evals]


def test_myopia_docstrings_cite_the_paper_not_an_out_of_tree_spec():
    import forethought.myopia as pkg

    for path in Path(pkg.__file__).parent.glob("*.py"):
        assert "SPEC" not in path.read_text(), path.name


def test_future_lens_last_layer_k1_is_the_model_itself():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=50, n_positions=16, n_embd=16, n_layer=2, n_head=2)).eval()
    ids = torch.randint(0, 50, (64, 16))
    acc = future_lens_accuracy(model, ids, ids[:16], [2], 2, 1e-8)["layer 2"]
    with torch.no_grad():
        own = (model(ids[:16])[:, :-1].argmax(-1) == ids[:16, 1:]).float().mean().item()
    assert abs(acc[0] - own) < 0.02


def test_demo_end_to_end(tmp_path, monkeypatch):
    monkeypatch.delenv("FORETHOUGHT_DATA", raising=False)
    monkeypatch.setenv("FORETHOUGHT_CACHE", str(tmp_path / "cache"))
    from forethought.data.corpora import load_corpus_text
    from forethought.data.tokenizers import load_tokenizer
    from forethought.testing import tiny_llama

    folder = tmp_path / "tiny-llama"  # a tiny random LM stands in for SmolLM2 in the PredGen part
    tok = load_tokenizer("bpe:300", corpus_text=load_corpus_text("generated", "train"), cache_dir=tmp_path / "tok")
    tok.save_pretrained(folder)
    tiny_llama(vocab_size=len(tok), hidden_size=32, layers=2, eos_token_id=tok.eos_token_id).save_pretrained(folder)
    code = main(["demo", "--run.out_dir", str(tmp_path), "--synthetic_steps", "10", "--lm_steps", "6",
                 "--predgen_base", str(folder), "--predgen_steps", "2", "--psf_steps", "6"])
    assert code == 0
    report = (tmp_path / "demo" / "report.md").read_text()
    for section in ("synthetic pre-caching", "language modelling", "future-token probes", "gap:",
                    "transformer bigram", "PredGen", "| predgen |", "PSF recipe", "Unconditional samples"):
        assert section in report
    for png in ("synthetic/probe_r2.png", "lm/per_position.png", "probe/future_lens.png"):
        assert (tmp_path / "demo" / png).stat().st_size > 1000
    # Probes load the trained checkpoints of the LM run: resume auto then finds them complete.
    from forethought.myopia.lm import LMConfig, load_variant

    model, cfg = load_variant(tmp_path / "demo" / "lm", "detach_hidden")
    assert isinstance(cfg, LMConfig) and sum(p.numel() for p in model.parameters()) > 0
    assert load_config(LMConfig, tmp_path / "demo" / "lm" / "config.yaml").train.steps == 6


def test_probes_read_lags_and_the_whole_sum_on_the_models_own_p():
    """A stand-in model whose state at n holds sin(10·x_{n−i}) for i = 0..4: the lag probes score ≈ 1 up to lag 4
    and ≈ 0 beyond, the sum probe ≈ 1 (window 3 from lag 1 is inside the state); the sequences follow p."""
    from forethought.myopia.synthetic import probes

    seen_p = []

    class Lags(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def forward(self, inputs, output_hidden_states=False):
            x, z = inputs[..., 0], inputs[..., 1]
            seen_p.append(z.mean().item())
            f = torch.sin(10 * x)
            h = torch.stack([torch.nn.functional.pad(f, (i, 0))[:, :f.shape[1]] for i in range(5)], dim=-1)
            return None, [h, h]

    task = TaskConfig(seq_len=24, window=3, shift=1)
    r2, r2_sum = probes(Lags(), task, ProbeSettings(max_lag=8, train_sequences=256, test_sequences=128), 0, p=0.25)
    assert len(r2) == 2 and len(r2_sum) == 2
    assert min(r2[0][:5]) > 0.99 and max(r2[0][5:]) < 0.05
    assert min(r2_sum) > 0.99
    assert all(abs(m - 0.25) < 0.05 for m in seen_p)


def test_synthetic_levels_only_run_scores_copy_on_the_given_sequences(tmp_path):
    # --modes [] trains nothing: the run records the levels on the evaluation sequences of --eval_seed
    assert main(["myopia", "synthetic", "--config", "tiny", "--modes", "[]", "--p_values", "[0.3]", "--eval_seed",
                 "3", "--eval_sequences", "100", "--run.out_dir", str(tmp_path), "--run.name", "levels"]) == 0
    res = json.loads((tmp_path / "levels" / "results.json").read_text())
    row = res["p=0.3"]
    assert res["eval_seed"] == 3 and set(row) == {"predict_zero", "copy_level"}
    assert row["copy_level"] == normalised_loss(copy_prediction, load_config_task(), 0.3, 100, seed=3)[0]
    assert not (tmp_path / "levels" / "p=0.3").exists()


def load_config_task() -> TaskConfig:
    from forethought.cli import CONFIG_DIR
    from forethought.myopia.synthetic import SyntheticConfig

    return load_config(SyntheticConfig, CONFIG_DIR / "myopia" / "synthetic_tiny.yaml").task
