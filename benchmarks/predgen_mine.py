"""Benchmark: MINE estimates of I(Y; Z) on SST-2 dev for each method's trained checkpoint (seed 0 of
``benchmarks/predgen_sst2.py``): pooled prompt states vs the states of the generated answer tokens.

Each estimate is ``forethought predgen mine`` (statistics network fitted on one half of the dev set, the
Donsker-Varadhan bound evaluated on the other half, over seeds 0-2); H(Y) is the upper bound for classes.

    python benchmarks/predgen_mine.py [--seed-run 0] [--steps 600] [--collect-only]

Writes ``benchmarks/results/predgen_mine.json``: ``[method]["mi_pooled"]`` (last-token pooling, what the
Predictor's head reads), ``[method]["mi_tokens"]`` (what PredGen's adapter reads), std and per-seed values
beside them, ``["h_y"]``; and ``predgen_mine.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results"
RUNS = ROOT / "runs" / "bench-predgen-sst2"
METHODS = ("predictor", "generator", "predgen")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed-run", type=int, default=0, help="which seed's checkpoints of the SST-2 benchmark")
    ap.add_argument("--steps", type=int, default=600, help="statistics-network steps")
    ap.add_argument("--collect-only", action="store_true")
    args = ap.parse_args()
    t0 = time.time()
    for method in METHODS:
        run = RUNS / f"{method}-s{args.seed_run}"
        if not (run / "model" / "predgen.json").is_file():
            sys.exit(f"{run} has no trained model; run benchmarks/predgen_sst2.py first")
        if args.collect_only or (run / "mine.json").is_file():
            continue
        cmd = [sys.executable, "-m", "forethought.cli", "predgen", "mine", "--model", str(run), "--max_examples",
               "0", "--steps", str(args.steps), "--seeds", "[0, 1, 2]"]
        subprocess.run(cmd, check=True, cwd=ROOT)
    res: dict = {"command": " ".join(["python", *sys.argv]), "wall_s": time.time() - t0,
                 "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count()},
                 "task": "sst2 dev (872 examples), halves: fit / held-out bound", "units": "nats",
                 "checkpoints": f"benchmarks/predgen_sst2.py runs, seed {args.seed_run}"}
    bars = {}
    for method in METHODS:
        r = json.loads((RUNS / f"{method}-s{args.seed_run}" / "mine.json").read_text())
        est = r["estimates"]
        res["h_y"] = r["H_Y"]
        res[method] = {"mi_pooled": est["pooled_last"]["heldout"]["mean"],
                       "mi_pooled_std": est["pooled_last"]["heldout"]["std"],
                       "mi_pooled_mean_pooling": est["pooled_mean"]["heldout"]["mean"],
                       "mi_tokens": est["tokens"]["heldout"]["mean"],
                       "mi_tokens_std": est["tokens"]["heldout"]["std"],
                       "per_seed": {k: v["heldout"]["per_seed"] for k, v in est.items()},
                       "fit_half": {k: v["fit_half"]["mean"] for k, v in est.items()}}
        bars[f"{method}\npooled"] = (res[method]["mi_pooled"], res[method]["mi_pooled_std"])
        bars[f"{method}\ntokens"] = (res[method]["mi_tokens"], res[method]["mi_tokens_std"])
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "predgen_mine.json").write_text(json.dumps(res, indent=2) + "\n")
    sys.path.insert(0, str(ROOT / "src"))
    from forethought.core.plots import bar_plot

    bar_plot(bars, OUT / "predgen_mine.png", title="MINE I(Y;Z) on SST-2 dev, held-out halves (mean ± std)",
             ylabel="nats", hline=res["h_y"], hline_label="H(Y)")
    print(json.dumps({m: {k: res[m][k] for k in ("mi_pooled", "mi_tokens")} for m in METHODS}, indent=1))


if __name__ == "__main__":
    main()
