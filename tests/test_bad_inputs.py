"""The bad-input matrix, shared part: the real CLI, for mistakes any command can receive.

Every case must exit with status 2, print one line on stderr that names the problem, print no traceback, and
leave the run folder exactly as it was. Mistakes the config catches as it loads run ``forethought.cli.main`` in
this process (the configs import no torch; a case that got past loading would fail); the others, and one per
system in a fresh interpreter, run in processes of their own. The system-specific cases live beside this file
in ``test_bad_inputs_predgen.py``, ``test_bad_inputs_psf.py`` and ``test_bad_inputs_myopia.py``; README lists
the whole matrix.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cli_harness import cli, expect_clean_failure

SYNTH = ["myopia", "synthetic", "--config", "tiny"]


def _case(tmp_path: Path, args: list[str], names: list[str], in_process: bool = True) -> str:
    """``in_process``: the mistake is caught while the config loads (else the case runs in its own process)."""
    runs = tmp_path / "runs"
    return expect_clean_failure([*args, "--run.out_dir", str(runs)], tmp_path, runs, names, in_process=in_process)


@pytest.mark.parametrize("args,names", [
    (["nope"], ["unknown command 'nope'"]),
    (["myopia", "nope"], ["unknown command 'myopia nope'"]),
    ([*SYNTH, "--train.stepz", "3"], ["unknown config key 'train.stepz'", "did you mean 'train.steps'"]),
    ([*SYNTH, "--train.steps", "abc"], ["train.steps", "expects an integer", "abc"]),
    ([*SYNTH, "--train.steps", "-5"], ["train: steps must not be negative", "-5"]),
    ([*SYNTH, "--train.lr", "-1e-3"], ["train: lr must be a positive number"]),
    (["myopia", "synthetic", "--config", "nosuchpreset"], ["neither a YAML file nor a preset", "nosuchpreset"]),
    ([*SYNTH, "--modes", "[bogus]"], ["config key 'modes'", "got 'bogus'"]),
    ([*SYNTH, "--modes", "[vanila]"], ["config key 'modes'", "did you mean 'vanilla'"]),
    ([*SYNTH, "--train.steps"], ["--train.steps", "needs a value"]),
    # the demo's own settings (each system's are checked again when its part starts)
    (["demo", "--systems", "[myopia, psff]"], ["config key 'systems'", "got 'psff'", "did you mean 'psf'"]),
    (["demo", "--synthetic_steps", "0"], ["synthetic_steps must be at least 1", "0"]),
    (["demo", "--lm_steps", "-5"], ["lm_steps must be at least 1", "-5"]),
    (["demo", "--predgen_steps", "0"], ["predgen_steps must be at least 1"]),
    (["demo", "--psf_steps", "1.5"], ["psf_steps", "expects an integer"]),
    (["demo", "--corpus", " "], ["corpus must be 'auto', a corpus name or a .txt file"]),
    (["demo", "--predgen_base", ""], ["predgen_base must name an HF causal LM"]),
])
def test_bad_command_line(tmp_path: Path, args: list[str], names: list[str]) -> None:
    _case(tmp_path, args, names)


def test_unknown_corpus(tmp_path: Path) -> None:
    """Found out when the data loads, not the config."""
    _case(tmp_path, ["myopia", "lm", "--config", "tiny", "--data.corpus", "no-such-corpus"],
          ["corpus", "no-such-corpus"], in_process=False)


def test_bad_yaml_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: {steps: 3\nmodel: [\n")
    line = _case(tmp_path, ["myopia", "synthetic", "--config", str(bad)], ["not valid YAML", "bad.yaml", "line 2"])
    assert "column" in line


def test_yaml_that_is_not_a_mapping(tmp_path: Path) -> None:
    bad = tmp_path / "list.yaml"
    bad.write_text("- 1\n- 2\n")
    _case(tmp_path, ["myopia", "synthetic", "--config", str(bad)], ["must hold a mapping"])


def test_yaml_with_unknown_key_and_wrong_type(tmp_path: Path) -> None:
    typo = tmp_path / "typo.yaml"
    typo.write_text("train: {stepz: 3}\n")
    _case(tmp_path, ["myopia", "synthetic", "--config", str(typo)], ["unknown config key 'train.stepz'"])
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("train: {steps: [1, 2]}\n")
    _case(tmp_path, ["myopia", "synthetic", "--config", str(wrong)], ["train.steps", "expects an integer"])


def test_missing_config_file(tmp_path: Path) -> None:
    _case(tmp_path, ["myopia", "synthetic", "--config", str(tmp_path / "absent.yaml")], ["config file not found"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda(tmp_path: Path) -> None:
    _case(tmp_path, [*SYNTH, "--run.device", "cuda"], ["cuda", "not available"], in_process=False)


def test_unknown_device(tmp_path: Path) -> None:
    _case(tmp_path, [*SYNTH, "--run.device", "tpu"], ["unknown device 'tpu'"], in_process=False)


def test_unknown_hf_model(tmp_path: Path) -> None:
    _case(tmp_path, ["myopia", "lm", "--config", "tiny", "--base", "no-such-org/no-such-model"],
          ["no-such-org/no-such-model"], in_process=False)


def test_in_process_cases_stop_at_the_config(tmp_path: Path) -> None:
    """The in-process runner refuses a call that gets past loading its config, so no case there can pass by
    training (or loading) something."""
    from cli_harness import GotPastConfig, cli_in_process

    with pytest.raises(GotPastConfig, match="myopia synthetic"):
        cli_in_process([*SYNTH, "--train.steps", "1", "--run.out_dir", str(tmp_path / "runs")], tmp_path)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("args,names", [
    ([*SYNTH, "--train.stepz", "3"], ["unknown config key 'train.stepz'"]),
    (["predgen", "train", "--method", "oracle"], ["method", "'predictor'"]),
    (["psf", "recipe", "--config", "tiny", "--model.n_embd", "0"], ["model: n_embd must be at least 1"]),
    (["demo", "--systems", "[myopia, nope]"], ["config key 'systems'", "got 'nope'"]),
])
def test_bad_input_in_a_fresh_interpreter(tmp_path: Path, args: list[str], names: list[str]) -> None:
    """One case per command family as the console script runs it: a new ``python -m forethought.cli``."""
    runs = tmp_path / "runs"
    out = cli([*args, "--run.out_dir", str(runs)], tmp_path, fresh=True)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr[-3000:]
    assert all(n.lower() in lines[0].lower() for n in names), lines
    assert not runs.exists()
