"""Benchmark: the pre-caching gradient on the synthetic task and on WikiText-2 (``forethought myopia gradients``).

Trains a vanilla model per experiment (the synthetic and LM benchmarks' small settings, seed 0; two
single-threaded processes side by side) and every ``eval_every`` steps measures, on 4 fixed batches, the vanilla
gradient g and the myopic gradient g_m of the same weights: per layer and overall ‖g − g_m‖/‖g‖ (the share of
the gradient that shapes earlier positions for later losses) and cos(g, g_m). Writes
``benchmarks/results/myopia_gradients.json`` + ``.png``. Since the measurements fork the RNG, each vanilla model
trains exactly as the seed-0 vanilla model of the myopia_synthetic / myopia_lm experiment specs; where those runs are
on disk the JSON records the largest difference between the training-loss curves (0 = the same run).
Resumable. Needs FORETHOUGHT_DATA (a data root with wikitext-2/).

    FORETHOUGHT_DATA=../shared/data python benchmarks/myopia_gradients.py [--experiments synthetic lm]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from forethought.core.io import read_jsonl
from forethought.experiments.jobs import run_queue_or_exit as run_queue

ROOT = Path(__file__).resolve().parents[1]

OUT = ROOT / "benchmarks" / "results"
RUNS = ROOT / "runs" / "bench-myopia-gradients"
SAME_RUN = {"synthetic": ROOT / "runs" / "bench-myopia-synthetic" / "p=1-vanilla-s0" / "p=1" / "vanilla",
            "lm": ROOT / "runs" / "bench-myopia-lm" / "s0-a" / "vanilla"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experiments", nargs="+", default=["synthetic", "lm"], choices=["synthetic", "lm"])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--collect-only", action="store_true")
    args = ap.parse_args()
    if "lm" in args.experiments and not os.environ.get("FORETHOUGHT_DATA"):
        sys.exit("set FORETHOUGHT_DATA to a data root with wikitext-2/ (e.g. ../shared/data)")
    t0 = time.time()
    if not args.collect_only:
        queue = [(f"bench-myopia-gradients-{e}",
                  [sys.executable, "-m", "forethought.cli", "myopia", "gradients", "--config", e, "--run.out_dir",
                   str(RUNS), "--run.name", e, "--resume", "auto"]) for e in args.experiments]
        run_queue(queue, args.jobs, RUNS.parent, ROOT)
    res: dict = {"command": " ".join(["python", *sys.argv]), "wall_s": time.time() - t0,
                 "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "threads_per_run": 1,
                             "parallel_runs": args.jobs},
                 "what": "rel_diff = ||g - g_m|| / ||g||, cos = cos(g, g_m); g the vanilla gradient, g_m the "
                         "detach_hidden gradient of the same weights on the same 4 fixed batches",
                 "experiments": {}}
    for e in ("synthetic", "lm"):
        rfile = RUNS / e / "results.json"
        if not rfile.is_file():
            continue
        r = json.loads(rfile.read_text())
        rows = r["measurements"]
        groups = list(r["groups"])
        summary = {}
        for key in [*groups, "all"]:
            rel = [x[f"{key}/rel_diff"] for x in rows]
            cos = [x[f"{key}/cos"] for x in rows]
            summary[key] = {"rel_diff_first": rel[0], "rel_diff_max": max(rel),
                            "rel_diff_step_of_max": rows[rel.index(max(rel))]["step"], "rel_diff_last": rel[-1],
                            "rel_diff_mean": statistics.fmean(rel), "cos_last": cos[-1], "cos_min": min(cos)}
        entry = {"config": f"configs/myopia/gradients_{e}.yaml", "run_command": json.loads(
                     (RUNS / e / "env.json").read_text())["command"],
                 "steps": r["steps"], "batch_size": r["batch_size"], "params": r["params"],
                 "train_wall_s": r["train_wall_s"], "summary": summary, "measurements": rows}
        other = SAME_RUN[e] / "metrics.jsonl"
        if other.is_file():
            mine = {x["step"]: x["loss"] for x in read_jsonl(RUNS / e / "metrics.jsonl") if "loss" in x}
            theirs = {x["step"]: x["loss"] for x in read_jsonl(other) if "loss" in x}
            common = sorted(set(mine) & set(theirs))
            entry["same_training_as"] = {"run": str(other.parent.relative_to(ROOT)), "steps_compared": len(common),
                                         "max_abs_loss_difference": max(abs(mine[s] - theirs[s]) for s in common)
                                         if common else None}
        res["experiments"][e] = entry
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "myopia_gradients.json").write_text(json.dumps(res, indent=2) + "\n")
    _plot(res)
    for e, x in res["experiments"].items():
        print(e, json.dumps({k: {kk: round(vv, 3) if isinstance(vv, float) else vv for kk, vv in v.items()}
                             for k, v in x["summary"].items()}, indent=1))


def _plot(res: dict) -> None:
    from forethought.core.plots import pyplot, save_figure

    exps = list(res["experiments"].items())
    if not exps:
        return
    plt = pyplot()
    fig, axes = plt.subplots(len(exps), 3, figsize=(15, 3.8 * len(exps)), squeeze=False)
    for row, (e, x) in zip(axes, exps):
        rows = x["measurements"]
        steps = [r["step"] for r in rows]
        for key in x["summary"]:
            style = {"color": "k", "lw": 2} if key == "all" else {}
            row[0].plot(steps, [r[f"{key}/rel_diff"] for r in rows], label=key, **style)
            row[1].plot(steps, [r[f"{key}/cos"] for r in rows], label=key, **style)
        loss_key = "normalised_loss" if e == "synthetic" else "val_loss"
        row[2].plot(steps, [r[loss_key] for r in rows], color="C3")
        row[0].set(title=f"{e}: ‖g − g_myopic‖ / ‖g‖", xlabel="step")
        row[1].set(title=f"{e}: cos(g, g_myopic)", xlabel="step")
        row[2].set(title=f"{e}: held-out {loss_key}", xlabel="step")
        row[0].legend(fontsize=8)
        for a in row:
            a.grid(alpha=0.3)
    save_figure(fig, OUT / "myopia_gradients.png")


if __name__ == "__main__":
    main()
