"""Benchmark: the synthetic pre-caching task, vanilla vs myopic, normalised loss per p and probe R².

Runs ``forethought myopia synthetic --config small`` once per (p, model, seed) as parallel single-threaded
processes (2 cores -> two models at a time), the same architecture, budget and seeds for both models, then
collects every finished run folder into ``benchmarks/results/myopia_synthetic.json`` (means, per-seed values
and their spread) with the loss curves and probe heat maps next to it. Resumable: rerunning continues
unfinished runs and skips finished ones, so the seeds may be trained over several invocations.

    python benchmarks/myopia_synthetic.py [--seeds 0 1 2] [--steps-p1 5000] [--steps-other 5000] [--jobs 2]
    python benchmarks/myopia_synthetic.py --p 0.1 --seeds 0        # the p = 0.1 row, one seed (resumable)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _jobs import run_queue  # noqa: E402
from _stats import invocations, run_started  # noqa: E402

from forethought.eval.stats import t_interval  # noqa: E402

OUT = ROOT / "benchmarks" / "results"
RUNS = ROOT / "runs" / "bench-myopia-synthetic"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps-p1", type=int, default=5000, help="training steps at p = 1")
    ap.add_argument("--steps-other", type=int, default=5000,
                    help="training steps at the other p values (the same budget as p = 1 by default)")
    ap.add_argument("--p", type=float, nargs="+", default=[1.0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--eval-every", type=int, default=250, help="held-out normalised loss every N steps (curve)")
    ap.add_argument("--jobs", type=int, default=2, help="parallel single-threaded processes")
    ap.add_argument("--collect-only", action="store_true", help="only assemble the JSON from finished runs")
    args = ap.parse_args()
    # seed-major order: with two jobs at a time, vanilla and myopic of one seed train side by side
    jobs = [(p, mode, seed) for seed in args.seeds for p in args.p for mode in ("vanilla", "detach_hidden")]
    if not args.collect_only:
        queue = []
        for p, mode, seed in jobs:
            steps = args.steps_p1 if p == 1.0 else args.steps_other
            name = f"p={p:g}-{mode}-s{seed}"
            queue.append((f"bench-myopia-synthetic-{name}",
                          [sys.executable, "-m", "forethought.cli", "myopia", "synthetic", "--config", "small",
                           "--run.out_dir", str(RUNS), "--run.name", name, "--run.seed", str(seed),
                           "--p_values", f"[{p}]", "--modes", f"[{mode}]", "--train.steps", str(steps),
                           "--train.eval_every", str(args.eval_every), "--resume", "auto"]))
        RUNS.mkdir(parents=True, exist_ok=True)
        run_queue(queue, args.jobs, RUNS.parent, ROOT)
    collect(" ".join(["python", *sys.argv]))


def collect(command: str) -> None:
    """Assemble every finished (p, model) run under RUNS, whichever invocation trained it. The runs are resumable
    and may span several invocations of this script: all of them are listed in ``command``, and ``wall_s`` spans
    from the first run's start to now."""
    seen = invocations(RUNS, command)
    import statistics

    found = []  # (p, mode, seed) of every run folder, whichever invocation made it
    for d in RUNS.glob("p=*-*-s*"):
        p_text, rest = d.name.split("-", 1)
        mode, seed_text = rest.rsplit("-s", 1)
        found.append((float(p_text[2:]), mode, int(seed_text)))
    found.sort(key=lambda j: (-j[0], j[2], j[1] != "vanilla"))
    starts = [t for p, mode, seed in found if (t := run_started(RUNS / f"p={p:g}-{mode}-s{seed}")) is not None]
    res: dict = {"command": " ; ".join(seen), "wall_s": time.time() - min(starts) if starts else 0.0,
                 "run_commands": {},
                 "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                             "threads_per_run": 1, "parallel_runs": 2},
                 "metric": "mean Huber loss (delta=1) over 64 positions / p, 16384 fresh sequences",
                 "probe": "ridge R² of sin(10·x_(n-lag)), best layer (0 = embedding), positions n >= 20",
                 "model": "configs/myopia/synthetic_small.yaml (its model section is copied per run below)",
                 "curves": {}, "eval_curves": {}, "probe_r2_by_layer": {}}
    train_wall = 0.0
    per: dict = {}
    for p, mode, seed in found:
        run_dir = RUNS / f"p={p:g}-{mode}-s{seed}"
        rfile = run_dir / "results.json"
        if not rfile.is_file():
            print(f"missing {rfile}; skipped (unfinished)")
            continue
        r = json.loads(rfile.read_text())
        name = "vanilla" if mode == "vanilla" else "myopic"
        key, tag = f"p={p:g}", f"p={p:g}/{name}/seed{seed}"
        res["run_commands"][tag] = json.loads((run_dir / "env.json").read_text())["command"]
        row = r[key]
        m = row[mode]
        best = [max(layer[i] for layer in m["probe_r2"]) for i in range(len(m["probe_r2"][0]))]
        entry = per.setdefault(key, {}).setdefault(name, {"seeds": [], "loss": [], "steps": [], "wall": [],
                                                          "r2_lag0": [], "r2_lag1": [], "r2_best_lag0_10": []})
        entry["seeds"].append(seed)
        entry["loss"].append(m["normalised_loss"])
        entry["steps"].append(m["steps"])
        entry["wall"].append(m["train_wall_s"])
        entry["r2_lag0"].append(best[0])
        entry["r2_lag1"].append(best[1])
        entry["r2_best_lag0_10"].append(max(best[:11]))
        res.setdefault(key, {})["predict_zero"] = row["predict_zero"]
        res[key][f"{name}_batch_size"] = r["batch_size"]
        res["curves"][tag] = m["curve"]
        if m.get("eval_curve"):
            res["eval_curves"][tag] = [(e["step"], e["normalised_loss"]) for e in m["eval_curve"]]
        res["probe_r2_by_layer"][tag] = m["probe_r2"]
        if "model_config" not in res:
            import yaml

            res["model_config"] = yaml.safe_load((run_dir / "config.yaml").read_text())["model"]
        train_wall += m["train_wall_s"]
    for key, models in per.items():
        res[key]["per_seed"] = {}
        for name, e in models.items():
            sd = statistics.stdev(e["loss"]) if len(e["loss"]) > 1 else None
            res[key][name] = statistics.fmean(e["loss"])  # the mean over seeds (a number, as before)
            res[key][f"{name}_std"] = sd
            res[key][f"{name}_seeds"] = e["seeds"]
            res[key][f"{name}_steps"] = e["steps"][0]
            res[key][f"{name}_train_wall_s"] = statistics.fmean(e["wall"])
            res[key][f"{name}_probe_r2_lag0"] = statistics.fmean(e["r2_lag0"])
            res[key][f"{name}_probe_r2_lag1"] = statistics.fmean(e["r2_lag1"])
            res[key][f"{name}_probe_r2_best_lag0_10"] = statistics.fmean(e["r2_best_lag0_10"])
            res[key]["per_seed"][name] = dict(zip(map(str, e["seeds"]), e["loss"]))
        both = sorted(set(models.get("vanilla", {}).get("seeds", [])) & set(models.get("myopic", {}).get("seeds", [])))
        if both:  # paired by seed: the same data stream and initialisation for both models
            v = dict(zip(models["vanilla"]["seeds"], models["vanilla"]["loss"]))
            mm = dict(zip(models["myopic"]["seeds"], models["myopic"]["loss"]))
            diffs = [mm[s] - v[s] for s in both]
            res[key]["myopic_minus_vanilla"] = {"seeds": both, "per_seed": diffs, "mean": statistics.fmean(diffs),
                                                "std": statistics.stdev(diffs) if len(diffs) > 1 else None,
                                                "ci95_of_mean": t_interval(diffs)}
    res["train_wall_s_total"] = train_wall
    _plots(res)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "myopia_synthetic.json").write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps({k: v for k, v in res.items() if k.startswith("p=")}, indent=2))


def _plots(res: dict) -> None:
    sys.path.insert(0, str(ROOT / "src"))
    from forethought.core.plots import heatmaps, line_plot

    curves = {k: tuple(zip(*v)) for k, v in (res["eval_curves"] or res["curves"]).items() if v}
    if curves:
        what = "held-out normalised loss" if res["eval_curves"] else "training Huber loss / p"
        line_plot(curves, OUT / "myopia_synthetic_curves.png", title=f"synthetic task: {what}",
                  xlabel="step", ylabel="loss / p")
    panels = {k: v for k, v in res["probe_r2_by_layer"].items() if k.startswith("p=1/") and k.endswith("/seed0")}
    if panels:
        heatmaps(panels, OUT / "myopia_synthetic_probe_r2.png", title="ridge probe R² of sin(10·x_(n−lag)), p=1",
                 xlabel="lag", ylabel="layer (0 = embedding)")


if __name__ == "__main__":
    main()
