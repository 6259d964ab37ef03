"""Benchmark: the synthetic pre-caching task, vanilla vs myopic, normalised loss per p and probe R².

Runs ``forethought myopia synthetic --config small`` once per (p, model, seed) as parallel single-threaded
processes (2 cores -> two models at a time), the same architecture, budget and seeds for both models, then
collects every finished run folder into ``benchmarks/results/myopia_synthetic.json`` (means, per-seed values
and their spread) with the loss curves and probe heat maps next to it. Resumable: rerunning continues
unfinished runs and skips finished ones, so the seeds may be trained over several invocations.

    python benchmarks/myopia_synthetic.py [--seeds 0 1 2] [--steps-p1 5000] [--steps-other 5000] [--jobs 2]
    python benchmarks/myopia_synthetic.py --p 0.1 --seeds 0        # the p = 0.1 row, one seed (resumable)
    python benchmarks/myopia_synthetic.py --grid paper --seeds 0 1  # the paper's p grid, both models
    python benchmarks/myopia_synthetic.py --grid paper --seeds 0 --tag reference \
        --set --model.init reference --model.final_norm true      # the paper's model, its own runs and JSON
    python benchmarks/myopia_synthetic.py --quick --runs /tmp/r --out /tmp/o   # tiny smoke (seconds per run)

``--grid paper`` = p ∈ {1, 0.3, 0.1, 0.01} for vanilla and myopic (the paper trains vanilla also at 0.001). Every
row carries the paper's myopic normalised loss beside ours (``paper``). ``--tag`` keeps a variant's runs and JSON
apart (runs/bench-myopia-synthetic-<tag>/, results/myopia_synthetic_<tag>.json); ``--set`` passes the remaining
arguments to every run as config overrides.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

from forethought.experiments import finished_runs, invocations, seed_paired, span_s
from forethought.experiments.jobs import run_queue_or_exit as run_queue

ROOT = Path(__file__).resolve().parents[1]

OUT = ROOT / "benchmarks" / "results"
RUNS = ROOT / "runs" / "bench-myopia-synthetic"
PAPER_GRID = [1.0, 0.3, 0.1, 0.01]
# Wu et al. 2024 (reference code's runs, ../shared/SPEC.md): myopic normalised loss per p; vanilla "about 0.00-0.1"
PAPER = {"myopic": {"p=1": 1.257, "p=0.3": 1.034, "p=0.1": 0.966, "p=0.01": 1.103},
         "vanilla": "about 0.00-0.1 at every p", "predict_zero_p1": 1.28,
         "vanilla_p_grid": [1.0, 0.3, 0.1, 0.01, 0.001], "myopic_p_grid": [1.0, 0.3, 0.1, 0.01],
         "budget": "58,593 steps x 512 sequences", "model": "HF GPT-2 body (GPT-2 init, final LayerNorm), default-init "
                                                           "input Linear(2, d) and head Linear(d, 1)"}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps-p1", type=int, default=5000, help="training steps at p = 1")
    ap.add_argument("--steps-other", type=int, default=5000,
                    help="training steps at the other p values (the same budget as p = 1 by default)")
    ap.add_argument("--p", type=float, nargs="+", default=[1.0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--eval-every", type=int, default=250, help="held-out normalised loss every N steps (curve)")
    ap.add_argument("--jobs", type=int, default=2, help="parallel single-threaded processes")
    ap.add_argument("--collect-only", action="store_true", help="only assemble the JSON from finished runs")
    ap.add_argument("--grid", choices=["paper"], help="paper: p in {1, 0.3, 0.1, 0.01} (replaces --p)")
    ap.add_argument("--tag", default="", help="a variant's own runs folder and JSON name")
    ap.add_argument("--config", default="small", help="the preset every run starts from")
    ap.add_argument("--quick", action="store_true",
                    help="smoke: the tiny preset, 20 steps, one seed, p in {1, 0.1}")
    ap.add_argument("--runs", type=Path, default=None, help="runs folder (default runs/bench-myopia-synthetic[-tag])")
    ap.add_argument("--out", type=Path, default=None, help="results folder (default benchmarks/results)")
    ap.add_argument("--set", nargs=argparse.REMAINDER, default=[],
                    help="config overrides for every run, e.g. --set --model.init reference (must come last)")
    args = ap.parse_args(argv)
    global RUNS, OUT
    RUNS = args.runs or (RUNS.parent / f"{RUNS.name}-{args.tag}" if args.tag else RUNS)
    OUT = args.out or OUT
    if args.quick:
        args.config, args.steps_p1, args.steps_other, args.eval_every = "tiny", 20, 20, 10
        args.seeds, args.p = args.seeds[:1], [1.0, 0.1]
        args.set = [*args.set, "--eval_sequences", "256", "--probe.train_sequences", "64",
                    "--probe.test_sequences", "32"]
    if args.grid == "paper":
        args.p = PAPER_GRID
    # seed-major order: with two jobs at a time, vanilla and myopic of one seed train side by side
    jobs = [(p, mode, seed) for seed in args.seeds for p in args.p for mode in ("vanilla", "detach_hidden")]
    if not args.collect_only:
        queue = []
        for p, mode, seed in jobs:
            steps = args.steps_p1 if p == 1.0 else args.steps_other
            name = f"p={p:g}-{mode}-s{seed}"
            queue.append((f"bench-myopia-synthetic-{name}",
                          [sys.executable, "-m", "forethought.cli", "myopia", "synthetic", "--config", args.config,
                           "--run.out_dir", str(RUNS), "--run.name", name, "--run.seed", str(seed),
                           "--p_values", f"[{p}]", "--modes", f"[{mode}]", "--train.steps", str(steps),
                           "--train.eval_every", str(args.eval_every), "--resume", "auto", *args.set]))
        RUNS.mkdir(parents=True, exist_ok=True)
        prefix = "bench-myopia-synthetic-"  # finished runs (results.json written) are skipped, not re-evaluated
        queue = [j for j in queue if not (RUNS / j[0][len(prefix):] / "results.json").is_file()]
        run_queue(queue, args.jobs, RUNS.parent, ROOT)
    collect(" ".join(["python", "benchmarks/myopia_synthetic.py", *(sys.argv[1:] if argv is None else argv)]),
            args.tag)


def collect(command: str, variant_tag: str = "") -> None:
    """Assemble every finished (p, model) run under RUNS, whichever invocation trained it. The runs are resumable
    and may span several invocations of this script: all of them are listed in ``command``, and ``wall_s`` spans
    from the first run's start to now."""
    import statistics

    stem = f"myopia_synthetic_{variant_tag}" if variant_tag else "myopia_synthetic"
    archive = OUT / "runs" / stem
    seen = invocations(archive, command)  # kept beside the archived runs
    records = finished_runs(RUNS, archive, "p=*-*-s*")  # run folders, else the committed archive
    found = []  # (p, mode, seed) of every finished run, whichever invocation made it
    for name in records:
        p_text, rest = name.split("-", 1)
        mode, seed_text = rest.rsplit("-s", 1)
        found.append((float(p_text[2:]), mode, int(seed_text)))
    found.sort(key=lambda j: (-j[0], j[2], j[1] != "vanilla"))
    res: dict = {"command": " ; ".join(seen), "wall_s": span_s(records),
                 "run_commands": {},
                 "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                             "threads_per_run": 1, "parallel_runs": 2},
                 "metric": "mean Huber loss (delta=1) over 64 positions / p, 16384 fresh sequences",
                 "probe": "ridge R² of sin(10·x_(n-lag)), best layer (0 = embedding), positions n >= 20",
                 "model": "the preset's model section, as run (model_config below)",
                 "paper": PAPER,
                 "curves": {}, "eval_curves": {}, "probe_r2_by_layer": {}}
    train_wall = 0.0
    per: dict = {}
    for p, mode, seed in found:
        record = records[f"p={p:g}-{mode}-s{seed}"]
        r = record["results"]
        name = "vanilla" if mode == "vanilla" else "myopic"
        key, tag = f"p={p:g}", f"p={p:g}/{name}/seed{seed}"
        res["run_commands"][tag] = record["command"]
        row = r[key]
        m = row[mode]
        best = [max(layer[i] for layer in m["probe_r2"]) for i in range(len(m["probe_r2"][0]))]
        entry = per.setdefault(key, {}).setdefault(name, {"seeds": [], "loss": [], "steps": [], "wall": [],
                                                          "r2_lag0": [], "r2_lag1": [], "r2_best_lag0_10": [],
                                                          "r2_sum_last": [], "r2_sum_best": []})
        entry["seeds"].append(seed)
        entry["loss"].append(m["normalised_loss"])
        entry["steps"].append(m["steps"])
        entry["wall"].append(m["train_wall_s"])
        entry["r2_lag0"].append(best[0])
        entry["r2_lag1"].append(best[1])
        entry["r2_best_lag0_10"].append(max(best[:11]))
        if m.get("probe_sum_r2"):  # runs from before the sum probe have none
            entry["r2_sum_last"].append(m["probe_sum_r2"][-1])
            entry["r2_sum_best"].append(max(m["probe_sum_r2"]))
        res.setdefault(key, {})["predict_zero"] = row["predict_zero"]
        res[key][f"{name}_batch_size"] = r["batch_size"]
        res["curves"][tag] = m["curve"]
        if m.get("eval_curve"):
            res["eval_curves"][tag] = [(e["step"], e["normalised_loss"]) for e in m["eval_curve"]]
        res["probe_r2_by_layer"][tag] = m["probe_r2"]
        if "model_config" not in res:
            res["model_config"] = record["config"]["model"]
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
            if e["r2_sum_last"]:
                res[key][f"{name}_probe_sum_r2_last_layer"] = statistics.fmean(e["r2_sum_last"])
                res[key][f"{name}_probe_sum_r2_best_layer"] = statistics.fmean(e["r2_sum_best"])
            res[key]["per_seed"][name] = dict(zip(map(str, e["seeds"]), e["loss"]))
        both = sorted(set(models.get("vanilla", {}).get("seeds", [])) & set(models.get("myopic", {}).get("seeds", [])))
        if both:  # paired by seed: the same data stream and initialisation for both models
            v = dict(zip(models["vanilla"]["seeds"], models["vanilla"]["loss"]))
            mm = dict(zip(models["myopic"]["seeds"], models["myopic"]["loss"]))
            res[key]["myopic_minus_vanilla"] = seed_paired(mm, v)
        if key in PAPER["myopic"]:
            res[key]["paper_myopic"] = PAPER["myopic"][key]
    res["train_wall_s_total"] = train_wall
    OUT.mkdir(parents=True, exist_ok=True)
    _plots(res, stem)
    (OUT / f"{stem}.json").write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps({k: v for k, v in res.items() if k.startswith("p=")}, indent=2))


def _plots(res: dict, stem: str = "myopia_synthetic") -> None:
    from forethought.core.plots import heatmaps, line_plot

    curves = {k: tuple(zip(*v)) for k, v in (res["eval_curves"] or res["curves"]).items() if v}
    if curves:
        what = "held-out normalised loss" if res["eval_curves"] else "training Huber loss / p"
        line_plot(curves, OUT / f"{stem}_curves.png", title=f"synthetic task: {what}",
                  xlabel="step", ylabel="loss / p")
    panels = {k: v for k, v in res["probe_r2_by_layer"].items() if k.startswith("p=1/") and k.endswith("/seed0")}
    if panels:
        heatmaps(panels, OUT / f"{stem}_probe_r2.png", title="ridge probe R² of sin(10·x_(n−lag)), p=1",
                 xlabel="lag", ylabel="layer (0 = embedding)")


if __name__ == "__main__":
    main()
