"""``forethought myopia sin-block`` and ``myopia synthetic-why`` (the verbs behind the myopia_sin_block and
myopia_synthetic_why specs): tiny runs through the real CLI, their measurements against direct computations, and
bad input refused in one line before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from cli_harness import expect_clean_failure

from forethought.cli import main
from forethought.models.gpt import GPT, GPTConfig
from forethought.myopia.synthetic import huber_loss, sample_task
from forethought.myopia.synthetic_why import WEIGHT, block_share, gradient_snr


def _results(folder: Path) -> dict:
    return json.loads((folder / "results.json").read_text())


def test_sin_block_learns_an_easy_frequency(tmp_path: Path) -> None:
    """At frequency 1 (sin x, nearly linear) a ReLU block gets far below predicting zero in 60 steps: the verb
    trains on the target it reports; the held-out MSE is logged at every evaluation."""
    assert main(["myopia", "sin-block", "--frequency", "1", "--model.n_embd", "16", "--model.activation", "relu",
                 "--train.steps", "60", "--train.batch_size", "256", "--train.lr", "1e-2", "--train.warmup_steps",
                 "10", "--train.eval_every", "30", "--eval_samples", "512", "--run.out_dir", str(tmp_path),
                 "--run.name", "easy"]) == 0
    r = _results(tmp_path / "easy")
    assert [s for s, _ in r["curve"]] == [30, 60] and r["final_mse"] == r["curve"][-1][1]
    assert 0.3 < r["predict_zero_mse"] < 0.6  # E[sin²(x)] for x ~ N(0, 1) ≈ 0.43
    assert r["final_mse"] < 0.1 * r["predict_zero_mse"]
    assert r["activation"] == "relu" and r["params"] > 0 and r["steps"] == 60


@pytest.mark.parametrize("args,names", [
    (["--model.input_dim", "3"], ["model.input_dim = 2"]),
    (["--train.eval_every", "0"], ["eval_every must be at least 1"]),
    (["--eval_samples", "0"], ["eval_samples must be at least 1"]),
    (["--model.activation", "tanh"], ["model.activation", "tanh"]),
    (["--frequency", "nan"], ["frequency must be a finite number"]),
])
def test_sin_block_bad_input(tmp_path: Path, args: list[str], names: list[str]) -> None:
    expect_clean_failure(["myopia", "sin-block", "--run.out_dir", str(tmp_path / "runs"), *args], tmp_path, tmp_path,
                         names, in_process=True)


def _tiny_model(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(n_positions=16, n_embd=16, n_layer=2, n_head=2, input_dim=2, output_dim=1,
                         activation="relu", init="torch", final_norm=False))


def test_gradient_snr_against_the_gradient_of_the_mean_loss() -> None:
    """The signal is the norm of the gradient of the batches' mean loss (equal batches); the noise is zero for
    identical batches and positive otherwise."""
    from forethought.core.config import load_config
    from forethought.myopia.config import TaskConfig

    model = _tiny_model()
    task = load_config(TaskConfig, None, ["--seq_len", "16"])
    batches = [sample_task(task, 1.0, 4, torch.Generator().manual_seed(i)) for i in range(3)]
    w = dict(model.named_parameters())[WEIGHT]
    mean_loss = sum(huber_loss(model, b)[0] for b in batches) / len(batches)
    (g,) = torch.autograd.grad(mean_loss, w)
    out = gradient_snr(model, batches)
    assert out["grad_signal"] == pytest.approx(g.norm().item(), rel=1e-5)
    assert out["grad_noise"] > 0 and out["grad_snr"] == pytest.approx(out["grad_signal"] / out["grad_noise"])
    assert gradient_snr(model, [batches[0], batches[0]])["grad_noise"] == pytest.approx(0.0, abs=1e-12)


def test_block_share_is_zero_when_the_blocks_write_nothing() -> None:
    model = _tiny_model()
    x = torch.randn(2, 8, 2)  # (B, T, 2)
    assert 0 < block_share(model, x)
    with torch.no_grad():
        for block in model.h:  # zero output projections: each block adds nothing to the residual stream
            block.attn.c_proj.weight.zero_(), block.attn.c_proj.bias.zero_()
            block.mlp.c_proj.weight.zero_(), block.mlp.c_proj.bias.zero_()
    assert block_share(model, x) == pytest.approx(0.0, abs=1e-7)


def test_synthetic_why_trains_as_myopia_synthetic_does(tmp_path: Path) -> None:
    """The diagnosed model is the synthetic task's vanilla model: the same settings and seed give the same training
    losses as ``myopia synthetic`` (the measurements draw from no training stream); rows before training and at
    every eval_every steps."""
    train = ["--train.steps", "6", "--train.batch_size", "8", "--train.warmup_steps", "2", "--train.log_every", "2"]
    model = ["--model.n_embd", "16", "--model.activation", "relu", "--model.init", "gpt2", "--model.final_norm", "true"]
    assert main(["myopia", "synthetic-why", *model, *train, "--train.eval_every", "3", "--eval_sequences", "16",
                 "--probe_sequences", "8", "--grad_batches", "2", "--run.out_dir", str(tmp_path), "--run.name",
                 "why"]) == 0
    assert main(["myopia", "synthetic", "--config", "tiny", "--p_values", "[1]", "--modes", "[vanilla]", *model,
                 *train, "--eval_sequences", "16", "--probe.max_lag", "10", "--probe.train_sequences", "8",
                 "--probe.test_sequences", "8", "--run.out_dir", str(tmp_path), "--run.name", "synthetic"]) == 0
    why, synthetic = _results(tmp_path / "why"), _results(tmp_path / "synthetic")
    assert why["train_curve"] == synthetic["p=1"]["vanilla"]["curve"]
    assert [r["step"] for r in why["rows"]] == [0, 3, 6]
    assert why["first"]["step"] == 0 and why["middle"]["step"] == 3 and why["last"]["step"] == 6
    assert (why["init"], why["final_norm"]) == ("gpt2", True)
    for row in why["rows"]:
        assert row["grad_snr"] > 0 and row["normalised_loss"] > 0 and 0 < row["block_share"]
        assert -1 < row["probe_r2_lag0_layer1"] <= 1


@pytest.mark.parametrize("args,names", [
    (["--grad_batches", "1"], ["grad_batches must be at least 2"]),
    (["--probe_sequences", "1"], ["probe_sequences must be at least 2"]),
    (["--model.output_dim", "2"], ["model.input_dim = 2 and model.output_dim = 1"]),
    (["--task.seq_len", "100"], ["task.seq_len must be <= model.n_positions"]),
    (["--task.window", "70", "--task.seq_len", "64"], ["task.seq_len (64) must exceed"]),
    (["--model.init", "xavier"], ["model.init", "xavier"]),
])
def test_synthetic_why_bad_input(tmp_path: Path, args: list[str], names: list[str]) -> None:
    expect_clean_failure(["myopia", "synthetic-why", "--run.out_dir", str(tmp_path / "runs"), *args], tmp_path,
                         tmp_path, names, in_process=True)
