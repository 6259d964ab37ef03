"""Smoke test of the benchmark scripts: ``benchmarks/myopia_step_cost.py --quick`` runs and writes its JSON."""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench(name: str) -> Any:
    """A benchmark script (``benchmarks/<name>.py``) imported as a module, without running its main()."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_myopia_step_cost_quick(tmp_path: Path) -> None:
    out = tmp_path / "x.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "myopia_step_cost.py"), "--quick", "--out",
                           str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    for key in ("gpt", "smollm2"):
        ratio = res[key]["ratio"]
        assert isinstance(ratio, (int, float)) and ratio > 0
        assert res[key]["steps"] >= 3 and res[key]["vanilla_median_s"] > 0 and res[key]["myopic_median_s"] > 0
        assert res[key]["attention_calls_per_forward"]["myopic"]["fast"] > 0
    assert res["gpt"]["reference_ratio"] > 0
    first = {k: v["first_step_loss"] for k, v in res["gpt"]["variants"].items()}
    assert first["myopic"] == pytest.approx(first["vanilla"], rel=1e-5)  # same weights, same forward
    assert res["machine"]["machine"]["torch_threads"] >= 1 and res["wall_s"] > 0


def test_predgen_curves_collect_pairs_the_methods(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The curves benchmark's collection from finished run folders: every method's curve and final accuracy,
    and paired statistics computed from the runs' predictions on the same examples."""
    mod = _bench("predgen_curves")
    monkeypatch.setattr(mod, "RUNS", tmp_path / "runs")
    monkeypatch.setattr(mod, "OUT", tmp_path / "out")
    monkeypatch.setattr(mod, "ARCHIVE", tmp_path / "out" / "runs" / "predgen_curves")
    targets = ["positive", "negative"] * 10
    right = {"predictor": range(10), "generator": range(14), "predgen": range(4, 20)}  # examples each gets right
    for m, good in right.items():
        run = tmp_path / "runs" / f"sst2-{m}-s0"
        run.mkdir(parents=True)
        flip = {"positive": "negative", "negative": "positive"}
        rows = [{"id": f"e{i}", "target": t, "prediction": t if i in good else flip[t],
                 "decoded": t if i < 12 else flip[t]} for i, t in enumerate(targets)]
        (run / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        acc = len(good) / 20
        (run / "results.json").write_text(json.dumps({
            "accuracy": acc, "macro_f1": acc, "eval_examples": 20, "train_examples": 100, "steps": 4,
            "batch_size": 2, "train_wall_s": 1.0, "learning_curve": [
                {"examples_seen": 4, "accuracy": 0.5, **({"decoded_accuracy": 0.55} if m == "predgen" else {})},
                {"examples_seen": 8, "accuracy": acc, **({"decoded_accuracy": 0.6} if m == "predgen" else {})}]}))
        (run / "env.json").write_text(json.dumps({"command": f"train {m}", "started": "2026-12-01T10:00:00"}))
    args = argparse.Namespace(threads=2, seed=0, lr=5e-4, batch_size=2, examples=8, eval_every=4)
    mod.collect("python benchmarks/predgen_curves.py", args)
    res = json.loads((tmp_path / "out" / "predgen_curves.json").read_text())
    task = res["tasks"]["sst2"]
    assert task["methods"]["generator"]["accuracy"] == 0.7 and len(task["methods"]["predgen"]["curve"]) == 2
    d = task["paired"]["predgen_minus_predictor"]  # predgen right on 4-19, predictor on 0-9
    assert d["difference"] == pytest.approx(0.3) and d["mcnemar"]["b"] == 10 and d["mcnemar"]["c"] == 4
    assert d["ci95"][0] < 0.3 < d["ci95"][1]
    own = task["paired"]["predgen_adapter_minus_its_decoded"]  # adapter right on 4-19, decoded on 0-11
    assert own["mcnemar"]["b"] == 8 and own["mcnemar"]["c"] == 4
    written = task["paired"]["predgen_decoded_minus_generator"]  # decoded right on 0-11, generator on 0-13
    assert written["difference"] == pytest.approx(-0.1) and (written["mcnemar"]["b"], written["mcnemar"]["c"]) == (0, 2)
    assert [c.get("decoded_accuracy") for c in task["methods"]["predgen"]["curve"]] == [0.55, 0.6]
    assert "decoded_accuracy" not in task["methods"]["generator"]["curve"][0]
    assert (tmp_path / "out" / "predgen_curves.png").stat().st_size > 0
    # a later session on a fresh machine has no run folders: the committed archive gives the same JSON
    import shutil

    shutil.rmtree(tmp_path / "runs")
    mod.collect("python benchmarks/predgen_curves.py", args)
    again = json.loads((tmp_path / "out" / "predgen_curves.json").read_text())
    assert again["tasks"] == res["tasks"] and sorted(p.name for p in (tmp_path / "out" / "runs" /
                                                                     "predgen_curves").iterdir()) == [
        "sst2-generator-s0.json", "sst2-predgen-s0.json", "sst2-predictor-s0.json"]


def test_gradient_summary_takes_late_medians() -> None:
    """WDAL's pull on each part in the tasks benchmark: medians over the second half of the logged steps."""
    from forethought.experiments import gradient_summary

    log = [{"step": s, "loss": 1.0, "l_w": 0.1 * s, "l_d": 1.0, "grad_norm_writer": 2.0, "grad_norm_head": float(s)}
           for s in (10, 20, 30, 40, 50, 60)]
    g = gradient_summary(log)
    assert g["logged_steps"] == 3  # steps 40, 50, 60 are past half of 60
    assert g["l_w"] == pytest.approx(5.0) and g["grad_norm_head"] == 50.0 and g["head_over_writer"] == 25.0
    assert gradient_summary([{"step": 10, "loss": 1.0}]) is None  # no gradient norms logged
    assert "grad_norm_head" not in gradient_summary([{"step": 10, "grad_norm_writer": 1.0}])  # the generator


def test_run_archive_is_not_ignored_by_git() -> None:
    """Finished runs' records must reach the repository (a fresh machine has no runs/ folder)."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    for path in ("benchmarks/results/runs/predgen_curves/x.json", "benchmarks/results/runs/predgen_tasks/x.json"):
        assert subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT).returncode == 1, path
    assert subprocess.run(["git", "check-ignore", "-q", "runs/x"], cwd=ROOT).returncode == 0  # run folders stay out


def test_run_queue_calls_on_done_after_each_success(tmp_path: Path) -> None:
    from forethought.experiments.jobs import run_queue_or_exit as run_queue

    done: list[str] = []
    jobs = [(n, [sys.executable, "-c", "import os; print(os.environ['OMP_NUM_THREADS'])"]) for n in ("a", "b")]
    run_queue(jobs, 1, tmp_path, tmp_path, threads=3, on_done=done.append)
    assert done == ["a", "b"] and (tmp_path / "a.log").read_text().strip() == "3"
    with pytest.raises(SystemExit, match="c failed"):
        run_queue([("c", [sys.executable, "-c", "raise SystemExit(1)"])], 1, tmp_path, tmp_path, on_done=done.append)
    assert done == ["a", "b"]


def test_predgen_tasks_plan_runs_ablations_on_ablation_seeds_only() -> None:
    mod = _bench("predgen_tasks")
    names = [n for n, _ in mod.plan(argparse.Namespace(seeds=[0, 1], ablation_seeds=[0], tasks=["arc-easy", "stsb"],
                                                       lr=2e-4, overrides=[]))]
    assert "arc-easy-predgen-wdal-sum-s0" in names and "arc-easy-predgen-wdal-reference-s0" in names
    assert not [n for n in names if ("wdal" in n or "lr10" in n or "letter" in n) and n.endswith("-s1")]
    assert "stsb-predgen-lr5e-4-s1" in names and "stsb-predgen-s1" not in names  # STS-B compares at 5e-4
    assert names.index("stsb-predgen-s0") < names.index("arc-easy-predictor-s1")  # seed-major
    assert len(names) == 14 + 6
    cmd = dict(mod.plan(argparse.Namespace(seeds=[0], ablation_seeds=[0], tasks=["stsb"], lr=2e-4,
                                           overrides=[])))["stsb-predgen-lr5e-4-s0"]
    assert cmd[len(cmd) - 1 - cmd[::-1].index("--train.lr") + 1] == "5e-4"  # the last --train.lr wins


def test_predgen_tasks_collect_pairs_adapter_and_decoded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tasks benchmark's collection from archived records alone: per-variant accuracy, the paired comparisons
    of PredGen's adapter and of its decoded answer, and only the seeds that finished."""
    mod = _bench("predgen_tasks")
    monkeypatch.setattr(mod, "RUNS", tmp_path / "runs")
    monkeypatch.setattr(mod, "OUT", tmp_path / "out")
    archive = tmp_path / "out" / "runs" / "predgen_tasks"
    monkeypatch.setattr(mod, "ARCHIVE", archive)
    archive.mkdir(parents=True)
    targets = ["A", "B", "C", "D"] * 5
    right = {"predictor": range(5), "generator": range(10), "predgen": range(2)}  # decoded: right on 0-11
    for v, good in right.items():
        rows = [{"id": f"e{i}", "target": t, "prediction": t if i in good else "Z",
                 "decoded": t if i < 12 else "Z"} for i, t in enumerate(targets)]
        acc = len(good) / 20
        res = {"accuracy": acc, "macro_f1": acc, "train_wall_s": 1.0, "eval_examples": 20, "steps": 2,
               "batch_size": 2, **({"decoded": {"accuracy": 0.6}} if v == "predgen" else {})}
        log = [{"step": 2, "loss": 1.0, "l_w": 0.5, "l_d": 1.2, "grad_norm_writer": 1.0, "grad_norm_head": 2.0}]
        (archive / f"arc-easy-{v}-s0.json").write_text(json.dumps(
            {"results": res, "predictions": rows, "command": v, "started": 0.0, "finished": 1.0,
             "train_log": log if v == "predgen" else [], "torch_threads": 2}))
    mod.collect("python benchmarks/predgen_tasks.py",
                argparse.Namespace(seeds=[0, 1, 2], ablation_seeds=[0], lr=2e-4, threads=2))
    out = json.loads((tmp_path / "out" / "predgen_tasks.json").read_text())
    assert out["seeds"] == [0] and out["seeds_planned"] == [0, 1, 2] and out["machine"]["threads_per_run"] == [2]
    e = out["tasks"]["arc-easy"]
    assert e["methods"]["generator"]["accuracy"] == 0.5 and e["methods"]["generator"]["lr"] is None
    assert mod.command_lr("x --train.lr 0.0002 --method predgen --train.lr 5e-4") == 5e-4
    dec = e["paired"]["predgen_decoded_minus_generator"]
    assert dec["per_seed"]["0"]["difference"] == pytest.approx(0.1)
    assert dec["seed_mean_difference"] == pytest.approx(0.1)
    own = e["paired"]["predgen_minus_predgen_decoded"]["per_seed"]["0"]
    assert own["difference"] == pytest.approx(-0.5) and own["mcnemar"]["b"] == 0 and own["mcnemar"]["c"] == 10
    assert e["methods"]["predgen"]["gradients_per_seed"]["0"]["head_over_writer"] == 2.0
    assert "predgen-wdal-sum_minus_predgen" not in e["paired"]  # not run
