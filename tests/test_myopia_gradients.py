"""The pre-caching gradient (``forethought myopia gradients``): g − g_m against a slow, independent form."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from cli_harness import expect_clean_failure

from forethought.cli import main
from forethought.core.errors import ForethoughtError
from forethought.models.gpt import GPT, GPTConfig
from forethought.myopia.gradients import compare, parameter_groups, split_gradient
from forethought.myopia.wrap import attention_modules, make_myopic, myopia_mode


def _model(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    cfg = GPTConfig(n_positions=16, n_embd=16, n_layer=2, n_head=2, input_dim=2, output_dim=1, activation="relu",
                    init="torch", final_norm=True)
    return GPT(cfg).double()


def _loss(model: torch.nn.Module, batch: dict) -> tuple[torch.Tensor, dict]:
    out = model(batch["inputs"]).squeeze(-1)  # (B, T)
    return F.huber_loss(out, batch["targets"], delta=1.0), {}


def _batch(B: int, T: int, seed: int = 1) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"inputs": torch.randn(B, T, 2, generator=g, dtype=torch.float64),
            "targets": torch.randn(B, T, generator=g, dtype=torch.float64)}


def _names(model: torch.nn.Module) -> list[str]:
    return [n for ns in parameter_groups(model).values() for n in ns]


def _slow_myopic_gradient(model: GPT, batch: dict) -> dict[str, torch.Tensor]:
    """Σ_t ∇ L_t with every other position's attention input detached while L_t is differentiated: the loss at
    t then reaches earlier positions' K/V weights but none of their states. One backward pass per position,
    plain (vanilla) attention, no fused trick."""
    names = _names(model)
    params = dict(model.named_parameters())
    B, T = batch["targets"].shape
    total = {n: torch.zeros_like(params[n]) for n in names}
    for t in range(T):
        keep = (torch.arange(T) == t).view(1, T, 1)

        def detach_others(mod, args, keep=keep):
            x = args[0]
            return (torch.where(keep, x, x.detach()), *args[1:])

        hooks = [m.register_forward_pre_hook(detach_others) for _, m in attention_modules(model)]
        try:
            out = model(batch["inputs"]).squeeze(-1)
            ell = F.huber_loss(out[:, t], batch["targets"][:, t], delta=1.0, reduction="sum") / (B * T)
            grads = torch.autograd.grad(ell, [params[n] for n in names], allow_unused=True)
        finally:
            for h in hooks:
                h.remove()
        for n, g in zip(names, grads, strict=True):
            if g is not None:
                total[n] += g
    return total


def test_difference_equals_the_off_diagonal_sum_computed_slowly() -> None:
    model = _model()
    batch = _batch(3, 7)
    names = _names(model)
    g, g_m = split_gradient(model, _loss, [batch], names)
    slow = _slow_myopic_gradient(model, batch)
    diff = torch.cat([(g[n] - g_m[n]).reshape(-1) for n in names])
    slow_diff = torch.cat([(g[n] - slow[n]).reshape(-1) for n in names])
    assert diff.norm() > 1e-3 * torch.cat([g[n].reshape(-1) for n in names]).norm()  # a real share, not zero
    torch.testing.assert_close(diff, slow_diff, rtol=1e-9, atol=1e-12)
    assert myopia_mode(model) == "vanilla"  # restored


def test_difference_is_zero_for_a_one_position_sequence() -> None:
    model = _model()
    names = _names(model)
    g, g_m = split_gradient(model, _loss, [_batch(4, 1)], names)
    stats = compare(g, g_m, parameter_groups(model))
    assert stats["all/g_norm"] > 0
    assert stats["all/rel_diff"] < 1e-12
    assert stats["all/cos"] == pytest.approx(1.0, abs=1e-12)


def test_groups_and_the_head_share() -> None:
    model = _model()
    groups = parameter_groups(model)
    assert list(groups) == ["embed", "layer0", "layer1", "head"]
    assert all(n.startswith("h.0.") for n in groups["layer0"])
    g, g_m = split_gradient(model, _loss, [_batch(2, 6)], _names(model))
    stats = compare(g, g_m, groups)
    # nothing after the last layer reads another position, so the head's gradient is the same
    assert stats["head/rel_diff"] < 1e-12
    assert stats["layer0/rel_diff"] > 1e-3


def test_split_gradient_needs_a_vanilla_model() -> None:
    model = make_myopic(_model(), mode="detach_hidden")
    with pytest.raises(ForethoughtError, match="vanilla model"):
        split_gradient(model, _loss, [_batch(2, 4)], _names(model))


def test_command_synthetic_and_lm(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert main(["myopia", "gradients", "--config", "tiny", "--run.out_dir", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "myopia-gradients-tiny" / "results.json").read_text())
    rows = res["measurements"]
    assert [r["step"] for r in rows] == [10, 20]
    assert all(r["head/rel_diff"] < 1e-6 and r["layer0/rel_diff"] > 1e-3 for r in rows)
    assert all(0 < r["normalised_loss"] for r in rows)
    assert (tmp_path / "myopia-gradients-tiny" / "gradients.png").stat().st_size > 0
    assert main(["myopia", "gradients", "--config", "tiny", "--run.out_dir", str(tmp_path), "--run.name", "lm",
                 "--experiment", "lm", "--data.corpus", "generated", "--data.tokenizer", "bpe:512",
                 "--data.seq_len", "16", "--data.cache_dir", str(cache), "--eval_sequences", "8",
                 "--train.steps", "4", "--train.eval_every", "4"]) == 0
    rows = json.loads((tmp_path / "lm" / "results.json").read_text())["measurements"]
    assert len(rows) == 1 and rows[0]["val_loss"] > 0 and rows[0]["all/rel_diff"] > 0


@pytest.mark.parametrize("args,names", [
    (["--measure_batches", "0"], ["measure_batches must be at least 1"]),
    (["--train.eval_every", "0"], ["eval_every must be at least 1"]),
    (["--task.seq_len", "100"], ["sequence length (100)", "n_positions"]),
])
def test_bad_inputs(tmp_path: Path, args: list[str], names: list[str]) -> None:
    expect_clean_failure(["myopia", "gradients", "--config", "tiny", "--run.out_dir", str(tmp_path / "runs"),
                          *args], tmp_path, tmp_path, names)


def test_collect_from_the_archive_reproduces_the_committed_json(tmp_path) -> None:
    """Collecting the myopia_gradients spec from a copy of its committed per-run archive gives the committed JSON's
    groups, derived trajectories and checks exactly; its measures read the last measurement row."""
    import shutil

    from forethought.experiments.runner import Layout, collect, lookup
    from forethought.experiments.spec import load_spec

    results = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
    committed = json.loads((results / "myopia_gradients.json").read_text())
    spec, path = load_spec("myopia_gradients")
    layout = Layout.under(tmp_path, "myopia_gradients")
    shutil.copytree(results / "runs" / "myopia_gradients", layout.archive)
    got = json.loads(json.dumps(collect(spec, layout, "test", spec_file=path)))
    assert got["groups"] == committed["groups"]
    assert got["derived"] == committed["derived"]
    passed = {k: c["passed"] for k, c in committed["checks"].items()}
    assert {k: c["passed"] for k, c in got["checks"].items()} == passed
    record = json.loads(next(layout.archive.glob("synthetic-s0*")).read_text())
    last = record["results"]["measurements"][-1]
    assert lookup(record, spec.measures["rel_diff_last"]) == last["all/rel_diff"]
    top = got["derived"]["trajectory"]["synthetic-s0"]["all"]
    assert top["rel_diff_last"] == last["all/rel_diff"] and top["rel_diff_max"] >= top["rel_diff_first"]
