"""The trainer's scaling options on CPU with tiny models: precision (bf16 autocast, LoRA on a bf16 base, fp16's
clear error), gradient accumulation (one step of 2 x 8 equals one of 16: our GPT, a tiny HF Llama, every PredGen
method), activation checkpointing (the same gradients, blocks recomputed: GPT and Llama, vanilla and myopic, and
the PSF model), the memory estimate and its error, trackers, and a 2-process gloo run with accumulation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from cli_harness import expect_clean_failure
from test_predgen_methods import _encoder, _model, world  # noqa: F401 - the PredGen tests' tiny task and Llama

from forethought.core import memory
from forethought.core.accumulate import AveragedLoss, accumulate_gradients, split_batch
from forethought.core.config import load_config
from forethought.core.errors import ForethoughtError
from forethought.core.precision import base_dtype
from forethought.core.run import Run
from forethought.core.runtime import Runtime, compute_init, step_generator, unwrap
from forethought.core.trainer import TrainConfig, TrainHooks, train
from forethought.models.gpt import GPT, GPTConfig
from forethought.myopia.wrap import make_myopic
from forethought.testing import tiny_llama

ROOT = Path(__file__).resolve().parents[1]
ATOL = 1e-6  # fp32: two micro-batches sum the same terms in another order
RTOL = 1e-6  # losses: a sum's rounding grows with its size (a loss of 14 is a few fp32 ulps from its reorder)


def _gpt(seed: int = 0, **kw: Any) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=32, n_positions=12, n_embd=16, n_layer=2, n_head=2, **kw))


def _llama() -> torch.nn.Module:
    return tiny_llama(vocab_size=32, hidden_size=16, layers=2, heads=2, kv_heads=1).train()


def _logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return model(ids) if isinstance(unwrap(model), GPT) else model(input_ids=ids, use_cache=False).logits


def row_mean_loss(model: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """Next-token cross-entropy averaged over every position (the same count per row)."""
    logits = _logits(model, ids[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten()), {}


def token_mean_loss(model: torch.nn.Module, batch: dict) -> tuple[AveragedLoss, dict]:
    """Cross-entropy averaged over the masked tokens only; rows have different numbers of them."""
    ids, mask = batch["ids"], batch["mask"][:, 1:]
    ce = F.cross_entropy(_logits(model, ids[:, :-1]).flatten(0, 1).float(), ids[:, 1:].flatten(), reduction="none")
    return AveragedLoss({"ce": (ce * mask.flatten()).sum()}, {"ce": mask.sum()}), {}


def _ragged(n: int, T: int = 10, seed: int = 0) -> dict:
    """Token ids and a mask of 2-4 tokens per row in the first half, 7-9 in the second."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([2 + i % 3 + (5 if i >= n // 2 else 0) for i in range(n)])
    return {"ids": torch.randint(32, (n, T), generator=g), "mask": torch.arange(T)[None, :] < lengths[:, None]}


def _grads(model: torch.nn.Module, loss_fn: Any, batch: Any, k: int) -> tuple[dict[str, torch.Tensor], float]:
    """The gradients and logged loss of one optimizer step's accumulation over k micro-batches."""
    rt = compute_init("cpu", seed=0)
    model.zero_grad(set_to_none=True)
    out = accumulate_gradients(model, loss_fn, [split_batch(batch, i, k) for i in range(k)], rt.accelerator)
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, float(out.loss)


def _assert_same_grads(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float = ATOL) -> None:
    assert a.keys() == b.keys() and a
    for n, g in a.items():
        assert torch.allclose(g, b[n], rtol=0, atol=atol), (n, (g - b[n]).abs().max())


# ---------------------------------------------------------------------------------------------- precision


def test_bf16_autocasts_training_and_restores_the_forward(tmp_path: Path) -> None:
    rt = compute_init("cpu", seed=0, precision="bf16")
    model = _gpt()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    seen = []

    def loss_fn(m: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, dict]:
        seen.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None)
        return row_mean_loss(m, ids)

    out = train(model, loss_fn, lambda s: torch.randint(32, (4, 8), generator=step_generator(0, s)),
                TrainConfig(steps=3, batch_size=4, lr=1e-2, log_every=1), Run.create(tmp_path, "bf16"), rt)
    assert seen == [torch.bfloat16] * 3
    assert all(torch.isfinite(torch.tensor(loss)) for _, loss in out["curve"]) and out["precision"] == "bf16"
    assert all(not torch.equal(before[n], p) for n, p in model.named_parameters())
    assert all(p.dtype == torch.float32 for p in model.parameters())  # fp32 weights, autocast compute
    assert model.forward.__func__ is GPT.forward  # accelerate's autocast wrapper is removed after training


def test_lora_on_a_bf16_base_trains(tmp_path: Path) -> None:
    from peft import LoraConfig, get_peft_model

    rt = compute_init("cpu", seed=0, precision="bf16")
    base = tiny_llama(vocab_size=32, hidden_size=16, layers=1, heads=2, kv_heads=1).to(base_dtype("auto", "bf16",
                                                                                                  False))
    model = get_peft_model(base, LoraConfig(r=2, lora_alpha=4, target_modules="all-linear"))
    lora = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    out = train(model, row_mean_loss, lambda s: torch.randint(32, (4, 6), generator=step_generator(0, s)),
                TrainConfig(steps=2, batch_size=4, lr=1e-2, log_every=1), Run.create(tmp_path, "lora"), rt)
    assert all(torch.isfinite(torch.tensor(loss)) for _, loss in out["curve"])
    params = dict(model.named_parameters())
    assert all(params[n].dtype == torch.float32 and not torch.equal(params[n], v) for n, v in lora.items())
    assert all(params[n].dtype == torch.bfloat16 and torch.equal(params[n], v) for n, v in frozen.items())


def test_base_dtype_choices() -> None:
    assert base_dtype("auto", "bf16", trains_base=False) == torch.bfloat16  # frozen base: the run's precision
    assert base_dtype("auto", "bf16", trains_base=True) == torch.float32  # trained weights stay fp32
    assert base_dtype("auto", "fp32", trains_base=False) == torch.float32
    assert base_dtype("bf16", "fp32", trains_base=True) == torch.bfloat16
    with pytest.raises(ForethoughtError, match="fp16 weights cannot be trained"):
        base_dtype("fp16", "fp16", trains_base=True)


def test_precision_settings_reject_bad_values() -> None:
    from forethought.myopia.lm import LMConfig
    from forethought.predgen.config import PredGenConfig

    for cls, args, key in ((PredGenConfig, ["--run.precision", "fp8"], "run.precision"),
                           (PredGenConfig, ["--base_dtype", "fp64"], "base_dtype"),
                           (LMConfig, ["--base_dtype", "half"], "base_dtype"),
                           (LMConfig, ["--run.log_with", "mlflow"], "run.log_with")):
        with pytest.raises(ForethoughtError, match=f"config key '{key}' must be one of") as e:
            load_config(cls, None, args)
        assert "\n" not in str(e.value)
    with pytest.raises(ForethoughtError, match="fp16 weights cannot be trained"):  # myopia lm: full fine-tuning
        load_config(LMConfig, None, ["--base", "some-model", "--base_dtype", "fp16"])
    with pytest.raises(ForethoughtError, match="fp16 needs a GPU"):  # accelerate would silently use fp32
        compute_init("cpu", precision="fp16")


# ---------------------------------------------------------------------------------------------- accumulation


@pytest.mark.parametrize("make", [_gpt, _llama], ids=["gpt", "llama"])
def test_two_micro_batches_give_the_gradient_of_one_batch(make: Any) -> None:
    ids = torch.randint(32, (16, 10), generator=torch.Generator().manual_seed(1))
    model = make()
    one, loss1 = _grads(model, row_mean_loss, ids, 1)
    two, loss2 = _grads(model, row_mean_loss, ids, 2)
    _assert_same_grads(one, two)
    assert loss1 == pytest.approx(loss2, rel=RTOL, abs=ATOL)
    # token averages whose counts differ between the halves: exact too ...
    batch = _ragged(16)
    one, loss1 = _grads(model, token_mean_loss, batch, 1)
    two, loss2 = _grads(model, token_mean_loss, batch, 2)
    _assert_same_grads(one, two)
    assert loss1 == pytest.approx(loss2, rel=RTOL, abs=ATOL)
    # ... where averaging each half's token mean would not be (so the comparison above can fail)
    halves = [_grads(model, lambda m, b: (token_mean_loss(m, b)[0].value(), {}), split_batch(batch, i, 2), 1)[0]
              for i in range(2)]
    naive = {n: (halves[0][n] + halves[1][n]) / 2 for n in one}
    assert max((naive[n] - one[n]).abs().max() for n in one) > 100 * ATOL


SAMPLED = {"tokens": "sampled", "per": "sequence", "wdal": "reference"}


@pytest.mark.parametrize("method,settings", [("predictor", {}), ("generator", {}), ("predgen", {}),
                                             ("predgen", SAMPLED)],
                         ids=["predictor", "generator", "predgen", "predgen-sampled"])
def test_predgen_methods_accumulate_exactly(world: dict, method: str, settings: dict) -> None:  # noqa: F811
    from forethought.predgen.methods import (
        PredGenSettings,
        generator_loss,
        predgen_loss,
        predictor_loss,
        with_sampling,
    )

    enc, items = _encoder(world)
    batch = with_sampling(enc.collate(items[:16]), 0.5, 7)  # p = 0.5: half the answer inputs are the model's
    s = PredGenSettings(**settings)
    losses = {"predictor": lambda m, b: m(predictor_loss, b, "classification", -1),
              "generator": lambda m, b: m(generator_loss, b, True),
              "predgen": lambda m, b: m(predgen_loss, b, s, enc, "classification", -1, True)}
    model = _model(world, method, enc)
    one, loss1 = _grads(model, losses[method], batch, 1)
    two, loss2 = _grads(model, losses[method], batch, 2)
    assert any(g.abs().max() > 0 for n, g in one.items() if "lora" in n)
    _assert_same_grads(one, two)
    assert loss1 == pytest.approx(loss2, rel=RTOL, abs=ATOL)


def _train_gpt(tmp_path: Path, name: str, **cfg: Any) -> tuple[GPT, dict, Run]:
    """3 steps on the ragged token-average loss (``cfg``: TrainConfig settings). No biases: a key bias has an
    exactly-zero gradient (softmax ignores a shift shared by every key), and AdamW turns its rounding noise into
    full-size steps, so weights would not compare after training."""
    rt = compute_init("cpu", seed=0)
    model = _gpt(bias=False)
    run = Run.create(tmp_path, name)
    tcfg = TrainConfig(**{"steps": 3, "batch_size": 8, "lr": 1e-2, "log_every": 1, **cfg})
    return model, train(model, token_mean_loss, lambda s: _ragged(8, seed=s), tcfg, run, rt), run


def test_trainer_accumulation_and_checkpointing_match_plain_training(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture) -> None:
    plain, ref, _ = _train_gpt(tmp_path, "plain")
    assert f"{_gpt(bias=False).num_params():,} parameters" in capsys.readouterr().out  # the cost line, first
    for name, cfg in (("accum", {"grad_accum": 2}),
                      ("accum-ckpt", {"grad_accum": 4, "activation_checkpointing": True})):
        model, out, run = _train_gpt(tmp_path, name, **cfg)
        assert [s for s, _ in out["curve"]] == [1, 2, 3]
        assert [loss for _, loss in out["curve"]] == pytest.approx([loss for _, loss in ref["curve"]], abs=ATOL)
        for (n, p), q in zip(model.named_parameters(), plain.parameters(), strict=True):
            assert torch.allclose(p, q, rtol=0, atol=ATOL), n
        assert not model.activation_checkpointing  # switched off again after training
        assert json.loads((run.dir / "metrics.jsonl").read_text().splitlines()[0])["step"] == 1


def test_lr_scales_and_gradient_norms(tmp_path: Path) -> None:
    """One AdamW step moves every weight by lr (the first step's m / sqrt(v) is the gradient's sign): by 10·lr for
    the parameters given an lr scale of 10; the logged gradient norms are those of each group."""
    model = torch.nn.Linear(3, 2, bias=False)
    head = torch.nn.Linear(2, 1, bias=False)
    both = torch.nn.Sequential(model, head)
    before = [p.detach().clone() for p in both.parameters()]
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))

    def loss_fn(m: Any, batch: torch.Tensor) -> tuple[torch.Tensor, dict]:
        return m(batch).pow(2).mean(), {}

    run = Run.create(tmp_path, "scales")
    cfg = TrainConfig(steps=1, batch_size=4, lr=1e-3, warmup_steps=0, weight_decay=0.0, log_every=1)
    train(both, loss_fn, lambda s: x, cfg, run, compute_init("cpu", seed=0),
          TrainHooks(grad_groups={"body": list(model.parameters()), "head": list(head.parameters())},
                     lr_scales={id(p): 10.0 for p in head.parameters()}))
    moved = [(p.detach() - b).abs() for p, b in zip(both.parameters(), before, strict=True)]
    assert torch.allclose(moved[0], torch.full_like(moved[0], 1e-3), rtol=1e-3)
    assert torch.allclose(moved[1], torch.full_like(moved[1], 1e-2), rtol=1e-3)
    row = json.loads((run.dir / "metrics.jsonl").read_text().splitlines()[0])
    both.zero_grad()
    for p, b in zip(both.parameters(), before, strict=True):
        p.data.copy_(b)
    loss_fn(both, x)[0].backward()
    assert row["grad_norm_body"] == pytest.approx(float(model.weight.grad.norm()), rel=1e-5)
    assert row["grad_norm_head"] == pytest.approx(float(head.weight.grad.norm()), rel=1e-5)


def test_hooks_params_and_after_step(tmp_path: Path) -> None:
    """``TrainHooks.params`` is all the optimizer trains (the rest keeps its values although it has gradients), and
    ``after_step`` sees every step once, after the optimizer step, with the gradients still there."""
    body, head = torch.nn.Linear(3, 2), torch.nn.Linear(2, 1)
    both = torch.nn.Sequential(body, head)
    before = [p.detach().clone() for p in both.parameters()]
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    seen: list[tuple[int, bool]] = []

    def after(m: torch.nn.Module, step: int) -> None:
        seen.append((step, head.weight.grad is not None and body.weight.grad is not None))

    train(both, lambda m, b: (m(b).pow(2).mean(), {}), lambda s: x,
          TrainConfig(steps=3, batch_size=4, lr=1e-2, log_every=1), Run.create(tmp_path, "hooks"),
          compute_init("cpu", seed=0), TrainHooks(params=list(head.parameters()), after_step=after))
    assert seen == [(0, True), (1, True), (2, True)]
    assert all(torch.equal(p, b) for p, b in zip(body.parameters(), before[:2], strict=True))
    assert not any(torch.equal(p, b) for p, b in zip(head.parameters(), before[2:], strict=True))


def test_train_takes_its_hooks_as_one_object(tmp_path: Path) -> None:
    """The hooks are fields of TrainHooks, not keywords of train (a misspelt or old-style keyword fails loudly)."""
    with pytest.raises(TypeError, match="eval_fn"):
        train(torch.nn.Linear(1, 1), lambda m, b: (m(b).mean(), {}), lambda s: torch.ones(1, 1),
              TrainConfig(steps=1, batch_size=1), Run.create(tmp_path, "old"), compute_init("cpu", seed=0),
              eval_fn=lambda m, step: {})  # type: ignore[call-arg]
    assert not (tmp_path / "old").exists()


def test_accumulation_settings_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ForethoughtError, match="batch_size 6 is not divisible by grad_accum 4"):
        load_config(TrainConfig, None, ["--batch_size", "6", "--grad_accum", "4"])
    with pytest.raises(ForethoughtError, match="grad_accum must be at least 1"):
        load_config(TrainConfig, None, ["--grad_accum", "0"])
    with pytest.raises(ForethoughtError, match=r"not divisible by grad_accum 4 x 1 process"):  # built in Python
        _train_gpt(tmp_path, "bad", batch_size=6, grad_accum=4)
    assert not (tmp_path / "bad").exists()


# ---------------------------------------------------------------------------------------------- checkpointing


def _checkpointed_grads(model: torch.nn.Module, loss_fn: Any, batch: Any, blocks: list[torch.nn.Module]
                        ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Gradients without and with activation checkpointing; with it, every block's MLP runs twice (forward and
    recomputation), which shows the checkpoints are really there."""
    calls = []
    hooks = [b.register_forward_pre_hook(lambda *a: calls.append(1)) for b in blocks]
    grads = []
    for on in (False, True):
        if on:
            assert memory.set_activation_checkpointing(model, True) >= 1
        calls.clear()
        model.train().zero_grad(set_to_none=True)
        loss = loss_fn(model, batch)[0]
        (loss.value() if isinstance(loss, AveragedLoss) else loss).backward()
        assert len(calls) == len(blocks) * (2 if on else 1)
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    memory.set_activation_checkpointing(model, False)
    for h in hooks:
        h.remove()
    return grads[0], grads[1]


@pytest.mark.parametrize("kind", ["gpt", "gpt-myopic", "llama", "llama-myopic"])
def test_activation_checkpointing_keeps_the_gradients(kind: str) -> None:
    model = _gpt(dropout=0.1) if kind.startswith("gpt") else _llama()  # dropout: checkpoints replay its RNG
    if kind.endswith("myopic"):
        make_myopic(model, "detach_hidden")
    blocks = [b.mlp for b in (model.h if kind.startswith("gpt") else model.model.layers)]
    torch.manual_seed(3)
    ids = torch.randint(32, (4, 10), generator=torch.Generator().manual_seed(2))

    def loss_fn(m: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, dict]:
        torch.manual_seed(3)  # the same dropout masks in both runs
        return row_mean_loss(m, x)

    plain, ckpt = _checkpointed_grads(model, loss_fn, ids, blocks)
    _assert_same_grads(plain, ckpt, atol=1e-7)


def test_activation_checkpointing_in_the_psf_model() -> None:
    from forethought.psf.config import StageFeatures
    from forethought.psf.model import PSFModel, PSFModelConfig

    torch.manual_seed(0)
    model = PSFModel(PSFModelConfig(vocab_size=32, seq_len=8, blocks=2, n_embd=16, enc_layers=1, dec_layers=2,
                                    n_head=2, code_dim=4), StageFeatures(landing=True, codes=True))
    # the block-causal encoder, codes and landing inputs all recompute
    tokens = torch.randint(32, (4, 8), generator=torch.Generator().manual_seed(0))

    def loss_fn(m: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, dict]:
        torch.manual_seed(5)  # the codes' reparameterisation noise
        return m(x)["loss"], {}

    blocks = [b.mlp for b in (*model.encoder.h, *model.decoder.h)]
    plain, ckpt = _checkpointed_grads(model, loss_fn, tokens, blocks)
    _assert_same_grads(plain, ckpt, atol=1e-7)


def test_activation_checkpointing_needs_blocks() -> None:
    with pytest.raises(ForethoughtError, match="no blocks to checkpoint"):
        memory.set_activation_checkpointing(torch.nn.Linear(2, 2), True)


# ---------------------------------------------------------------------------------------------- memory estimate


def test_memory_estimate_arithmetic() -> None:
    model = _gpt()
    n = model.num_params()  # tied head counted once
    est = memory.estimate_training_memory(model, "fp32")
    assert est["parameters"] == est["trainable_parameters"] == n
    assert (est["weights_bytes"], est["gradients_bytes"], est["optimizer_bytes"]) == (4 * n, 4 * n, 8 * n)
    assert est["autocast_copies_bytes"] == 0 and est["total_bytes"] == 16 * n
    model.wte.requires_grad_(False)  # a frozen part: no gradients, no optimizer states
    trainable = n - model.wte.weight.numel()
    matrices = sum(p.numel() for p in model.parameters() if p.dim() >= 2)
    est = memory.estimate_training_memory(model, "bf16")
    assert est["trainable_parameters"] == trainable
    assert (est["gradients_bytes"], est["optimizer_bytes"]) == (4 * trainable, 8 * trainable)
    assert est["autocast_copies_bytes"] == 2 * matrices  # a 16-bit copy of every fp32 matrix
    half = memory.estimate_training_memory(model.to(torch.bfloat16), "bf16", shards=2)
    assert half["weights_bytes"] == 2 * n // 2 and half["autocast_copies_bytes"] == 0  # bf16 weights, 2 shards
    assert "parameters" in memory.describe_memory(est, "bf16")


def test_memory_check_error_when_the_gpu_is_too_small(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    est = memory.estimate_training_memory(_gpt(), "fp32")
    cuda = torch.device("cuda")
    assert memory.free_device_memory(torch.device("cpu")) is None  # only a CUDA device is checked
    monkeypatch.setattr(memory, "free_device_memory", lambda device: est["total_bytes"] - 1)
    with pytest.raises(ForethoughtError) as e:
        memory.check_fits(est, cuda)
    for advice in ("grad_accum", "activation_checkpointing", "bf16"):
        assert advice in str(e.value)
    memory.check_fits(est, cuda, resident_bytes=1)  # one byte of it already there: it fits
    monkeypatch.setattr(memory, "free_device_memory", lambda device: 10)  # the trainer stops before writing
    with pytest.raises(ForethoughtError, match="only 10 B is free"):
        _train_gpt(tmp_path, "toobig")
    assert not (tmp_path / "toobig").exists()


# ---------------------------------------------------------------------------------------------- trackers


def test_no_tracker_writes_nothing_extra(tmp_path: Path) -> None:
    _, _, run = _train_gpt(tmp_path, "plain")
    files = sorted(str(p.relative_to(run.dir)) for p in run.dir.rglob("*") if p.is_file())
    assert files == ["env.json", "metrics.jsonl", "step-000003/manifest.json", "step-000003/model.safetensors",
                     "step-000003/trainer_state.pt"]


def _recording_runtime() -> tuple[Any, Runtime]:
    """A CPU runtime whose one tracker records every row it is sent and whether it was finished."""
    from accelerate import Accelerator
    from accelerate.tracking import GeneralTracker

    class Recorder(GeneralTracker):
        name, requires_logging_directory, main_process_only = "recorder", False, True

        def __init__(self) -> None:
            super().__init__()
            self.rows: list[tuple[int, dict]] = []
            self.finished = False

        @property
        def tracker(self) -> Any:
            return self

        def store_init_configuration(self, values: dict) -> None:
            pass

        def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
            self.rows.append((step, values))

        def finish(self) -> None:
            self.finished = True

    compute_init("cpu")  # a fresh accelerate state
    rec = Recorder()
    acc = Accelerator(cpu=True, log_with=[rec])
    return rec, Runtime(acc, acc.device, 0, 1)


def test_tracker_gets_the_metrics_rows(tmp_path: Path) -> None:
    rec, rt = _recording_runtime()
    acc = rt.accelerator
    run = Run.create(tmp_path, "tracked")
    train(_gpt(), token_mean_loss, lambda s: _ragged(8, seed=s),
          TrainConfig(steps=3, batch_size=8, log_every=1, eval_every=2), run, rt,
          TrainHooks(eval_fn=lambda m, step: {"val": float(step)}))
    rows = [(r["step"], {k: v for k, v in r.items() if k not in ("step", "eval")}) for r in run.metrics()]
    assert rec.rows == rows and len(rows) == 5 and rec.finished and not acc.trackers


@pytest.mark.parametrize("stop", ["non-finite", "ctrl-c"])
def test_a_stopped_run_ends_its_tracker_and_gives_the_model_back_as_it_was(tmp_path: Path, stop: str) -> None:
    rec, rt = _recording_runtime()
    model = _gpt().eval()
    model.drop.train()  # the caller's modes, one module apart, come back as they were
    modes = [m.training for m in model.modules()]

    def loss_fn(m: torch.nn.Module, batch: dict) -> tuple[AveragedLoss, dict]:
        loss, metrics = token_mean_loss(m, batch)
        if len(rec.rows) == 1:  # the second step, after one logged row
            if stop == "ctrl-c":
                raise KeyboardInterrupt
            loss.sums["ce"] = loss.sums["ce"] * float("nan")
        return loss, metrics

    with pytest.raises(KeyboardInterrupt if stop == "ctrl-c" else ForethoughtError):
        train(model, loss_fn, lambda s: _ragged(8, seed=s),
              TrainConfig(steps=3, batch_size=8, log_every=1, activation_checkpointing=True),
              Run.create(tmp_path, stop), rt)
    assert len(rec.rows) == 1 and rec.finished and not rt.accelerator.trackers
    assert not memory.activation_checkpointing_on(model)
    assert [m.training for m in model.modules()] == modes


def test_uninstalled_tracker_is_one_clear_line(tmp_path: Path) -> None:
    import importlib.util

    missing = [t for t in ("wandb", "tensorboard") if importlib.util.find_spec(t) is None]
    if not missing:
        pytest.skip("wandb and tensorboard are both installed")
    expect_clean_failure(["myopia", "synthetic", "--config", "tiny", "--run.log_with", missing[0],
                          "--run.out_dir", str(tmp_path / "runs")], cwd=tmp_path, watch=tmp_path,
                         names=[f"pip install {missing[0]}"])


@pytest.mark.skipif(__import__("importlib").util.find_spec("tensorboard") is None, reason="tensorboard not installed")
def test_tensorboard_writes_event_files(tmp_path: Path) -> None:
    rt = compute_init("cpu", seed=0, log_with="tensorboard", logging_dir=tmp_path)
    run = Run.create(tmp_path, "tb")
    train(_gpt(), token_mean_loss, lambda s: _ragged(8, seed=s), TrainConfig(steps=2, batch_size=8, log_every=1),
          run, rt)
    assert list((run.dir / "tensorboard").glob("events.out.tfevents.*"))


# ---------------------------------------------------------------------------------------------- two processes


def _worker(out: Path) -> None:
    """Run under torchrun: 2 steps of grad_accum 2 on the ragged token-average loss; each rank saves its weights."""
    rt = compute_init("cpu", seed=0)
    model = _gpt(bias=False)  # as _train_gpt's
    tcfg = TrainConfig(steps=2, batch_size=8, lr=1e-2, grad_accum=2, log_every=1)
    train(model, token_mean_loss, lambda s: _ragged(8, seed=s), tcfg, Run.create(out, "ddp", is_main=rt.is_main), rt)
    torch.save({n: p.detach() for n, p in model.named_parameters()}, out / f"rank{rt.rank}.pt")


def test_two_processes_with_accumulation_end_with_the_same_weights(tmp_path: Path) -> None:
    """torchrun, 2 CPU processes (gloo), 2 micro-batches each: both ranks hold the same weights, equal to one
    process training on the same global batches (token averages over all 8 rows, counts all-reduced)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests"),
                                                                                 os.environ.get("PYTHONPATH", "")])}
    torchrun = Path(sys.executable).parent / "torchrun"
    proc = subprocess.run([str(torchrun), "--nproc-per-node", "2", "--master-port", "29561", __file__, str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    single, _, _ = _train_gpt(tmp_path, "single", steps=2, grad_accum=1)
    for n, p in single.named_parameters():
        assert torch.equal(ranks[0][n], ranks[1][n]), n
        assert torch.allclose(ranks[0][n], p.detach(), rtol=0, atol=ATOL), n


if __name__ == "__main__":
    _worker(Path(sys.argv[1]))
