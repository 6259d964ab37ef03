"""Smoke test of ``benchmarks/psf_wikitext.py --preset tiny``: the whole pipeline (two recipes, the AR baseline,
the token flow, sampling sweeps, judge, MAUVE, cost, checks, JSON + PNG) at toy size, with a tiny random judge,
writing to a temporary folder (never to benchmarks/results)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import PreTrainedTokenizerFast

from forethought.data.corpora import generated_corpus
from forethought.data.tokenizers import EOT, train_byte_level_bpe
from forethought.testing import tiny_gpt2

ROOT = Path(__file__).resolve().parents[1]
ROWS = ("psf", "psf_content", "ar", "token_flow", "psf_mean_trajectory")
NUMERIC = ("entropy", "mauve", "flops_per_sample", "flops_per_sample_analytic", "samples_per_s_b1",
           "samples_per_s_b32", "serial_depth", "params", "train_tokens", "train_wall_s")


def _tiny_judge(folder: Path) -> Path:
    backend = train_byte_level_bpe(generated_corpus(20_000, seed=1), 300)
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=EOT, bos_token=EOT, unk_token=EOT,
                                  pad_token=EOT)
    model = tiny_gpt2(vocab_size=len(tok), hidden_size=32, layers=1, heads=2, eos_token_id=tok.eos_token_id)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _load_script(monkeypatch: pytest.MonkeyPatch):
    spec = importlib.util.spec_from_file_location("psf_wikitext", ROOT / "benchmarks" / "psf_wikitext.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_psf_wikitext_tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    judge = _tiny_judge(tmp_path / "judge")
    out = tmp_path / "results" / "psf.json"
    runs = tmp_path / "runs"
    monkeypatch.setenv("FORETHOUGHT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("FORETHOUGHT_DATA", raising=False)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    opts = ["--preset", "tiny", "--runs", str(runs), "--out", str(out), "--jobs", "2", "--threads", "1"]
    script = [sys.executable, str(ROOT / "benchmarks" / "psf_wikitext.py"), *opts]
    # training: the two recipes side by side, then the token flow on the finished AR model's table
    proc = subprocess.run([*script, "--train-only"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in ("psf", "psf_content", "token_flow"):
        assert (runs / name / "results.json").is_file()
    assert (runs / "psf" / "ar" / "results.json").is_file() and not (runs / "psf_content" / "ar").exists()
    # finished runs are skipped
    before = {p: p.stat().st_mtime_ns for p in runs.rglob("model.safetensors")}
    proc = subprocess.run([*script, "--train-only"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.count("finished, skipped") == 3, proc.stdout + proc.stderr

    # evaluation from the finished runs (in this process: one interpreter start less)
    # --prepare samples and judges some models into the cache first; the full evaluation reuses them
    bench = _load_script(monkeypatch)
    ev_opts = ["--eval-threads", "1", "--samples", "6", "--references", "6", "--sweep", "2.0:1.0", "1.0:0.9",
               "--judge", str(judge)]
    bench.main([*opts, "--prepare", "psf", "ar", *ev_opts])
    assert not out.exists() and "prepared psf, ar" in capsys.readouterr().out
    bench.main([*opts, "--collect-only", *ev_opts])
    assert {p: p.stat().st_mtime_ns for p in runs.rglob("model.safetensors")} == before
    assert "| psf |" in capsys.readouterr().out
    res = json.loads(out.read_text())
    hits = set(res["eval_cache_hits"])
    assert {"references judge", "psf-p0 samples", "psf-p1 judge", "ar-p1 samples", "ar-p0 judge"} <= hits
    assert not any(h.startswith(("token_flow", "psf_content")) for h in hits)
    assert len(res["evaluation_walls"]) == 2
    assert (out.parent / "psf_curves.png").is_file()
    for key in ("command", "machine", "wall_s", "settings", "checks"):
        assert key in res
    for name in ("psf", "psf_content"):  # psf diagnose ran before the evaluation, its JSON is inside
        d = res["diagnose"][name]
        assert d["run"].endswith(name) and "ceiling" in d and (runs / name / "diagnose.json").is_file()
        first = next(iter(next(iter(d["shuffle"].values()))["modes"].values()))["first"]  # codes: kept/zeroed
        assert first["interval"][0] <= first["diff"] <= first["interval"][1]
    assert res["settings"]["reference_split"] == "test" and res["settings"]["target_entropy"] > 0
    for row in ROWS:
        r = res[row]
        for k in NUMERIC:
            assert isinstance(r[k], (int, float)) and r[k] >= 0, (row, k, r[k])
        g = r["gen_ppl_at_matched_entropy"]
        assert g is None or g > 0
        assert len(r["sweep"]) == 2
    psf, ar, tf = res["psf"], res["ar"], res["token_flow"]
    # serial depth: prior steps + L/K for PSF (K = 4, L = 32, prior 8 steps), L for AR, 32 for the token flow
    assert psf["serial_depth"] == psf["prior_steps"] + 32 // psf["blocks"] == 8 + 8
    assert res["psf_mean_trajectory"]["serial_depth"] == 8 and ar["serial_depth"] == 32 and tf["serial_depth"] == 32
    # every check's verdict is the one its numbers give (the baselines' sizes are chosen to pass theirs)
    checks = res["checks"]
    x, y = psf["gen_ppl_at_matched_entropy"], res["psf_content"]["gen_ppl_at_matched_entropy"]
    flops_ok = psf["flops_per_sample"] <= tf["flops_per_sample"] / 10
    assert checks["psf_flops_le_tenth_of_token_flow"]["pass"] is flops_ok
    assert checks["psf_beats_content_at_matched_entropy"]["pass"] is (None if x is None or y is None else x < y)
    assert checks["psf_serial_depth_eq_prior_steps_plus_L_over_K"]["pass"] is True
    assert checks["baseline_params_within_20pct_of_psf_encoder_decoder"]["pass"] is True
    assert checks["psf_samples_per_s_b32_above_ar"]["pass"] is (psf["samples_per_s_b32"] > ar["samples_per_s_b32"])
    assert len(checks) == 5
    for row in ("ar", "token_flow"):
        assert abs(res[row]["params_ratio_to_psf_encoder_decoder"] - 1) <= 0.2, row
    assert tf["train_tokens"] == ar["train_tokens"] >= psf["train_tokens"]
    assert res["psf_content"]["states"] == "content" and psf["states"] == "predictive"
    # measured and analytic FLOPs agree to within a factor of 2 (element-wise work is in neither)
    for row in ROWS:
        assert 0.5 < res[row]["flops_per_sample"] / res[row]["flops_per_sample_analytic"] < 2, row


def test_state_only_row_when_the_run_trained_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The psf run's state-only prior (the paper's state-only configuration) is evaluated when it was trained."""
    bench = _load_script(monkeypatch)
    args = bench.parse_args(["--preset", "tiny", "--runs", str(tmp_path)])
    assert bench.state_only_row(args) == [] and "psf_state_only" not in bench.eval_config(args).models
    (tmp_path / "psf" / "prior_state_only").mkdir(parents=True)
    assert bench.eval_config(args).models == ["psf", "psf_mean_trajectory", "ar", "psf_state_only"]
    args = bench.parse_args(["--preset", "tiny", "--runs", str(tmp_path), "--prepare", "ar"])
    assert bench.eval_config(args).models == ["ar"]


def test_compared_recipe_runs_are_diagnosed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compared recipe run (say, a longer codes stage) gets psf diagnose beside psf and psf_content; a compared
    token flow run does not (it has no stages to diagnose)."""
    bench = _load_script(monkeypatch)
    recipe, flow = tmp_path / "longer_codes", tmp_path / "other_flow"
    for d, res in ((recipe, {"stages": {"base": {}}}), (flow, {"params": 1})):
        d.mkdir()
        (d / "results.json").write_text(json.dumps(res))
    args = bench.parse_args(["--preset", "tiny", "--runs", str(tmp_path / "runs"), "--compare-runs", str(recipe),
                             str(flow)])
    assert bench.diagnosed_runs(args) == {"psf": tmp_path / "runs" / "psf",
                                          "psf_content": tmp_path / "runs" / "psf_content", "longer_codes": recipe}
