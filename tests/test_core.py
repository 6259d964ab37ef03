"""Configs, checkpoints, the training loop: pure in-process tests."""

import dataclasses
from dataclasses import dataclass
from typing import Literal

import pytest
import torch

from forethought.core.checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint
from forethought.core.config import field, load_config, parse_overrides
from forethought.core.errors import ForethoughtError
from forethought.core.trainer import TrainConfig, lr_at, shard
from forethought.models.gpt import GPT, GPTConfig


@dataclass
class Inner:
    steps: int = field(3, "steps")
    lr: float = field(1e-3, "lr")


@dataclass
class Outer:
    name: str = field("x", "name")
    inner: Inner = field(Inner(), "inner")
    ps: list[float] = field([1.0], "ps")


def test_config_yaml_and_overrides(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("name: y\ninner: {steps: 7}\n")
    cfg = load_config(Outer, f, ["--inner.lr", "3e-4", "ps=[0.5, 0.1]"])
    assert (cfg.name, cfg.inner.steps, cfg.inner.lr, cfg.ps) == ("y", 7, 3e-4, [0.5, 0.1])
    assert Outer().ps is not Outer().ps  # no shared mutable defaults


@pytest.mark.parametrize("args,msg", [
    (["--inner.stepz", "3"], "unknown config key 'inner.stepz' \\(did you mean 'inner.steps'\\?\\)"),
    (["--inner.steps", "abc"], "expects an integer"),
    (["--bogus", "1"], "unknown config key 'bogus'"),
    (["--inner", "3"], "is a section"),
    (["--inner.steps"], "needs a value"),
])
def test_config_errors(args, msg):
    with pytest.raises(ForethoughtError, match=msg):
        load_config(Outer, None, args)


def test_config_bad_files(tmp_path):
    with pytest.raises(ForethoughtError, match="not found"):
        load_config(Outer, tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("inner: [1, 2\n")
    with pytest.raises(ForethoughtError, match="not valid YAML"):
        load_config(Outer, bad)
    bad.write_text("inner: {stepz: 2}\n")
    with pytest.raises(ForethoughtError, match="inner.stepz"):
        load_config(Outer, bad)


def test_parse_overrides_forms():
    # kept as typed; the key's type decides how each is read (see test_string_overrides_keep_their_text)
    assert parse_overrides(["--a.b=2", "c=x", "--d", "[1, 2]"]) == [("a.b", "2"), ("c", "x"), ("d", "[1, 2]")]


@dataclass
class _Texts:
    template: str = field("", "")
    labels: list[str] = field([], "")
    sizes: list[int] = field([], "")
    maybe: str | None = field(None, "")
    flag: bool = field(False, "")
    lr: float = field(0.1, "")


def test_string_overrides_keep_their_text():
    cfg = load_config(_Texts, None, ["--template", r"Title: {title}\nBody: {body}\nScore:", "--labels", "[no, yes]",
                                     "--sizes", "[1, 2]", "--maybe", "Review: {text}", "--flag", "true",
                                     "--lr", "1e-3"])
    assert cfg.template == "Title: {title}\nBody: {body}\nScore:"  # real newlines, not backslash-n
    assert cfg.labels == ["no", "yes"] and cfg.sizes == [1, 2] and cfg.maybe == "Review: {text}"
    assert cfg.flag is True and cfg.lr == pytest.approx(1e-3)
    assert load_config(_Texts, None, ["--template", r"a\\nb"]).template == "a\\nb"  # an escaped backslash
    assert load_config(_Texts, None, ["--labels", "on"]).labels == ["on"]


def test_lr_schedule():
    cfg = TrainConfig(steps=100, lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(0, cfg) == pytest.approx(0.1)
    assert lr_at(9, cfg) == pytest.approx(1.0)
    assert lr_at(10, cfg) == pytest.approx(1.0)
    assert lr_at(99, cfg) == pytest.approx(0.1, abs=1e-3)


def test_shard_splits_global_batch():
    b = {"x": torch.arange(8).view(4, 2), "y": torch.arange(4)}
    parts = [shard(b, r, 2) for r in range(2)]
    assert torch.equal(torch.cat([p["y"] for p in parts]), b["y"])
    with pytest.raises(ForethoughtError, match="divisible"):
        shard(torch.zeros(3), 0, 2)


def _model():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=17, n_positions=8, n_embd=8, n_layer=1, n_head=2))


def test_checkpoint_roundtrip_and_rotation(tmp_path):
    m = _model()
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, m, {"step": step}, keep=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-000002", "step-000003"]
    m2 = GPT(GPTConfig(vocab_size=17, n_positions=8, n_embd=8, n_layer=1, n_head=2))
    state = load_checkpoint(latest_checkpoint(tmp_path), m2)
    assert state["step"] == 3
    for (k, a), b in zip(m.state_dict().items(), m2.state_dict().values(), strict=True):
        assert torch.equal(a, b), k
    assert m2.head.weight is m2.wte.weight  # the tie survives de-duplicated saving


def test_truncated_and_corrupt_checkpoints_are_detected(tmp_path):
    m = _model()
    ck = save_checkpoint(tmp_path, 5, m, {"step": 5})
    f = ck / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    with pytest.raises(ForethoughtError, match="truncated or corrupt: model.safetensors"):
        load_checkpoint(ck, _model())
    f.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(ForethoughtError, match="SHA-256"):
        load_checkpoint(ck, _model())
    (ck / "manifest.json").write_text("{not json")
    with pytest.raises(ForethoughtError, match="manifest"):
        load_checkpoint(ck, _model())


def test_checkpoint_shape_mismatch_is_clear(tmp_path):
    ck = save_checkpoint(tmp_path, 1, _model(), {"step": 1})
    other = GPT(GPTConfig(vocab_size=19, n_positions=8, n_embd=8, n_layer=1, n_head=2))
    with pytest.raises(ForethoughtError, match="does not match the model"):
        load_checkpoint(ck, other)


def test_half_written_checkpoint_is_ignored(tmp_path):
    save_checkpoint(tmp_path, 1, _model(), {"step": 1})
    (tmp_path / ".tmp-step-000002-123").mkdir()  # a run killed mid-save
    (tmp_path / "step-000003").mkdir()  # no manifest: never completed
    assert latest_checkpoint(tmp_path).name == "step-000001"


def _crashing_save(monkeypatch, crash_at: int) -> list[str]:
    """Patch every file operation save_checkpoint makes so that operation ``crash_at`` (0-based) raises, as a kill
    there would stop the save; returns the names of the operations made (all of them when none crashed)."""
    import os
    import shutil

    import forethought.core.checkpoint as ck

    made: list[str] = []

    def wrap(name, fn):
        def op(*args, **kwargs):
            if len(made) == crash_at:
                raise KeyboardInterrupt(f"killed at {name}")
            made.append(name)
            return fn(*args, **kwargs)
        return op

    for owner, name in ((ck, "save_file"), (ck, "atomic_write_json"), (torch, "save"), (os, "replace"),
                        (shutil, "rmtree"), (ck.Path, "mkdir"), (ck.Path, "write_text")):
        monkeypatch.setattr(owner, name, wrap(name, getattr(owner, name)))
    return made


@pytest.mark.parametrize("have,step,keep", [((1, 2), 3, 2), ((1, 2), 2, 2), ((2,), 2, 1)],
                         ids=["new-step-and-prune", "replace-a-step", "replace-the-only-one"])
def test_a_save_killed_at_any_operation_leaves_a_complete_checkpoint(tmp_path, monkeypatch, have, step, keep):
    """Kill the save at each of its file operations in turn: the newest complete checkpoint is the old one or the
    new one, whole (its weights load and are one save's, never a mix), and the next save goes through."""
    def weights(v: float) -> torch.nn.Module:
        m = torch.nn.Linear(2, 2)
        torch.nn.init.constant_(m.weight, v)
        return m

    def save(root, s, v, k):
        return save_checkpoint(root, s, weights(v), {"step": s, "v": v}, {"v": v}, keep=k)

    with monkeypatch.context() as mp:  # how many operations an uninterrupted save makes
        for s in have:
            save(tmp_path / "count", s, float(s), keep)
        ops = _crashing_save(mp, crash_at=10**6)
        save(tmp_path / "count", step, 9.0, keep)
    assert {"save_file", "atomic_write_json", "replace"} <= set(ops)
    for crash in range(len(ops)):
        root = tmp_path / f"crash{crash}"
        for s in have:
            save(root, s, float(s), keep)
        with monkeypatch.context() as mp, pytest.raises(KeyboardInterrupt):
            _crashing_save(mp, crash_at=crash)
            save(root, step, 9.0, keep)
        ckpt = latest_checkpoint(root)
        assert ckpt is not None, (crash, ops[crash])
        m = torch.nn.Linear(2, 2)
        state = load_checkpoint(ckpt, m)  # verified against its manifest
        v = m.weight.detach().unique().tolist()
        old = (max(have), float(max(have)))
        assert (state["step"], state["v"]) in (old, (step, 9.0)) and v == [state["v"]], (crash, ops[crash], ckpt.name)
        assert save(root, step, 7.0, keep) == root / f"step-{step:06d}"  # the run goes on after the resume
        assert latest_checkpoint(root) == root / f"step-{step:06d}"
        assert sorted(p.name for p in root.iterdir()) == sorted(
            f"step-{s:06d}" for s in {*have, step}
            if s in sorted({*have, step})[-keep:])  # nothing left behind: no temp, aside or trash folder


def test_runs_in_one_process_keep_their_pending_state_to_themselves(tmp_path):
    """Two runs of the same folder, not started: a sub-run starts the parent it was made from, and only that one
    (no registry shared by every run of the process)."""
    from forethought.core.run import Run

    mine, other = Run.create(tmp_path, "same", Outer(name="mine")), Run.create(tmp_path, "same")
    stage = mine.sub("stage/a")
    assert not (tmp_path / "same").exists()  # nothing written before the first write
    other.sub("b").start()
    assert not mine.started and not (tmp_path / "same" / "config.yaml").exists()
    stage.log({"step": 1})
    assert mine.started and "mine" in (tmp_path / "same" / "config.yaml").read_text()
    assert (tmp_path / "same" / "stage" / "a" / "metrics.jsonl").is_file()


def test_manifest_entry_without_bytes_is_clear(tmp_path):
    import json

    ck = save_checkpoint(tmp_path, 1, _model(), {"step": 1})
    man = json.loads((ck / "manifest.json").read_text())
    del man["files"]["model.safetensors"]["bytes"]
    (ck / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(ForethoughtError, match="entry 'model.safetensors' lacks its bytes"):
        load_checkpoint(ck, _model())


def test_nested_sections_are_validated_at_load():
    @dataclass
    class WithTrain:
        train: TrainConfig = field(TrainConfig(), "optimisation")

    with pytest.raises(ForethoughtError, match=r"^train: steps must not be negative, got -3$"):
        load_config(WithTrain, None, ["--train.steps", "-3"])
    with pytest.raises(ForethoughtError, match="train: lr must be a positive"):
        load_config(WithTrain, None, ["--train.lr", "0"])



@dataclass
class _Choices:
    pool: Literal["mean", "last"] = field("mean", "")
    switch: Literal["on", "off", "no"] = field("on", "")
    modes: list[Literal["vanilla", "detach_hidden"]] = field(["vanilla"], "")


@pytest.mark.parametrize("args,msg", [
    (["--pool", "meen"], r"^config key 'pool' must be one of 'mean', 'last', got 'meen' \(did you mean 'mean'\?\)$"),
    (["--pool", "xyz"], r"^config key 'pool' must be one of 'mean', 'last', got 'xyz'$"),  # nothing close: no hint
    (["--modes", "[vanilla, detach_hiden]"],
     r"config key 'modes' .* got 'detach_hiden' \(did you mean 'detach_hidden'"),
])
def test_literal_values_are_checked_at_load_with_a_suggestion(args, msg):
    with pytest.raises(ForethoughtError, match=msg):
        load_config(_Choices, None, args)


def test_literal_words_stay_words_on_the_command_line():
    # YAML would read 'no' / 'off' as false; a choice of words keeps the word as typed
    cfg = load_config(_Choices, None, ["--switch", "no", "--modes", "[detach_hidden, vanilla]"])
    assert cfg.switch == "no" and cfg.modes == ["detach_hidden", "vanilla"]
    assert load_config(_Choices, None, ["--switch", "off"]).switch == "off"


@dataclass
class _Ranges:
    n: int = field(1, "")
    rate: float = field(0.5, "")
    shift: float = field(0.0, "")


@pytest.mark.parametrize("check,value,ok", [
    ("at_least", 0, False), ("at_least", 1, True), ("at_least", float("nan"), False),
    ("positive", 0.0, False), ("positive", 1e-9, True), ("positive", float("inf"), False),
    ("within", 1.0, False), ("within", 0.0, True), ("within", float("nan"), False),
    ("finite", -3.0, True), ("finite", float("nan"), False), ("finite", True, False),
])
def test_range_checks_name_the_key_and_reject_nan(check, value, ok):
    from forethought.core import config

    obj = _Ranges(rate=value)
    run = {"at_least": lambda: config.at_least(obj, 1, "rate"), "positive": lambda: config.positive(obj, "rate"),
           "within": lambda: config.within(obj, 0, 1, "rate", high_open=True),
           "finite": lambda: config.finite(obj, "rate")}[check]
    if ok:
        run()
    else:
        with pytest.raises(ForethoughtError, match=r"^rate must be"):
            run()


@pytest.mark.parametrize("args,msg", [
    (["--min_gap", "0"], r"^token_flow.min_gap must be in \(0, 1\]"),
    (["--n_embd", "0"], "^token_flow.n_embd must be at least 1"),
    (["--n_head", "3"], r"^token_flow.n_embd \(256\) must be divisible by n_head \(3\)"),
    (["--time_sigma", "0"], "^token_flow.time_sigma must be a positive number"),
    (["--ce_weight", "-1"], "ce_weight must be at least 0"),
    (["--sde_gamma", "-1"], "^token_flow.sde_gamma must be at least 0"),
    (["--decoder_prob", "1"], "^token_flow.decoder_prob must be below 1"),
    (["--steps", "0"], "^token_flow.steps must be at least 1"),
])
def test_token_flow_config_ranges(args, msg):
    from forethought.psf.token_flow import TokenFlowConfig

    load_config(TokenFlowConfig)  # the defaults are valid
    with pytest.raises(ForethoughtError, match=msg):
        load_config(TokenFlowConfig, None, args)


def test_default_configs_of_every_command_and_preset_load():
    """Every command's defaults and shipped presets pass the load-time checks (a check too strict for a
    preset would break it). Commands that need a run folder get a placeholder one."""
    import importlib

    from forethought.cli import COMMANDS, CONFIG_DIR

    loaded = 0
    for cmd in COMMANDS:
        module, name = cmd.config.split(":")
        cls = getattr(importlib.import_module(module), name)
        required = [f"--{k}" for k in ("recipe_run", "conditioned_run", "lm_run", "predictions", "run_dir", "runs")
                    if k in {f.name for f in dataclasses.fields(cls)}]
        base = [x for k in required for x in (k, "x")]
        presets = sorted((CONFIG_DIR / cmd.system).glob(f"{cmd.verb}_*.yaml"))
        for path in [None, *presets]:
            try:
                load_config(cls, path, base)
            except ForethoughtError as e:
                raise AssertionError(f"{cmd.system} {cmd.verb} {path}: {e}") from None
            loaded += path is not None
    assert loaded >= 20  # every shipped preset: myopia 11, PredGen 3, PSF 6

# ---------------------------------------------------------------------------------------------- training loop


class _Killed(Exception):
    pass


def _train(tmp_path, name, steps=6, resume=None, eval_fn=None, die_at_call=0, gpt=False, **cfg):
    """A tiny regression trained by core.trainer, whose loss draws from numpy's and Python's RNGs (as a data
    augmentation would), so resuming must restore both streams to reach the same weights. ``gpt``: our GPT
    (sequences of 3 inputs) instead of a linear model."""
    import random

    import numpy as np

    from forethought.core.run import Run
    from forethought.core.runtime import compute_init, step_generator
    from forethought.core.trainer import TrainHooks, train

    rt = compute_init("cpu", seed=0)
    torch.manual_seed(0)
    model = (GPT(GPTConfig(n_positions=3, n_embd=16, n_layer=2, n_head=2, input_dim=4, output_dim=1)) if gpt
             else torch.nn.Linear(4, 1))

    def batch_fn(step):
        return torch.randn(8, *((3,) if gpt else ()), 4, generator=step_generator(0, step))

    calls = []

    def loss_fn(m, x):
        calls.append(1)
        if len(calls) == die_at_call:
            raise _Killed  # as if the process were killed here
        noise = float(np.random.normal()) + random.random() + float(torch.rand(()))
        return ((m(x).squeeze(-1) - x.sum(-1) - noise) ** 2).mean(), {}

    tcfg = TrainConfig(steps=steps, batch_size=8, lr=0.05, log_every=1, **cfg)
    run = Run.create(tmp_path, name)
    out = train(model, loss_fn, batch_fn, tcfg, run, rt, TrainHooks(eval_fn=eval_fn), resume=resume)
    return model, out, run


@pytest.mark.parametrize("opts", [{}, {"grad_accum": 2}, {"gpt": True, "grad_accum": 2,
                                                              "activation_checkpointing": True}],
                         ids=["plain", "grad_accum", "gpt-accum-checkpointing"])
def test_resume_restores_every_rng_stream(tmp_path, opts):
    import random

    import numpy as np

    ref, _, _ = _train(tmp_path, "ref", steps=6, **opts)
    calls_per_step = opts.get("grad_accum", 1)  # one loss_fn call per micro-batch
    with pytest.raises(_Killed):  # killed in step 5, after the checkpoint at step 3
        _train(tmp_path, "cut", steps=6, checkpoint_every=3, die_at_call=4 * calls_per_step + 1, **opts)
    # a new process would start with other RNG states: scramble all of them before resuming
    np.random.seed(123)
    random.seed(123)
    torch.manual_seed(123)
    resumed, out, _ = _train(tmp_path, "cut", steps=6, resume="auto", checkpoint_every=3, **opts)
    assert out["resumed_from"] == 3
    for (name, a), b in zip(ref.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_eval_every_logs_plots_and_does_not_change_training(tmp_path):
    calls = []

    def eval_fn(model, step):
        calls.append(step)
        torch.rand(100)  # evaluation that draws random numbers must not shift the training streams
        return {"val": float(model.weight.detach().sum()), "n": 3}

    plain, _, _ = _train(tmp_path, "plain", steps=5)
    evald, out, run = _train(tmp_path, "evald", steps=5, eval_every=2, eval_fn=eval_fn)
    assert calls == [2, 4, 5]  # every 2 steps and at the last
    rows = [r for r in run.metrics() if r.get("eval")]
    assert [r["step"] for r in rows] == [2, 4, 5] and all("val" in r for r in rows)
    assert [r["step"] for r in out["eval_curve"]] == [2, 4, 5]
    assert (run.dir / "eval_curve.png").stat().st_size > 0
    assert torch.equal(plain.weight, evald.weight)
    _, off, run_off = _train(tmp_path, "off", steps=3, eval_fn=eval_fn)  # eval_every 0: never called
    assert "eval_curve" not in off and not (run_off.dir / "eval_curve.png").exists() and calls[-1] == 5


def test_ranks_share_data_and_init_seeds_but_not_dropout_ones():
    from forethought.core.runtime import RANK_SHARED_STREAMS, mix_seed, rank_seed, seed_rank_streams

    assert set(RANK_SHARED_STREAMS) == {"data", "init"}
    for stream in ("data", "init"):
        assert len({rank_seed(stream, 7, r) for r in range(4)}) == 1 and rank_seed(stream, 7, 0) == mix_seed(stream, 7)
    assert len({rank_seed("dropout", 7, r) for r in range(4)}) == 4
    assert rank_seed("dropout", 7, 1) != rank_seed("dropout", 8, 1)  # still a function of the run's seed

    def masks(rank, world):  # what a dropout layer draws on this rank once training starts
        torch.manual_seed(0)  # every rank seeded alike (equal initial weights)
        seed_rank_streams(rank, world)
        return torch.nn.functional.dropout(torch.ones(64), 0.5)

    assert torch.equal(masks(1, 2), masks(1, 2))  # reproducible per rank
    assert not torch.equal(masks(0, 2), masks(1, 2))
    assert torch.equal(masks(0, 1), masks(3, 1))  # one process: its stream is left as seeded


def test_non_finite_loss_stops_every_rank():
    from forethought.core.trainer import all_finite

    class FakeAccelerator:  # two processes: this one finite, the other one not
        num_processes = 2

        def reduce(self, t, reduction):
            return t + 1

    assert not all_finite(torch.tensor(1.0), FakeAccelerator())
    assert all_finite(torch.tensor(1.0), type("One", (), {"num_processes": 1})())
    assert not all_finite(torch.tensor(float("nan")), type("One", (), {"num_processes": 1})())


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_asking_for_cuda_without_it_is_an_error():
    from forethought.core.runtime import check_device, compute_init, pick_device

    for device in ("cuda", "cuda:0"):
        with pytest.raises(ForethoughtError, match="CUDA is not available"):
            pick_device(device)
    with pytest.raises(ForethoughtError, match="CUDA is not available"):
        compute_init("cuda")
    with pytest.raises(ForethoughtError, match="unknown device 'tpu'"):
        check_device("tpu")
    assert pick_device("auto") == torch.device("cpu")


def test_config_foundations_import_without_torch():
    """The config loader, the run section and the optimisation section import no torch (nor numpy), so a
    command's config can be read and checked before the heavy libraries load (a fresh interpreter: this one
    already holds torch)."""
    import subprocess
    import sys

    code = ("import sys, forethought.core.config, forethought.core.run, forethought.core.train_config; "
            "print(sorted(m for m in ('torch', 'numpy', 'transformers', 'accelerate') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout


# ---------------------------------------------------------------------------------------------- EMA weights


def test_ema_update_is_the_moving_average():
    from forethought.core.trainer import ema_update

    shadow, param = [torch.tensor([1.0, -2.0])], [torch.tensor([3.0, 2.0])]
    ema_update(shadow, param, 0.9)
    assert torch.allclose(shadow[0], torch.tensor([1.2, -1.6]))  # 0.9·1 + 0.1·3, 0.9·(−2) + 0.1·2
    ema_update(shadow, param, 0.9)
    assert torch.allclose(shadow[0], torch.tensor([1.38, -1.24]))
    assert torch.equal(param[0], torch.tensor([3.0, 2.0]))  # the weights are not touched


def test_ema_weights_are_saved_and_resumed(tmp_path):
    """The trainer's EMA equals the recurrence over the weights after every step, starting from the initial
    weights; it is saved beside the raw weights; a run killed and resumed reaches the same raw weights and EMA."""
    from forethought.core.checkpoint import read_ema

    decay = 0.7
    ref, _, run = _train(tmp_path, "ref", steps=5, ema_decay=decay, checkpoint_every=1, keep_checkpoints=5)
    torch.manual_seed(0)
    expected = {n: p.detach().clone() for n, p in torch.nn.Linear(4, 1).named_parameters()}  # _train's init
    for c in list_checkpoints(run.dir):  # the raw weights after steps 1..5
        weights = torch.nn.Linear(4, 1)
        load_checkpoint(c, weights)
        for n, p in weights.named_parameters():
            expected[n] = decay * expected[n] + (1 - decay) * p.detach()
    ema = read_ema(latest_checkpoint(run.dir))
    assert ema is not None and set(ema) == {"weight", "bias"}
    for n, p in ref.named_parameters():
        assert torch.allclose(ema[n], expected[n], atol=1e-6), n
        assert not torch.allclose(ema[n], p)  # the average, not the last weights
    # killed in step 4, after the checkpoint at step 2; resumed: the same raw weights and the same EMA
    with pytest.raises(_Killed):
        _train(tmp_path, "cut", steps=5, ema_decay=decay, checkpoint_every=2, die_at_call=4)
    torch.manual_seed(123)
    resumed, out, cut = _train(tmp_path, "cut", steps=5, ema_decay=decay, checkpoint_every=2, resume="auto")
    assert out["resumed_from"] == 2 and torch.equal(resumed.weight, ref.weight)
    again = read_ema(latest_checkpoint(cut.dir))
    assert all(torch.equal(again[n], ema[n]) for n in ema)
    _, _, plain = _train(tmp_path, "plain", steps=2)
    assert read_ema(latest_checkpoint(plain.dir)) is None  # ema_decay 0: no EMA file


def test_sampling_loads_the_ema_and_a_warm_start_the_raw_weights(tmp_path):
    """load_pretrained (the rebuild that sampling and evaluation use) lays the EMA over the raw weights, also on
    a tied tensor; load_checkpoint without ema=True (warm starts, resume) keeps the raw ones; a corrupt EMA file is
    one line."""
    from forethought.core.checkpoint import load_pretrained, model_record

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, n_positions=4, n_embd=8, n_layer=1, n_head=2))  # head tied to wte
    ema = {n: p.detach() + 1.0 for n, p in model.named_parameters()}
    ckpt = save_checkpoint(tmp_path, 1, model, {}, model_record("tiny-gpt", dataclasses.asdict(model.config)),
                           ema=ema)
    loaded, _ = load_pretrained(ckpt, "tiny-gpt", lambda r: GPT(GPTConfig(**r["config"])))
    for n, p in loaded.named_parameters():
        assert torch.equal(p, ema[n]), n
    assert torch.equal(loaded.head.weight, ema["wte.weight"])  # the tie holds the average
    raw = GPT(GPTConfig(**dataclasses.asdict(model.config)))
    load_checkpoint(ckpt, raw)
    assert all(torch.equal(a, b) for a, b in zip(raw.parameters(), model.parameters(), strict=True))
    raw_again, _ = load_pretrained(ckpt, "tiny-gpt", lambda r: GPT(GPTConfig(**r["config"])), ema=False)
    assert torch.equal(raw_again.wte.weight, model.wte.weight)
    (ckpt / "ema.safetensors").write_bytes(b"x" * (ckpt / "ema.safetensors").stat().st_size)
    with pytest.raises(ForethoughtError, match="ema.safetensors fails its SHA-256 check"):
        load_pretrained(ckpt, "tiny-gpt", lambda r: GPT(GPTConfig(**r["config"])))


@pytest.mark.parametrize("decay_all", [False, True])
def test_decay_all_decays_biases_too(tmp_path, decay_all):
    # A linear model's 1-D bias: without decay_all only the (1, 4) weight matrix is decayed. One step with and
    # without weight decay on the same data (one step: the gradients are equal): only decayed parameters differ.
    import random

    import numpy as np

    np.random.seed(0), random.seed(0)  # the loss's noise draws from these
    plain, _, _ = _train(tmp_path, f"plain-{decay_all}", steps=1, grad_clip=0.0)
    np.random.seed(0), random.seed(0)
    decayed, _, _ = _train(tmp_path, f"wd-{decay_all}", steps=1, grad_clip=0.0, weight_decay=0.5,
                           decay_all=decay_all)
    assert not torch.equal(plain.weight, decayed.weight)
    assert torch.equal(plain.bias, decayed.bias) is not decay_all
