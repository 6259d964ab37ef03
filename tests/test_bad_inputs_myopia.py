"""The bad-input matrix, myopia part: the real CLI (``myopia synthetic | lm | gradients | probe``).

Every case must exit with status 2, print one line on stderr that names the problem, print no traceback, and
leave the folder it works in exactly as it was. Settings the config refuses as it loads run in this process (the
myopia configs import no torch); the rest in processes of their own. Probe cases run on copies of one tiny
``myopia lm`` run (trained once for the module on the ``generated`` corpus), each copy damaged in one way.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from cli_harness import expect_clean_failure

from forethought.cli import main
from forethought.core.checkpoint import latest_checkpoint

SYNTH = ["myopia", "synthetic", "--config", "tiny"]
LM = ["myopia", "lm", "--config", "tiny"]
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory: pytest.TempPathFactory, cache: Path) -> Path:
    """A finished tiny ``myopia lm`` run (vanilla only, 2 steps: one checkpoint)."""
    root = tmp_path_factory.mktemp("lm")
    assert main([*LM, "--variants", "[vanilla]", "--train.steps", "2", "--data.cache_dir", str(cache),
                 "--run.out_dir", str(root)]) == 0
    return root / "myopia-lm-tiny"


def _case(tmp_path: Path, args: list[str], names: list[str], cache: Path, in_process: bool = False) -> str:
    runs = tmp_path / "runs"
    return expect_clean_failure([*args, "--run.out_dir", str(runs)], tmp_path, tmp_path, names,
                                env={"FORETHOUGHT_CACHE": str(cache)}, in_process=in_process)


@pytest.mark.parametrize("args,names", [
    ([*LM, "--variants", "[vanilla, nope]"], ["config key 'variants'", "'vanilla', 'detach_hidden'", "got 'nope'"]),
    ([*LM, "--variants", "[vanila]"], ["config key 'variants'", "did you mean 'vanilla'"]),
    ([*LM, "--variants", "[local, vanilla]"], ["'local' needs 'vanilla' trained before it"]),
    ([*LM, "--gpt.activation", "nope"], ["gpt.activation", "nope"]),
    ([*LM, "--train.steps", "-3"], ["train: steps must not be negative", "-3"]),
    ([*LM, "--train.steps", "0"], ["train.steps must be at least 1"]),
    ([*LM, "--data.curve_sequences", "0"], ["data.curve_sequences must be at least 1"]),
    ([*SYNTH, "--modes", "[vanilla, nope]"], ["config key 'modes'", "got 'nope'"]),
    ([*SYNTH, "--modes", "[local]"], ["config key 'modes'", "got 'local'"]),  # needs a trained vanilla LM
    ([*SYNTH, "--model.activation", "nope"], ["model.activation", "nope"]),
    ([*SYNTH, "--train.steps", "0"], ["train.steps must be at least 1"]),
    ([*SYNTH, "--curve_sequences", "0"], ["curve_sequences must be at least 1"]),
    ([*SYNTH, "--eval_sequences", "0"], ["eval_sequences must be at least 1"]),
    ([*SYNTH, "--myopia.horizon", "-1"], ["myopia.horizon must be >= 0", "-1"]),
    ([*LM, "--myopia.horizon", "-2"], ["myopia.horizon must be >= 0", "-2"]),
    ([*LM, "--myopia.beta", "1.5"], ["myopia.beta must be in [0, 1]", "1.5"]),
    ([*SYNTH, "--myopia.beta", "nan"], ["myopia.beta must be in [0, 1]", "nan"]),
    ([*LM, "--myopia.local_form", "referense"], ["myopia.local_form", "did you mean 'reference'"]),
    ([*LM, "--base", "smollm2-135m", "--variants", "[vanilla, local]", "--myopia.local_form", "reference"],
     ["local_form reference is implemented for our GPT"]),
    ([*SYNTH, "--eval_seed", "-1"], ["eval_seed must not be negative", "-1"]),
    ([*SYNTH, "--task.history", "zeros"], ["task.history", "did you mean 'zero'"]),
    (["myopia", "attention-check", "--horizons", "[0, -1]"], ["horizons must be >= 0"]),
    (["myopia", "attention-check", "--dtypes", "[fp16]"], ["dtypes", "'fp32', 'bf16'", "'fp16'"]),
    ([*SYNTH, "--model.init", "nope"], ["model.init", "nope"]),
    # every config class checks its ranges when the config loads: sizes, rates, probabilities, NaN
    ([*LM, "--gpt.attention", "causl"], ["gpt.attention", "did you mean 'causal'"]),
    ([*LM, "--gpt.n_embd", "0"], ["gpt: n_embd must be at least 1", "0"]),
    ([*LM, "--gpt.n_head", "3"], ["gpt: n_embd (32) must be divisible by n_head (3)"]),
    ([*LM, "--gpt.dropout", "1"], ["gpt: dropout must be in [0, 1)", "1.0"]),
    ([*LM, "--gpt.layer_norm_eps", "0"], ["gpt: layer_norm_eps must be a positive number"]),
    ([*LM, "--gpt.vocab_size", "0"], ["gpt: vocab_size must be at least 1"]),
    ([*LM, "--lora_r", "-1"], ["lora_r must be at least 0", "-1"]),
    ([*LM, "--lora_alpha", "0"], ["lora_alpha must be a positive number"]),
    ([*LM, "--data.seq_len", "0"], ["data: seq_len must be at least 1"]),
    ([*LM, "--data.eval_sequences", "0"], ["data: eval_sequences must be at least 1"]),
    ([*LM, "--data.corpus", " "], ["data: corpus must name a corpus"]),
    ([*LM, "--train.weight_decay", "nan"], ["train: weight_decay must be a finite number", "nan"]),
    ([*LM, "--train.min_lr_ratio", "1.5"], ["train: min_lr_ratio must be in [0, 1]"]),
    ([*LM, "--train.beta2", "1"], ["train: beta2 must be in [0, 1)"]),
    ([*LM, "--train.batch_size", "6", "--train.grad_accum", "4"], ["batch_size 6 is not divisible by grad_accum 4"]),
    ([*LM, "--run.name", ".."], ["run: name must be a plain folder name", "'..'"]),
    ([*LM, "--run.name", "a/b"], ["run: name must be a plain folder name", "'a/b'"]),
    ([*LM, "--run.precision", "fp8"], ["run.precision", "'fp32', 'bf16', 'fp16'", "'fp8'"]),
    ([*LM, "--run.log_with", "tensorbord"], ["run.log_with", "did you mean 'tensorboard'"]),
    ([*LM, "--base_dtype", "bf17"], ["base_dtype", "did you mean 'bf16'"]),
    ([*SYNTH, "--task.window", "0"], ["task: window must be at least 1"]),
    ([*SYNTH, "--task.shift", "-1"], ["task: shift must be at least 0"]),
    ([*SYNTH, "--task.frequency", "inf"], ["task: frequency must be a finite number"]),
    ([*SYNTH, "--task.function", "sinh"], ["task.function", "did you mean 'sin'"]),
    ([*SYNTH, "--probe.ridge", "-1"], ["probe: ridge must be at least 0"]),
    ([*SYNTH, "--probe.test_sequences", "0"], ["probe: test_sequences must be at least 1"]),
    ([*SYNTH, "--p_values", "[0.5, 0]"], ["p_values must be in (0, 1]"]),
    ([*SYNTH, "--probe.max_lag", "64"], ["task.seq_len (64) must exceed probe.max_lag"]),  # no position to probe
    (["myopia", "gradients", "--config", "tiny", "--mode", "detach_hiden"], ["mode", "did you mean 'detach_hidden'"]),
    (["myopia", "gradients", "--config", "tiny", "--experiment", "lm2"], ["experiment", "'synthetic', 'lm'"]),
    (["myopia", "gradients", "--config", "tiny", "--lora_alpha", "-2"], ["lora_alpha must be a positive number"]),
    (["myopia", "gradients", "--config", "tiny", "--p", "0"], ["p must be in (0, 1]"]),
    (["myopia", "probe", "--lm_run", "x", "--ridge", "-1"], ["ridge must be at least 0"]),
    (["myopia", "probe", "--lm_run", "x", "--fit_sequences", "0"], ["fit_sequences must be at least 1"]),
    (["myopia", "probe", "--lm_run", "x", "--layers", "[0, -1]"], ["layers must be >= 0"]),
    (["myopia", "probe", "--lm_run", "x", "--k_max", "0"], ["k_max must be >= 1"]),
])
def test_bad_training_command(tmp_path: Path, cache: Path, args: list[str], names: list[str]) -> None:
    _case(tmp_path, args, names, cache, in_process=True)


@no_cuda
@pytest.mark.parametrize("args", [LM, SYNTH])
def test_cuda_without_cuda(tmp_path: Path, cache: Path, args: list[str]) -> None:
    _case(tmp_path, [*args, "--run.device", "cuda"], ["cuda", "not available"], cache)


def _rewrite(path: Path, data: bytes, manifest_too: bool = False) -> None:
    """Replace a checkpoint file's bytes; with ``manifest_too`` the manifest is updated to match them."""
    path.write_bytes(data)
    if manifest_too:
        man_path = path.parent / "manifest.json"
        man = json.loads(man_path.read_text())
        man["files"][path.name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        man_path.write_text(json.dumps(man))


def _garbage_config(ckpt: Path) -> None:
    _rewrite(ckpt / "config.json", b"{not json", manifest_too=True)


def _corrupt_config(ckpt: Path) -> None:
    _rewrite(ckpt / "config.json", b"{not json")


def _truncate_weights(ckpt: Path) -> None:
    p = ckpt / "model.safetensors"
    _rewrite(p, p.read_bytes()[:-100])


def _flip_weight_byte(ckpt: Path) -> None:
    p = ckpt / "model.safetensors"
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte different
    _rewrite(p, bytes(data))


def _manifest_without_bytes(ckpt: Path) -> None:
    man_path = ckpt / "manifest.json"
    man = json.loads(man_path.read_text())
    del man["files"]["model.safetensors"]["bytes"]
    man_path.write_text(json.dumps(man))


@pytest.mark.parametrize("damage,names", [
    (_garbage_config, ["config.json", "unreadable"]),  # matches its manifest: written that way
    (_corrupt_config, ["config.json", "corrupt"]),
    (_truncate_weights, ["model.safetensors", "truncated"]),
    (_flip_weight_byte, ["model.safetensors", "SHA-256"]),
    (_manifest_without_bytes, ["manifest.json", "model.safetensors", "bytes"]),
])
def test_probe_on_damaged_checkpoint(tmp_path: Path, cache: Path, lm_run: Path,
                                     damage: Callable[[Path], None], names: list[str]) -> None:
    run = tmp_path / "lm"
    shutil.copytree(lm_run, run)
    damage(latest_checkpoint(run / "vanilla"))
    _case(tmp_path, ["myopia", "probe", "--lm_run", str(run), "--variants", "[vanilla]"], names, cache)


def _synthetic_run(folder: Path) -> None:
    from forethought.core.config import save_yaml
    from forethought.myopia.synthetic import SyntheticConfig

    save_yaml(SyntheticConfig(), folder / "config.yaml")


@pytest.mark.parametrize("make,names", [
    (lambda folder: None, ["not a 'myopia lm' run folder", "no config.yaml"]),
    (_synthetic_run, ["not a 'myopia lm' run folder", "unknown config key"]),
])
def test_probe_on_a_folder_that_is_not_an_lm_run(tmp_path: Path, cache: Path, make: Callable[[Path], None],
                                                  names: list[str]) -> None:
    folder = tmp_path / "not-a-run"
    folder.mkdir()
    make(folder)
    _case(tmp_path, ["myopia", "probe", "--lm_run", str(folder), "--variants", "[vanilla]"], names, cache)


@pytest.mark.parametrize("extra,names,in_process", [
    (["--variants", "[vanilla, nope]"], ["config key 'variants'", "got 'nope'"], True),
    (["--variants", "[zero_past]"], ["no checkpoint for variant 'zero_past'"], False),
    pytest.param(["--run.device", "cuda"], ["cuda", "not available"], False, marks=no_cuda),
])
def test_bad_probe_command(tmp_path: Path, cache: Path, lm_run: Path, extra: list[str], names: list[str],
                           in_process: bool) -> None:
    run = tmp_path / "lm"
    shutil.copytree(lm_run, run)
    _case(tmp_path, ["myopia", "probe", "--lm_run", str(run), *extra], names, cache, in_process)
