"""The bad-input matrix, shared part: the real CLI in a subprocess, for mistakes any command can receive.

Every case must exit with status 2, print one line on stderr that names the problem, print no traceback, and
leave the run folder exactly as it was. The system-specific cases live beside this file in
``test_bad_inputs_predgen.py``, ``test_bad_inputs_psf.py`` and ``test_bad_inputs_myopia.py``; README lists the
whole matrix.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cli_harness import expect_clean_failure

SYNTH = ["myopia", "synthetic", "--config", "tiny"]


def _case(tmp_path: Path, args: list[str], names: list[str]) -> str:
    runs = tmp_path / "runs"
    return expect_clean_failure([*args, "--run.out_dir", str(runs)], tmp_path, runs, names)


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
    (["myopia", "lm", "--config", "tiny", "--data.corpus", "no-such-corpus"], ["corpus", "no-such-corpus"]),
    ([*SYNTH, "--train.steps"], ["--train.steps", "needs a value"]),
])
def test_bad_command_line(tmp_path: Path, args: list[str], names: list[str]) -> None:
    _case(tmp_path, args, names)


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
    _case(tmp_path, [*SYNTH, "--run.device", "cuda"], ["cuda", "not available"])


def test_unknown_device(tmp_path: Path) -> None:
    _case(tmp_path, [*SYNTH, "--run.device", "tpu"], ["unknown device 'tpu'"])


def test_unknown_hf_model(tmp_path: Path) -> None:
    _case(tmp_path, ["myopia", "lm", "--config", "tiny", "--base", "no-such-org/no-such-model"],
          ["no-such-org/no-such-model"])
