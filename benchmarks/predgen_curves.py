"""Benchmark: learning curves of Predictor, Generator and PredGen (SmolLM2-135M + LoRA) on SST-2 and on a task
whose answers are several tokens long (ARC-Easy answered with the choice's text), one seed, evaluated every
``--eval-every`` examples on a fixed seeded eval subset; paired statistics of the final models.

Every run is ``forethought predgen train --config small`` with the same examples in the same order for every
method (the run's seed fixes them), ``--train.eval_every`` for the curve and checkpoints at every curve point,
so rerunning the script continues where it stopped (``--resume auto``). A finished run's record (results,
predictions, command) is also saved in ``benchmarks/results/runs/predgen_curves/`` and committed, so a later
session on a fresh machine (without ``runs/``) neither reruns nor loses it. Runs go one at a time, each with
``--threads`` torch threads. ``--sweep`` first runs the learning-rate sweep (the generator on SST-2, a short
budget, the same eval subset) that chose ``--lr``.

Collected into ``benchmarks/results/predgen_curves.json`` (+ ``predgen_curves.png``): per task and method the
curve (accuracy vs examples seen; PredGen's also of its decoded answer, in runs made after that was logged), the
final metrics, and for each pair of methods McNemar's exact test and the paired bootstrap 95 % interval of the
accuracy difference on the same eval examples (and PredGen's adapter vs its own decoded answer, and its decoded
answer vs the Generator's).

    python benchmarks/predgen_curves.py [--tasks sst2 arc-easy] [--examples 10000] [--sweep] [--collect-only]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

from forethought.experiments import finished_run, gradient_summary, invocations
from forethought.experiments.jobs import run_queue_or_exit as run_queue
from forethought.predgen.compare import paired

ROOT = Path(__file__).resolve().parents[1]

OUT = ROOT / "benchmarks" / "results"
RUNS = ROOT / "runs" / "bench-predgen-curves"
ARCHIVE = OUT / "runs" / "predgen_curves"  # finished runs' records, committed (experiments.finished_run)
METHODS = ("predictor", "generator", "predgen")
# per task: extra overrides, and the eval subset (SST-2: the whole dev set; ARC-Easy: 500 of its 2,376 test items)
TASKS: dict[str, dict] = {
    "sst2": {"args": ["--task.name", "sst2"], "eval_examples": 0},
    "arc-easy": {"args": ["--task.name", "arc-easy", "--task.answer", "text"], "eval_examples": 500},
    "piqa": {"args": ["--task.name", "piqa", "--task.answer", "text"], "eval_examples": 0},
}
SWEEP_LRS = (2e-4, 5e-4, 1e-3)
SWEEP_STEPS, SWEEP_EVAL_EVERY, SWEEP_EVAL_EXAMPLES = 60, 20, 300


def _train_argv(name: str, method: str, task: str, steps: int, eval_every: int, eval_examples: int, lr: float,
                seed: int, batch: int, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "forethought.cli", "predgen", "train", "--config", "small", "--method", method,
            *TASKS[task]["args"], "--task.max_eval_examples", str(eval_examples), "--train.steps", str(steps),
            "--train.batch_size", str(batch), "--train.lr", str(lr), "--train.eval_every", str(eval_every),
            "--train.checkpoint_every", str(eval_every), "--train.keep_checkpoints", "1",
            "--eval.latency_examples", "0", "--run.seed", str(seed), "--run.out_dir", str(RUNS), "--run.name", name,
            "--resume", "auto", *extra]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=["sst2", "arc-easy"], choices=list(TASKS))
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--examples", type=int, default=10_000, help="training examples per run")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--eval-every", type=int, default=800, help="examples between curve points")
    ap.add_argument("--lr", type=float, default=5e-4, help="learning rate of every run (chosen by --sweep)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads of the one run at a time")
    ap.add_argument("--sweep", action="store_true", help="run the learning-rate sweep first")
    ap.add_argument("--collect-only", action="store_true", help="only assemble the JSON from finished runs")
    ap.add_argument("overrides", nargs="*", help="extra config overrides for every run (after --)")
    args = ap.parse_args()
    bs = args.batch_size
    steps, every = -(-args.examples // bs), max(1, args.eval_every // bs)
    if not args.collect_only:
        jobs = []
        if args.sweep:  # rates already in the JSON (finished before the archive existed) are not rerun
            swept = _earlier().get("sweep", {})
            jobs += [(f"sweep-lr{lr:g}", _train_argv(f"sweep-lr{lr:g}", "generator", "sst2", SWEEP_STEPS,
                                                     SWEEP_EVAL_EVERY, SWEEP_EVAL_EXAMPLES, lr, args.seed, bs,
                                                     args.overrides))
                     for lr in SWEEP_LRS if f"{lr:g}" not in swept]
        jobs += [(f"{t}-{m}-s{args.seed}", _train_argv(f"{t}-{m}-s{args.seed}", m, t, steps, every,
                                                       TASKS[t]["eval_examples"], args.lr, args.seed, bs,
                                                       args.overrides))
                 for t in args.tasks for m in args.methods]
        jobs = [(n, a) for n, a in jobs if finished_run(RUNS / n, ARCHIVE) is None]
        run_queue(jobs, 1, RUNS, ROOT, threads=args.threads, on_done=lambda n: finished_run(RUNS / n, ARCHIVE))
    collect(" ".join(["python", *sys.argv]), args)


def _earlier() -> dict:
    """This script's last JSON, or {}."""
    f = OUT / "predgen_curves.json"
    return json.loads(f.read_text()) if f.is_file() else {}


def collect(command: str, args: argparse.Namespace) -> None:
    earlier = _earlier()
    # commands from earlier sessions' machines, whose runs/ folders are gone
    seen = list(dict.fromkeys([c for c in earlier.get("command", "").split(" ; ") if c] + invocations(RUNS, command)))
    res: dict = {"command": " ; ".join(seen), "base": "smollm2-135m", "adapter": "LoRA r=16 (all linear layers)",
                 "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                             "threads_per_run": args.threads, "parallel_runs": 1},
                 "seed": args.seed, "lr": args.lr, "batch_size": args.batch_size, "train_examples": args.examples,
                 "eval_every_examples": args.eval_every, "reference_lr2e-4_curve_sst2": {
                     "12800": 0.880, "25600": 0.904, "38400": 0.914},
                 "sweep": {}, "tasks": {}}
    # sweep runs finished before the archive existed: keep their entries from this script's earlier JSON
    earlier_sweep = earlier.get("sweep", {})
    for lr in SWEEP_LRS:
        rec = finished_run(RUNS / f"sweep-lr{lr:g}", ARCHIVE)
        if rec is None and f"{lr:g}" in earlier_sweep:
            res["sweep"][f"{lr:g}"] = earlier_sweep[f"{lr:g}"]
        elif rec is not None:
            r = rec["results"]
            res["sweep"][f"{lr:g}"] = {"method": "generator", "task": "sst2", "accuracy": r["accuracy"],
                                       "curve": [(p["examples_seen"], p["accuracy"]) for p in r["learning_curve"]],
                                       "eval_examples": r["eval_examples"]}
    starts, ends, threads = [], [], set()
    for task in TASKS:
        records = {m: finished_run(RUNS / f"{task}-{m}-s{args.seed}", ARCHIVE) for m in METHODS}
        done = {m: rec for m, rec in records.items() if rec is not None}
        if not done:
            continue
        entry: dict = {"methods": {}, "paired": {}}
        preds = {}
        for m, rec in done.items():
            r = rec["results"]
            preds[m] = rec["predictions"]
            entry["methods"][m] = {
                "accuracy": r["accuracy"], "macro_f1": r["macro_f1"], "decoded_accuracy": r.get("decoded", {}).get(
                    "accuracy"), "eval_examples": r["eval_examples"], "train_examples": r["train_examples"],
                "examples_seen": r["steps"] * r["batch_size"], "train_wall_s": r["train_wall_s"],
                "curve": [{k: c[k] for k in ("examples_seen", "accuracy", "decoded_accuracy") if k in c}
                          for c in r.get("learning_curve", [])],  # decoded_accuracy: PredGen's, in newer runs
                "gradients": gradient_summary(rec.get("train_log", [])),  # late L_W, L_D, gradient norms
                "command": rec["command"]}
            starts.append(rec["started"])
            threads.add(rec.get("torch_threads"))
            ends.append(rec["finished"])
        ordered = [m for m in METHODS if m in preds]
        for i, a in enumerate(ordered):
            for b in ordered[i + 1:]:
                entry["paired"][f"{b}_minus_{a}"] = paired(preds[b], preds[a])
        if "predgen" in preds:
            entry["paired"]["predgen_adapter_minus_its_decoded"] = paired(preds["predgen"], preds["predgen"],
                                                                          key_b="decoded")
            if "generator" in preds:  # the written answers: does PredGen's training change what it writes?
                entry["paired"]["predgen_decoded_minus_generator"] = paired(preds["predgen"], preds["generator"],
                                                                            key_a="decoded")
        res["tasks"][task] = entry
    starts = [s for s in starts if s is not None]
    res["wall_s"] = max(ends) - min(starts) if starts and ends else None
    res["machine"]["threads_per_run"] = sorted(threads - {None}) or args.threads  # what the runs used
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "predgen_curves.json").write_text(json.dumps(res, indent=2) + "\n")
    _plot(res)
    print(json.dumps({t: {m: v["accuracy"] for m, v in e["methods"].items()} for t, e in res["tasks"].items()},
                     indent=1))


def _plot(res: dict) -> None:
    from forethought.core.plots import pyplot, save_figure

    tasks = list(res["tasks"])
    if not tasks:
        return
    plt = pyplot()
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.4 * len(tasks), 3.9), squeeze=False, layout="constrained")
    for ax, task in zip(axes[0], tasks):
        for m, v in res["tasks"][task]["methods"].items():
            line, = ax.plot([c["examples_seen"] for c in v["curve"]], [c["accuracy"] for c in v["curve"]],
                            marker=".", label=m if m != "predgen" else "predgen (adapter)")
            dec = [c for c in v["curve"] if "decoded_accuracy" in c]
            if dec:
                ax.plot([c["examples_seen"] for c in dec], [c["decoded_accuracy"] for c in dec], marker=".", ls="--",
                        color=line.get_color(), label=f"{m} (decoded answer)")
        if task == "sst2":
            ref = res["reference_lr2e-4_curve_sst2"]
            ax.plot([int(k) for k in ref], list(ref.values()), "k:", marker="x", label="reference PredGen, lr 2e-4")
        n = next(iter(res["tasks"][task]["methods"].values()))["eval_examples"]
        ax.set(title=f"{task} ({n} eval examples)", xlabel="training examples seen", ylabel="accuracy")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"SmolLM2-135M + LoRA, lr {res['lr']:g}, seed {res['seed']}")
    save_figure(fig, OUT / "predgen_curves.png")


if __name__ == "__main__":
    main()
