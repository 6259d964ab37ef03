"""Benchmark: the synthetic pre-caching task, vanilla vs myopic, normalised loss per p and probe R².

Runs ``forethought myopia synthetic`` once per (p, model) as parallel single-threaded processes (2 cores ->
two models at a time), then collects the run folders into ``benchmarks/results/myopia_synthetic.json`` and
copies the probe heat map and loss curves next to it. Resumable: rerunning continues unfinished runs.

    python benchmarks/myopia_synthetic.py [--steps-p1 7000] [--steps-other 800] [--jobs 2]
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
from _queue import run_queue  # noqa: E402

OUT = ROOT / "benchmarks" / "results"
RUNS = ROOT / "runs" / "bench-myopia-synthetic"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps-p1", type=int, default=7000, help="training steps at p = 1")
    ap.add_argument("--steps-other", type=int, default=800, help="training steps at the other p values")
    ap.add_argument("--p", type=float, nargs="+", default=[1.0, 0.1])
    ap.add_argument("--jobs", type=int, default=2, help="parallel single-threaded processes")
    ap.add_argument("--collect-only", action="store_true", help="only assemble the JSON from finished runs")
    args = ap.parse_args()
    jobs = [(p, mode) for p in args.p for mode in ("vanilla", "detach_hidden")]
    if not args.collect_only:
        queue = []
        for p, mode in jobs:
            steps = args.steps_p1 if p == 1.0 else args.steps_other
            queue.append((f"bench-myopia-synthetic-p={p:g}-{mode}",
                          [sys.executable, "-m", "forethought.cli", "myopia", "synthetic", "--config", "small",
                           "--run.out_dir", str(RUNS), "--run.name", f"p={p:g}-{mode}", "--p_values", f"[{p}]",
                           "--modes", f"[{mode}]", "--train.steps", str(steps), "--resume", "auto"]))
        RUNS.mkdir(parents=True, exist_ok=True)
        run_queue(queue, args.jobs, RUNS.parent, ROOT)
    collect(" ".join(["python", *sys.argv]))


def _started(run_dir: Path) -> float | None:
    env = run_dir / "env.json"
    if not env.is_file():
        return None
    return time.mktime(time.strptime(json.loads(env.read_text())["started"][:19], "%Y-%m-%dT%H:%M:%S"))


def collect(command: str) -> None:
    """Assemble every finished (p, model) run under RUNS, whichever invocation trained it. The runs are resumable
    and may span several invocations of this script: all of them are listed in ``command``, and ``wall_s`` spans
    from the first run's start to now."""
    log = RUNS / "invocations.txt"
    seen = log.read_text().splitlines() if log.is_file() else []
    if command not in seen:
        seen.append(command)
        log.write_text("\n".join(seen) + "\n")
    jobs = sorted(((float(d.name.split("-")[0][2:]), d.name.split("-", 1)[1]) for d in RUNS.glob("p=*-*")
                   if d.is_dir()), key=lambda j: (-j[0], j[1] != "vanilla"))
    starts = [t for p, mode in jobs if (t := _started(RUNS / f"p={p:g}-{mode}")) is not None]
    res: dict = {"command": " ; ".join(seen), "wall_s": time.time() - min(starts) if starts else 0.0,
                 "run_commands": {},
                 "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                             "threads_per_run": 1, "parallel_runs": 2},
                 "metric": "mean Huber loss (delta=1) over 64 positions / p, 16384 fresh sequences",
                 "probe": "ridge R² of sin(10·x_(n-lag)), best layer (0 = embedding), positions n >= 20",
                 "curves": {}, "probe_r2_by_layer": {}}
    train_wall = 0.0
    for p, mode in jobs:
        run_dir = RUNS / f"p={p:g}-{mode}"
        rfile = run_dir / "results.json"
        if not rfile.is_file():
            print(f"missing {rfile}; skipped")
            continue
        r = json.loads(rfile.read_text())
        res["run_commands"][f"p={p:g}/{mode}"] = json.loads((run_dir / "env.json").read_text())["command"]
        row = r[f"p={p:g}"]
        m = row[mode]
        name = "vanilla" if mode == "vanilla" else "myopic"
        key = f"p={p:g}"
        res.setdefault(key, {})[name] = m["normalised_loss"]
        res[key]["predict_zero"] = row["predict_zero"]
        res[key][f"{name}_steps"] = m["steps"]
        res[key][f"{name}_batch_size"] = r["batch_size"]
        res[key][f"{name}_train_wall_s"] = m["train_wall_s"]
        best = [max(layer[i] for layer in m["probe_r2"]) for i in range(len(m["probe_r2"][0]))]
        res[key][f"{name}_probe_r2_lag0"] = best[0]
        res[key][f"{name}_probe_r2_lag1"] = best[1]
        res["curves"][f"{key}/{name}"] = m["curve"]
        res["probe_r2_by_layer"][f"{key}/{name}"] = m["probe_r2"]
        train_wall += m["train_wall_s"]
    res["train_wall_s_total"] = train_wall
    _plots(res)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "myopia_synthetic.json").write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps({k: v for k, v in res.items() if k.startswith("p=")}, indent=2))


def _plots(res: dict) -> None:
    sys.path.insert(0, str(ROOT / "src"))
    from forethought.core.plots import heatmaps, line_plot

    curves = {k: tuple(zip(*v)) for k, v in res["curves"].items() if v}
    if curves:
        line_plot(curves, OUT / "myopia_synthetic_curves.png", title="synthetic task: training Huber loss / p",
                  xlabel="step", ylabel="loss / p")
    panels = {k: v for k, v in res["probe_r2_by_layer"].items() if k.startswith("p=1/")}
    if panels:
        heatmaps(panels, OUT / "myopia_synthetic_probe_r2.png", title="ridge probe R² of sin(10·x_(n−lag)), p=1",
                 xlabel="lag", ylabel="layer (0 = embedding)")


if __name__ == "__main__":
    main()
