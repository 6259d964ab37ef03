"""Benchmark: regression with the three methods (SmolLM2-135M + LoRA), STS-B and WASSA-2017 (all four emotions),
and the expected-value decoder beside each generating method's greedy answer.

Each (task, method) is one ``forethought predgen train --config small --task.name <task> --eval.decoder
expected`` run (seed 0; the same adapter, examples and steps for every method), ``--jobs`` at a time with one
thread each, resumable. Collects ``benchmarks/results/predgen_regression.json``: ``[task][method]`` holds MSE,
MAE, Pearson and Spearman of the method's prediction (PredGen: the adapter's), of the decoded number
(``decoded``), of the expected value (``expected_value``), and the parse-failure rate.

    python benchmarks/predgen_regression.py [--tasks stsb wassa] [--steps 150] [--max-eval-examples 500]
        [--jobs 2] [--collect-only]

``--max-eval-examples`` evaluates on a seeded subset of each dev set (``task.max_eval_examples``; the same subset
for every method): the expected-value decoder scores every digit prefix of the range for each example (STS-B's
0.00-5.00 with SmolLM2's tokenizer: 65 prefixes, fed as 51 four-token paths), so evaluating the generating
methods is slow; their evaluation speed is ``examples_per_s`` in ``benchmarks/results/predgen_regression.json``.
0 = the whole dev set.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

from forethought.experiments.jobs import run_queue_or_exit as run_queue

ROOT = Path(__file__).resolve().parents[1]

OUT = ROOT / "benchmarks" / "results"
RUNS = ROOT / "runs" / "bench-predgen-regression"
METHODS = ("predictor", "generator", "predgen")
KEYS = ("mse", "mae", "pearson", "spearman")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=["stsb", "wassa"])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--max-eval-examples", type=int, default=500, help="seeded dev subset per task (0 = all)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--collect-only", action="store_true")
    args = ap.parse_args()
    t0 = time.time()
    if not args.collect_only:
        jobs = [(f"{t}-{m}", [sys.executable, "-m", "forethought.cli", "predgen", "train", "--config", "small",
                              "--method", m, "--task.name", t, "--eval.decoder", "expected", "--train.steps",
                              str(args.steps), "--task.max_eval_examples", str(args.max_eval_examples),
                              "--run.out_dir", str(RUNS), "--run.name", f"{t}-{m}", "--resume", "auto"])
                for t in args.tasks for m in METHODS if not (RUNS / f"{t}-{m}" / "results.json").is_file()]
        run_queue(jobs, args.jobs, RUNS, ROOT)
    res: dict = {"command": " ".join(["python", *sys.argv]), "wall_s": time.time() - t0,
                 "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "threads_per_run": 1,
                             "parallel_runs": args.jobs},
                 "base": "smollm2-135m + LoRA r=16 (configs/predgen/train_small.yaml)"}
    for task in args.tasks:
        for method in METHODS:
            f = RUNS / f"{task}-{method}" / "results.json"
            if not f.is_file():
                continue
            r = json.loads(f.read_text())
            row = {k: r[k] for k in KEYS}
            row.update(train_wall_s=r["train_wall_s"], steps=r["steps"], batch_size=r["batch_size"],
                       eval_examples=r["eval_examples"], examples_per_s=r["examples_per_s"],
                       command=json.loads((f.parent / "env.json").read_text())["command"])
            for extra in ("decoded", "expected_value"):
                if extra in r:
                    row[extra] = {k: r[extra][k] for k in KEYS}
            if "parse_failure_rate" in r:
                row["parse_failure_rate"] = r["parse_failure_rate"]
            res.setdefault(task, {})[method] = row
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "predgen_regression.json").write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps({t: {m: {k: v[k] for k in KEYS} for m, v in res[t].items()} for t in args.tasks if t in res},
                     indent=1))


if __name__ == "__main__":
    main()
