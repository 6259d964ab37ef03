"""The bad-input matrix, PSF part: ``psf recipe | sample | eval | diagnose | token-flow`` through the real CLI.

Every case must exit with status 2, print one line on stderr that names the problem, print no traceback, and
leave the run folder exactly as it was (or not create it). Settings the config refuses as it loads run in this
process; the rest in processes of their own. Cases that need a trained run copy one tiny recipe run, trained
once for the module.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from cli_harness import cli, expect_clean_failure

# the tiny recipe cut to base -> prior -> AR (seconds), which is every kind of stage a run folder holds
RECIPE = ["psf", "recipe", "--config", "tiny", "--run.name", "psf", "--landing.enabled", "false",
          "--self_realized.enabled", "false", "--codes.enabled", "false", "--longer_blocks.blocks", "[]"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A finished tiny recipe run (generated corpus) and the environment whose cache holds its tokenizer and
    token arrays."""
    root = tmp_path_factory.mktemp("psf-trained")
    env = {"FORETHOUGHT_CACHE": str(root / "cache"), "FORETHOUGHT_DATA": ""}
    out = cli([*RECIPE, "--run.out_dir", str(root / "runs")], root, env)
    assert out.returncode == 0, out.stderr[-3000:]
    return root / "runs" / "psf", env


@pytest.fixture
def run_copy(trained: tuple[Path, dict[str, str]], tmp_path: Path) -> Path:
    """This test's own copy of the trained run, at ``tmp_path/runs/psf``."""
    return Path(shutil.copytree(trained[0], tmp_path / "runs" / "psf"))


def _recipe_case(tmp_path: Path, env: dict[str, str], args: list[str], names: list[str],
                 in_process: bool = False) -> str:
    runs = tmp_path / "runs"
    return expect_clean_failure([*RECIPE, "--run.out_dir", str(runs), *args], tmp_path, runs, names, env,
                                in_process=in_process)


@pytest.mark.parametrize("args,names", [
    (["--data.corpus", "no-such-corpus"], ["unknown corpus", "no-such-corpus"]),
    (["--data.tokenizer", "no-such-tokenizer"], ["tokenizer", "no-such-tokenizer"]),
    (["--resume", "some/checkpoint"], ["--resume auto"]),
])
def test_bad_recipe_inputs_write_nothing(tmp_path: Path, trained: tuple[Path, dict[str, str]], args: list[str],
                                         names: list[str]) -> None:
    """Found out once the data (or the resume request) is looked at, before anything is written."""
    _recipe_case(tmp_path, trained[1], args, names)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("args,names", [
    (["--prior.model.n_head", "3"], ["prior.model", "n_embd (32) must be divisible by n_head (3)"]),
    (["--prior.model.conditioning", "mask"], ["prior.model.conditioning", "'none', 'known_mask'", "'mask'"]),
    (["--base.train.steps", "-3"], ["base.train", "steps", "-3"]),
    (["--ar.train.steps", "-2"], ["ar.train", "steps", "-2"]),
    (["--model.code_init_sigma", "0"], ["model", "code_init_sigma must be a number > 0"]),
    (["--model.code_lr_factor", "nan"], ["model", "code_lr_factor must be a number > 0"]),
    (["--model.code_warmup_steps", "-1"], ["model", "code_warmup_steps must not be negative"]),
    (["--model.code_enters", "everywhere"], ["code_enters", "'query', 'inputs'", "'everywhere'"]),
    (["--model.code_mean_norm", "layer"], ["code_mean_norm", "'none', 'batch'"]),
    (["--prior.state_only_variant", "true"], ["prior.state_only_variant needs the codes stage"]),
    (["--model.code_dropout", "1"], ["model", "code_dropout must be in [0, 1)"]),
    (["--model.code_dropout_unit", "token"], ["code_dropout_unit", "'block', 'sequence'"]),
    (["--longer_blocks.blocks", "[2, 2]"], ["longer_blocks.blocks", "must appear once"]),
    # every section checks its ranges when the config loads
    (["--model.n_embd", "0"], ["model: n_embd must be at least 1", "0"]),
    (["--model.vocab_size", "-1"], ["model: vocab_size must be at least 0"]),
    (["--model.free_bits", "nan"], ["model: free_bits must be a finite number", "nan"]),
    (["--model.pool", "meen"], ["model.pool", "'mean', 'last'", "did you mean 'mean'"]),
    (["--model.dropout", "1"], ["model", "dropout must be in [0, 1)"]),
    (["--prior.model.n_embd", "0"], ["prior.model: n_embd must be at least 1"]),
    (["--prior.model.time_mu", "nan"], ["prior.model: time_mu must be a finite number"]),
    (["--prior.model.min_gap", "0"], ["prior.model", "min_gap must be in (0, 1]"]),
    (["--ar.model.n_embd", "0"], ["ar.model: n_embd must be at least 1"]),
    (["--baselines", "[ar, gpt]"], ["config key 'baselines'", "'ar'", "got 'gpt'"]),
    (["--rollout.top_p", "0"], ["rollout", "top_p must be in (0, 1]"]),
    (["--data.planted.stay_prob", "2", "--data.corpus", "planted"], ["planted", "stay_prob must be in [0, 1]"]),
    (["--run.name", "a/b"], ["run: name must be a plain folder name", "'a/b'"]),
    (["--prior.train.grad_clip", "nan"], ["prior.train: grad_clip must be a finite number"]),
])
def test_bad_recipe_settings_write_nothing(tmp_path: Path, args: list[str], names: list[str]) -> None:
    _recipe_case(tmp_path, {}, args, names, in_process=True)
    assert not (tmp_path / "runs").exists()  # not even an empty run folder


@pytest.mark.parametrize("args,names", [
    (["psf", "eval", "--recipe_run", "x", "--models", "[psf, arr]"], ["config key 'models'", "did you mean 'ar'"]),
    (["psf", "eval", "--recipe_run", "x", "--reference_spread", "evenly"], ["reference_spread", "did you mean 'even'"]),
    (["psf", "eval", "--recipe_run", "x", "--length_quantile", "1.5"], ["length_quantile must be in [0, 1]"]),
    (["psf", "eval", "--recipe_run", "x", "--target_entropy", "-1"], ["target_entropy must be a number >= 0"]),
    (["psf", "eval", "--recipe_run", "x", "--sweep", "[[1.0, 0]]"], ["sweep: top_p must be in (0, 1]"]),
    (["psf", "eval", "--recipe_run", "x", "--entropy_tolerance", "0"], ["entropy_tolerance must be a number > 0"]),
    (["psf", "eval", "--recipe_run", "x", "--densify_top_p", "0"], ["densify_top_p must be in (0, 1]"]),
    (["psf", "eval", "--recipe_run", "x", "--densify_points", "0"], ["densify_points must be at least 1"]),
    (["psf", "sample", "--recipe_run", "x", "--model", "gpt"], ["model", "'psf', 'ar'", "got 'gpt'"]),
    (["psf", "sample", "--recipe_run", "x", "--top_p", "1.5"], ["top_p must be in (0, 1]"]),
    (["psf", "diagnose", "--recipe_run", "x", "--ceiling_cut", "mask2"], ["ceiling_cut", "did you mean 'mask'"]),
    (["psf", "diagnose", "--recipe_run", "x", "--eval_sequences", "1"], ["eval_sequences must be at least 2"]),
])
def test_bad_settings_fail_at_load(tmp_path: Path, args: list[str], names: list[str]) -> None:
    """Checked when the config loads, before the run folder named by --recipe_run is even looked at."""
    expect_clean_failure(args, tmp_path, tmp_path, names, in_process=True)


@pytest.mark.parametrize("content", ["truncated", "{}"])
def test_corrupt_stage_results_on_resume(run_copy: Path, tmp_path: Path, trained: tuple[Path, dict[str, str]],
                                         content: str) -> None:
    path = run_copy / "prior" / "results.json"  # a later stage: base, complete before it, must stay untouched
    text = path.read_text()
    path.write_text(text[:len(text) // 2] if content == "truncated" else content)
    _recipe_case(tmp_path, trained[1], ["--resume", "auto"], [str(path), "corrupt", "--resume auto"])


@pytest.mark.parametrize("name", ["results.json", "config.yaml"])
def test_corrupt_run_files_when_sampling(run_copy: Path, tmp_path: Path, trained: tuple[Path, dict[str, str]],
                                         name: str) -> None:
    path = run_copy / name
    path.write_text(path.read_text()[:100] + "\n: [")
    expect_clean_failure(["psf", "sample", "--recipe_run", str(run_copy)], tmp_path, run_copy,
                         [str(path), "corrupt"], trained[1])


@pytest.mark.parametrize("args,names", [
    (["--temperature", "-1"], ["temperature must be a number >= 0", "-1"]),
    (["--name", "base"], ["name 'base'", "trained model"]),  # would overwrite that stage's results.json
    (["--name", "results.json"], ["name 'results.json'", "file of the recipe run"]),
    (["--prompt_blocks", "9"], ["prompt_blocks must be in 1..4"]),
    (["--prompt_blocks", "1", "--prompt_replace", "false"], ["conditioning none", "only through replacement"]),
    (["--prior", "state_only"], ["no trained state-only prior", "prior.state_only_variant"]),
])
def test_bad_sample_settings_write_nothing(run_copy: Path, tmp_path: Path, trained: tuple[Path, dict[str, str]],
                                           args: list[str], names: list[str]) -> None:
    line = expect_clean_failure(["psf", "sample", "--recipe_run", str(run_copy), *args], tmp_path, run_copy, names,
                                trained[1])
    assert "greedy=" not in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_sample_on_cuda_without_cuda(run_copy: Path, tmp_path: Path, trained: tuple[Path, dict[str, str]]) -> None:
    line = expect_clean_failure(["psf", "sample", "--recipe_run", str(run_copy), "--device", "cuda"], tmp_path,
                                run_copy, ["cuda", "not available", "--device"], trained[1])
    assert "--run.device" not in line  # psf sample has no such key


@pytest.mark.parametrize("args,names", [
    ([], ["--recipe_run"]),
    (["--recipe_run", "{run}", "--size", "huge"], ["size", "'matched', 'config'", "'huge'"]),
    (["--recipe_run", "{run}", "--param_tolerance", "0"], ["param_tolerance must be in (0, 1)"]),
    (["--recipe_run", "{run}", "--steps", "-1"], ["steps must be >= 0"]),
    (["--recipe_run", "{run}", "--size", "config", "--token_flow.n_head", "3"], ["token_flow.n_embd (256)",
                                                                                 "n_head (3)"]),
    (["--recipe_run", "{run}", "--token_flow.head", "logits"], ["contextual latents have no token table"]),
    (["--recipe_run", "{run}", "--token_flow.latents", "table", "--token_flow.rounding", "lm_head"],
     ["rounding=lm_head needs head=logits"]),
    (["--recipe_run", "{run}", "--token_flow.decoder_prob", "0"], ["rounding=decoder needs the decoder branch"]),
    (["--recipe_run", "{run}", "--blr", "0"], ["blr must be a positive number"]),
    (["--recipe_run", "{run}", "--optimizer", "muon"], ["optimizer", "'elf', 'ar'"]),
    (["--recipe_run", "{run}", "--token_flow.latent_layer", "-2"], ["latent_layer must be at least -1"]),
])
def test_bad_token_flow_settings_write_nothing(tmp_path: Path, args: list[str], names: list[str]) -> None:
    args = [a.replace("{run}", str(tmp_path / "runs" / "psf")) for a in args]
    expect_clean_failure(["psf", "token-flow", *args, "--device", "cpu"], tmp_path, tmp_path, names,
                         in_process=True)


def test_token_flow_errors_name_their_key_once(tmp_path: Path) -> None:
    """A nested section's check that already names its path is not prefixed again ("token_flow: token_flow.")."""
    line = expect_clean_failure(["psf", "token-flow", "--recipe_run", str(tmp_path / "runs" / "psf"),
                                 "--token_flow.sde_gamma", "-1", "--device", "cpu"], tmp_path, tmp_path,
                                ["token_flow.sde_gamma must be at least 0"], in_process=True)
    assert line == "forethought: error: token_flow.sde_gamma must be at least 0, got -1.0"


@pytest.mark.parametrize("args,names", [
    (["--recipe_run", "{run}/no-such-run"], ["no-such-run", "not a finished 'psf recipe' run"]),
    (["--recipe_run", "{run}", "--param_tolerance", "0.001"], ["no token-flow size within", "size: config"]),
    (["--recipe_run", "{run}", "--token_flow.latent_layer", "99"], ["token_flow.latent_layer must be -1 or 0..",
                                                                     "got 99"]),
])
def test_token_flow_on_a_run_it_cannot_use(run_copy: Path, tmp_path: Path, trained: tuple[Path, dict[str, str]],
                                           args: list[str], names: list[str]) -> None:
    args = [a.replace("{run}", str(run_copy)) for a in args]
    expect_clean_failure(["psf", "token-flow", *args, "--device", "cpu"], tmp_path, tmp_path / "runs", names,
                         trained[1])
    assert not (tmp_path / "runs" / "token_flow").exists()


def test_token_flow_needs_the_ar_baseline(run_copy: Path, tmp_path: Path, trained: tuple[Path, dict[str, str]]
                                          ) -> None:
    res = run_copy / "results.json"
    data = json.loads(res.read_text())
    del data["stages"]["ar"]  # a recipe run trained without --baselines [ar]
    res.write_text(json.dumps(data))
    expect_clean_failure(["psf", "token-flow", "--recipe_run", str(run_copy)], tmp_path, tmp_path / "runs",
                         ["no AR baseline", "--baselines [ar]"], trained[1])
    assert not (tmp_path / "runs" / "token_flow").exists()
