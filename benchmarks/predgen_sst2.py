"""Benchmark: SST-2 dev accuracy of Predictor, Generator and PredGen (SmolLM2-135M + LoRA), seeds fixed in advance.

Every run uses the preset ``configs/predgen/train_small.yaml`` (the same adapter, examples, order and steps for
all three methods) and runs as its own ``forethought predgen train`` process, ``--jobs`` at a time with one
thread each; each is resumable, so rerunning the script continues where it stopped. Then the run folders are
collected into ``benchmarks/results/predgen_sst2.json`` (mean, std and per-seed accuracy per method, PredGen −
Predictor with its standard error, wall times, the commands and the machine) and a bar plot.

    python benchmarks/predgen_sst2.py [--seeds 0 1 2] [--jobs 2] [--collect-only] [-- extra overrides]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

from forethought.experiments import invocations
from forethought.experiments.jobs import run_queue_or_exit as run_queue

ROOT = Path(__file__).resolve().parents[1]

OUT = ROOT / "benchmarks" / "results"
RUNS = ROOT / "runs" / "bench-predgen-sst2"
METHODS = ("predictor", "generator", "predgen")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    ap.add_argument("--jobs", type=int, default=2, help="parallel single-threaded runs")
    ap.add_argument("--collect-only", action="store_true", help="only assemble the JSON from finished runs")
    ap.add_argument("overrides", nargs="*", help="extra config overrides for every run (after --)")
    args = ap.parse_args()
    if not args.collect_only:
        jobs = [(f"{m}-s{s}", [sys.executable, "-m", "forethought.cli", "predgen", "train", "--config", "small",
                                "--method", m, "--run.seed", str(s), "--run.out_dir", str(RUNS), "--run.name",
                                f"{m}-s{s}", "--resume", "auto", *args.overrides])
                for s in args.seeds for m in args.methods  # seed-major: partial results stay balanced
                if not (RUNS / f"{m}-s{s}" / "results.json").is_file()]
        run_queue(jobs, args.jobs, RUNS, ROOT)
    collect(" ".join(["python", *sys.argv]), args.seeds)


def _mean_std(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, sd


def collect(command: str, seeds: list[int]) -> None:
    seen = invocations(RUNS, command)
    res: dict = {"command": " ; ".join(seen), "task": "sst2 (dev, 872 examples)", "base": "smollm2-135m",
                 "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "threads_per_run": 1,
                             "parallel_runs": 2},
                 "seeds": seeds, "anchor_reference_code_smollm_135m": {"predictor": 0.869, "generator": 0.905,
                                                                       "predgen": 0.908},
                 "runs": {}}
    for method in METHODS:
        accs, f1s, walls, rows = [], [], [], {}
        for seed in seeds:
            f = RUNS / f"{method}-s{seed}" / "results.json"
            if not f.is_file():
                continue
            r = json.loads(f.read_text())
            env = json.loads((f.parent / "env.json").read_text())
            accs.append(r["accuracy"])
            f1s.append(r["macro_f1"])
            walls.append(r["train_wall_s"])
            rows[str(seed)] = {k: r.get(k) for k in ("accuracy", "macro_f1", "decoded", "parse_failure_rate",
                                                      "train_wall_s", "examples_per_s", "latency_ms", "steps",
                                                      "batch_size", "trainable_params", "final_loss")}
            rows[str(seed)]["command"] = env["command"]
        if not accs:
            continue
        mean, std = _mean_std(accs)
        res[method] = {"accuracy": mean, "std": std, "per_seed": accs, "macro_f1": _mean_std(f1s)[0],
                       "train_wall_s_mean": sum(walls) / len(walls), "seeds_done": len(accs)}
        res["runs"][method] = rows
        first = next(iter(rows.values()))
        res.setdefault("budget", {"steps": first["steps"], "batch_size": first["batch_size"],
                                  "train_examples_seen": first["steps"] * first["batch_size"]})
    if "predgen" in res and "predictor" in res:
        pg, pr = res["runs"]["predgen"], res["runs"]["predictor"]
        diffs = [pg[s]["accuracy"] - pr[s]["accuracy"] for s in pg if s in pr]
        if diffs:
            m, sd = _mean_std(diffs)
            res["predgen_minus_predictor"] = {"mean": m, "stderr": sd / math.sqrt(len(diffs)), "per_seed": diffs}
    # Wall time of the whole benchmark: first run's start to the last results file (runs may span invocations).
    starts, ends = [], []
    for d in RUNS.glob("*-s*"):
        if (d / "env.json").is_file() and (d / "results.json").is_file():
            started = json.loads((d / "env.json").read_text())["started"][:19]
            starts.append(time.mktime(time.strptime(started, "%Y-%m-%dT%H:%M:%S")))
            ends.append((d / "results.json").stat().st_mtime)
    res["wall_s"] = max(ends) - min(starts) if starts else None
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "predgen_sst2.json").write_text(json.dumps(res, indent=2) + "\n")
    _plot(res)
    print(json.dumps({m: res[m] for m in METHODS if m in res}, indent=2))


def _plot(res: dict) -> None:
    from forethought.core.plots import bar_plot

    bars = {m: (res[m]["accuracy"], res[m]["std"]) for m in METHODS if m in res}
    if bars:
        bar_plot(bars, OUT / "predgen_sst2.png", title="SST-2 dev accuracy, SmolLM2-135M + LoRA (mean ± std)",
                 ylabel="accuracy", reference={m: v for m, v in res["anchor_reference_code_smollm_135m"].items()})


if __name__ == "__main__":
    main()
