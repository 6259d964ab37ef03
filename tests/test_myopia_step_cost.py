"""``forethought myopia step-cost``: tiny models of every kind through the real CLI (interleaved timing, the
attention form each variant dispatches to, the naive estimate), the GPU check's flags, and bad input refused in one
line before any model builds."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from forethought.cli import check_command, main

QUICK = ["myopia", "step-cost", "--config", "quick", "--run.device", "cpu", "--steps", "2", "--warmup", "1"]


def _run(tmp_path: Path, *extra: str) -> dict:
    assert main([*QUICK, "--run.out_dir", str(tmp_path), "--run.name", "sc", *extra]) == 0
    return json.loads((tmp_path / "sc" / "results.json").read_text())


def test_every_model_times_vanilla_against_its_myopic_copy(tmp_path: Path) -> None:
    res = _run(tmp_path)
    assert res["precision"] == "fp32" and res["device"] == "cpu"
    for key in ("gpt", "smollm2", "pythia"):
        r = res[key]
        assert r["steps"] == 2 and len(r["variants"]["vanilla"]["step_times_s"]) == 2
        assert all(math.isfinite(r[k]) and r[k] > 0 for k in ("ratio", "fwd_bwd_ratio", "vanilla_median_s",
                                                               "myopic_median_s"))
        assert r["ratio"] == pytest.approx(r["myopic_median_s"] / r["vanilla_median_s"])
        # the naive form: one backward per position, about seq_len vanilla steps
        assert res["naive_estimate"][key]["factor_vs_vanilla"] == r["seq_len"] == 32
        assert r["naive_step_estimate_s"] == pytest.approx(32 * r["vanilla_median_s"])
        first = {k: v["first_step_loss"] for k, v in r["variants"].items()}
        assert first["myopic"] == pytest.approx(first["vanilla"], rel=1e-5)  # same weights, same forward
    # the myopic GPT runs the one-pass form in both layers, the reference variant the explicit one
    assert res["gpt"]["attention_calls_per_forward"] == {"myopic": {"fast": 2, "reference": 0},
                                                         "reference": {"fast": 0, "reference": 2}}
    assert res["gpt"]["reference_ratio"] > 0 and res["gpt"]["params"] > 0
    assert res["smollm2"]["config"]["model_type"] == "llama"
    assert res["pythia"]["config"]["model_type"] == "gpt_neox"
    assert res["pythia"]["attention_calls_per_forward"]["myopic"] == {"fast": 2, "reference": 0}


def test_the_gpu_checks_flags_parse_and_bf16_records_its_precision(tmp_path: Path) -> None:
    """The GPU check's command (device and shapes aside) and the keys it reads from results.json."""
    check_command(("myopia", "step-cost", "--models", "[smollm2]", "--run.device", "cpu", "--run.precision", "bf16",
                   "--hf_model", "smollm2-shape", "--hf_batch", "16", "--hf_seq_len", "512", "--steps", "20",
                   "--warmup", "3", "--run.out_dir", str(tmp_path), "--run.name", "gpu"))
    res = _run(tmp_path, "--models", "[smollm2]", "--run.precision", "bf16")
    assert res["precision"] == "bf16" and set(res) >= {"smollm2", "naive_estimate"} and "gpt" not in res
    r = res["smollm2"]
    assert {"ratio", "fwd_bwd_ratio", "vanilla_median_s", "myopic_median_s", "batch_size", "seq_len", "steps",
            "params"} <= set(r)
    assert r["config"]["model"].startswith("random init Llama") and r["config"]["precision"] == "bf16"


@pytest.mark.parametrize("flags,message", [
    (["--models", "[bert]"], "must be one of 'gpt', 'smollm2', 'pythia'"),
    (["--models", "[gpt,gpt]"], "at most once"),
    (["--run.precision", "fp16"], "fp16 is not timed here"),
    (["--gpt_seq_len", "2000"], "must be <= gpt.n_positions"),
    (["--steps", "0"], "steps must be at least 1"),
    (["--hf_seq_len", "1"], "hf_seq_len must be at least 2"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture, flags: list[str],
                                                  message: str) -> None:
    assert main(["myopia", "step-cost", "--run.out_dir", str(tmp_path), "--run.name", "bad", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "bad").exists()
