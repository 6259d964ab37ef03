"""Benchmark: MINE estimates of I(Y; Z) on SST-2 dev for each method's trained checkpoint (seed 0 of
``forethought experiment run predgen_sst2``; the removed ``benchmarks/predgen_sst2.py`` kept its runs in
``runs/bench-predgen-sst2``): pooled prompt states vs the states of the generated answer tokens.

Each estimate is ``forethought predgen mine`` (statistics network fitted on one half of the dev set, the
Donsker-Varadhan bound evaluated on the other half, over seeds 0-2); H(Y) is the upper bound for classes.

    python benchmarks/predgen_mine.py [--seed-run 0] [--steps 600] [--collect-only]

Writes ``benchmarks/results/predgen_mine.json``: ``[method]["mi_pooled"]`` (last-token pooling, what the
Predictor's head reads), ``[method]["mi_tokens"]`` (what PredGen's adapter reads), std and per-seed values
beside them, ``["h_y"]``; and ``predgen_mine.png``.

``--words`` runs the paper's token-level analysis instead (``predgen mine --words``: the input words with the
highest NPMI with each answer the model writes) on SST-2 dev, for a Generator trained here with a short budget
(the ``small`` preset cut to ``--train-steps`` steps; one thread; resumable), and writes
``benchmarks/results/predgen_words_sst2.json`` with the commands, the machine and the wall times:

    python benchmarks/predgen_mine.py --words [--train-steps 60] [--top 15] [--min-count 5] [--max-examples 0]
                                      [--word-list funny pretty]
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
RUNS = ROOT / "runs" / "predgen_sst2"  # the predgen_sst2 spec's run folders (the old script used bench-predgen-sst2)
WORDS_RUNS = ROOT / "runs" / "bench-predgen-words"
METHODS = ("predictor", "generator", "predgen")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed-run", type=int, default=0, help="which seed's checkpoints of the SST-2 benchmark")
    ap.add_argument("--steps", type=int, default=600, help="statistics-network steps")
    ap.add_argument("--collect-only", action="store_true")
    ap.add_argument("--words", action="store_true", help="the token-level analysis (see above) instead of MINE")
    ap.add_argument("--train-steps", type=int, default=60, help="--words: the Generator's training steps")
    ap.add_argument("--top", type=int, default=15, help="--words: words per answer")
    ap.add_argument("--min-count", type=int, default=5, help="--words: only words in this many examples")
    ap.add_argument("--max-examples", type=int, default=0, help="--words: dev examples (0 = all 872)")
    ap.add_argument("--word-list", nargs="*", default=["funny", "pretty"],
                    help="--words: also report these words (the seed's examples)")
    args = ap.parse_args()
    if args.words:
        words(args)
        return
    t0 = time.time()
    for method in METHODS:
        run = RUNS / f"{method}-s{args.seed_run}"
        if not (run / "model" / "predgen.json").is_file():
            sys.exit(f"{run} has no trained model; run forethought experiment run predgen_sst2 first")
        if args.collect_only or (run / "mine.json").is_file():
            continue
        cmd = [sys.executable, "-m", "forethought.cli", "predgen", "mine", "--model", str(run), "--max_examples",
               "0", "--steps", str(args.steps), "--seeds", "[0, 1, 2]"]
        subprocess.run(cmd, check=True, cwd=ROOT)
    res: dict = {"command": " ".join(["python", *sys.argv]), "wall_s": time.time() - t0,
                 "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count()},
                 "task": "sst2 dev (872 examples), halves: fit / held-out bound", "units": "nats",
                 "checkpoints": f"predgen_sst2 runs, seed {args.seed_run}"}
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
    from forethought.core.plots import bar_plot

    bar_plot(bars, OUT / "predgen_mine.png", title="MINE I(Y;Z) on SST-2 dev, held-out halves (mean ± std)",
             ylabel="nats", hline=res["h_y"], hline_label="H(Y)")
    print(json.dumps({m: {k: res[m][k] for k in ("mi_pooled", "mi_tokens")} for m in METHODS}, indent=1))



def words(args: argparse.Namespace) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    run = WORDS_RUNS / "generator-s0"
    train_cmd = [sys.executable, "-m", "forethought.cli", "predgen", "train", "--config", "small", "--method",
                 "generator", "--train.steps", str(args.train_steps), "--train.checkpoint_every", "20",
                 "--task.max_eval_examples", "300", "--eval.latency_examples", "0", "--run.out_dir",
                 str(WORDS_RUNS), "--run.name", run.name, "--resume", "auto"]
    if (run / "config.yaml").is_file():
        import yaml

        steps = yaml.safe_load((run / "config.yaml").read_text())["train"]["steps"]
        if steps != args.train_steps:
            sys.exit(f"{run} was trained for {steps} steps, not {args.train_steps}: move it away or pass "
                     f"--train-steps {steps}")
    reused = (run / "results.json").is_file()  # a finished run (resumable: an unfinished one continues)
    if not reused:
        subprocess.run(train_cmd, check=True, cwd=ROOT, env=env)
    out = run / "words.json"
    mine_cmd = [sys.executable, "-m", "forethought.cli", "predgen", "mine", "--model", str(run), "--representations",
                "[]", "--words", str(args.top), "--word_min_count", str(args.min_count), "--max_examples",
                str(args.max_examples), "--word_list", "[" + ", ".join(args.word_list) + "]", "--out", str(out)]
    t1 = time.time()
    subprocess.run(mine_cmd, check=True, cwd=ROOT, env=env)
    words_wall = time.time() - t1
    trained = json.loads((run / "results.json").read_text())
    analysis = json.loads(out.read_text())
    rel = [str(Path(c).relative_to(ROOT)) if c.startswith(str(ROOT)) else c for c in (*train_cmd, *mine_cmd)]
    rel = ["python" if c == sys.executable else c for c in rel]
    res = {"command": " ".join(["python", *sys.argv]),
           "steps": {"train": " ".join(rel[: len(train_cmd)]), "analysis": " ".join(rel[len(train_cmd):])},
           "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "threads": 1},
           "wall_s": {"train": trained.get("train_wall_s"), "analysis": words_wall},
           "train_run_reused": reused,
           "model": "smollm2-135m + LoRA r=16 (configs/predgen/train_small.yaml), Generator, "
                    f"{args.train_steps} steps x 16 examples, seed 0",
           "dev_accuracy_of_the_run": trained.get("accuracy"), "run_eval_examples": trained.get("eval_examples"),
           "task": "sst2 dev", "examples": analysis["examples"], **analysis["word_association"]}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "predgen_words_sst2.json").write_text(json.dumps(res, indent=2) + "\n")
    for label, v in res["per_answer"].items():
        print(label, v["answered"], ", ".join(f"{r['word']} {r['npmi']:.2f} ({r['with_answer']}/{r['examples']})"
                                              for r in v["top"]), "| asked:", v.get("asked"))


if __name__ == "__main__":
    main()
