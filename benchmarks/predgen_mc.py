"""Benchmark: can PredGen's own prediction answer multiple choice? ARC-Easy and ARC-Challenge answered with the
choice's text, SmolLM2-135M + LoRA, the ``predgen_tasks`` budget (``--config small``, 75 steps), 3 seeds:

* the untrained model's zero-shot rank score (``--method base --eval.decoder rank``), with the task's prompt and
  with lm-eval-harness's ARC prompt ("Question: ...\\nAnswer:", no choices listed);
* the Predictor, the Generator (greedy, and rank), PredGen with each adapter, one change at a time from the
  states adapter: ``--head.reads choices`` (a score per choice from Z and the choice's own states),
  ``--head.reads logits`` (the reference code's adapter), ``--task.answer name`` (answer1..answer5); the
  Generator with name answers; the Generator and the choice-scoring PredGen with lm-eval's prompt;
* STS-B: PredGen's adapter vs the expected-value decoder of the same model (lr 5e-4, as ``predgen_tasks``).

Every run carves a validation split from the training data (``--task.val_examples``); the MC adapter default is
the PredGen variant with the best mean validation accuracy on ARC-Easy (``selected_on_validation``), and the eval
split is only reported. Collected into ``benchmarks/results/predgen_mc.json`` (+ ``predgen_mc.png``): per task and
variant each answer's metric (prediction, decoded, rank, rank_norm, expected_value, validation) per seed and
mean ± std; paired comparisons per seed (bootstrap interval, McNemar) and the Student-t 95 % interval of the
seed-mean difference. Resumable: finished runs are archived in ``benchmarks/results/runs/predgen_mc/``.

    FORETHOUGHT_DATA=../shared/data python benchmarks/predgen_mc.py [--tasks arc-easy arc-challenge stsb]
        [--seeds 0 1 2] [--variants ...] [--collect-only] [--quick]

``--quick`` (a smoke test: 2 steps, a few examples, seed 0, ARC-Easy) writes under ``--runs-dir`` /
``--results-dir`` (default: the benchmark's own folders).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

from forethought.experiments import finished_run, invocations
from forethought.experiments.jobs import run_queue_or_exit as run_queue
from forethought.experiments.predgen_mc import task_entry
from forethought.predgen.compare import paired

ROOT = Path(__file__).resolve().parents[1]

LMEVAL_ARC = "Question: {question}\nAnswer:"
LISTED = ["--task.template", "Question: {question}\n{choices}\nAnswer:"]  # the task's prompt that lists the choices
RANK = ["--eval.decoder", "rank"]
NO_LL = ["--head.choice_loglik", "0"]
# every variant spells out its prompt and adapter, so its runs stay the same when the package's defaults change
VARIANTS = {
    "base": ["--method", "base", *LISTED, *RANK],
    "base-lmeval": ["--method", "base", "--task.template", LMEVAL_ARC, *RANK],
    "predictor": ["--method", "predictor", *LISTED],
    "generator": ["--method", "generator", *LISTED, *RANK],
    "generator-name": ["--method", "generator", "--task.answer", "name", *RANK],
    "predgen": ["--method", "predgen", "--head.reads", "states", *LISTED, *RANK],
    "predgen-choices": ["--method", "predgen", "--head.reads", "choices", *NO_LL, *LISTED, *RANK],
    # the choice adapter starting nearer its MLP (α = 1 instead of 5): can it overrule the answer it wrote?
    "predgen-choices-a1": ["--method", "predgen", "--head.reads", "choices", "--head.choice_alpha", "1", *NO_LL,
                           *LISTED, *RANK],
    "predgen-logits": ["--method", "predgen", "--head.reads", "logits", *LISTED, *RANK],
    "predgen-name": ["--method", "predgen", "--head.reads", "states", "--task.answer", "name", *RANK],
    "predgen-expected": ["--method", "predgen", "--head.reads", "states", "--eval.decoder", "expected"],
    # the prompt without the listed choices (lm-eval's): the untrained model ranks 0.515 with it, 0.325 with the
    # task's prompt (ARC-Easy, 200 seeded test items), so the prompt is an ablation of its own
    "generator-lmeval": ["--method", "generator", "--task.template", LMEVAL_ARC, *RANK],
    "predgen-choices-lmeval": ["--method", "predgen", "--head.reads", "choices", *NO_LL, "--task.template",
                               LMEVAL_ARC, *RANK],
    # + each choice's log-likelihood in its score (β starts at 1): can the adapter weigh what it wrote against
    # what it finds likely (the rank decoder beat greedy decoding by 7 points on seed 0 with lm-eval's prompt)?
    "predgen-choices-ll-lmeval": ["--method", "predgen", "--head.reads", "choices", "--head.choice_loglik", "1",
                                  "--task.template", LMEVAL_ARC, *RANK],
    # the same adapter with the task's prompt (one change: the prompt)
    "predgen-choices-ll": ["--method", "predgen", "--head.reads", "choices", "--head.choice_loglik", "1",
                           *LISTED, *RANK],
}
ADAPTERS = ["predgen", "predgen-choices", "predgen-choices-a1", "predgen-logits", "predgen-name",
            "predgen-choices-ll"]  # the task's prompt
LMEVAL_ADAPTERS = ["predgen-choices-lmeval", "predgen-choices-ll-lmeval"]
SELECT = [*ADAPTERS, *LMEVAL_ADAPTERS]  # the MC default (adapter and prompt) is chosen among these on validation
MC = ["base", "base-lmeval", "predictor", "generator", "generator-name", *ADAPTERS, "generator-lmeval",
      "predgen-choices-lmeval", "predgen-choices-ll-lmeval"]
TASKS: dict[str, dict] = {
    "arc-easy": {"args": ["--task.name", "arc-easy", "--task.answer", "text", "--task.max_eval_examples", "1000",
                          "--task.val_examples", "100"], "steps": 75, "metric": "accuracy", "variants": MC},
    "arc-challenge": {"args": ["--task.name", "arc-challenge", "--task.answer", "text", "--task.max_eval_examples",
                               "1000", "--task.val_examples", "60"], "steps": 75, "metric": "accuracy",
                      "variants": MC},
    "stsb": {"args": ["--task.name", "stsb", "--task.val_examples", "500", "--train.lr", "5e-4"], "steps": 90,
             "metric": "mse", "variants": ["predgen-expected"]},
}
# "variant" = its prediction (PredGen: the adapter's); "variant:key" = another answer of the same run
COMPARE = [*[(a, f"{a}:decoded") for a in ADAPTERS], *[(a, "generator") for a in ADAPTERS],
           *[(a, "generator:rank") for a in ADAPTERS], *[(a, "base-lmeval:rank") for a in ADAPTERS],
           ("predgen-choices", "predgen"), ("predgen-choices-a1", "predgen-choices"), ("predgen-logits", "predgen"), ("predgen-name", "predgen"),
           ("generator:rank", "generator"), ("generator", "base-lmeval:rank"), ("generator:rank", "base-lmeval:rank"),
           ("predictor", "base-lmeval:rank"), ("generator-name", "generator"),
           ("predgen-choices-lmeval", "predgen-choices"), ("generator-lmeval", "generator"),
           ("predgen-choices-lmeval", "generator-lmeval"),
           ("predgen-choices-lmeval", "generator-lmeval:rank"), ("predgen-choices-lmeval", "base-lmeval:rank"),
           ("predgen-choices-lmeval", "predgen-choices-lmeval:decoded"),
           ("predgen-choices-ll-lmeval", "predgen-choices-lmeval"), ("predgen-choices-ll-lmeval", "generator-lmeval"),
           ("predgen-choices-ll-lmeval", "generator-lmeval:rank"), ("predgen-choices-ll-lmeval", "base-lmeval:rank"),
           ("predgen-choices-ll-lmeval", "predgen-choices-ll-lmeval:decoded"),
           ("predgen-expected", "predgen-expected:expected_value")]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--variants", nargs="+", default=None, choices=list(VARIANTS), help="default: each task's")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--collect-only", action="store_true")
    ap.add_argument("--quick", action="store_true", help="smoke test: 2 steps, a few examples, seed 0, ARC-Easy")
    ap.add_argument("--runs-dir", type=Path, default=ROOT / "runs" / "bench-predgen-mc")
    ap.add_argument("--results-dir", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("overrides", nargs="*", help="extra config overrides for every run (after --)")
    args = ap.parse_args(argv)
    if args.quick:
        args.tasks, args.seeds = ["arc-easy"], [0]
    archive = args.results_dir / "runs" / ("predgen_mc_quick" if args.quick else "predgen_mc")
    if not args.collect_only:
        jobs = [(n, a) for n, a in plan(args) if finished_run(args.runs_dir / n, archive) is None]
        run_queue(jobs, 1, args.runs_dir, ROOT, threads=args.threads,
                  on_done=lambda n: finished_run(args.runs_dir / n, archive))  # archived at once
    collect(" ".join(["python", "benchmarks/predgen_mc.py", *(sys.argv[1:] if argv is None else argv)]), args,
            archive)


def plan(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    """Every run's name and command line, seed-major (partial results stay balanced)."""
    jobs = []
    for seed in args.seeds:
        for task in args.tasks:
            t = TASKS[task]
            quick = ["--config", "tiny", "--task.max_eval_examples", "4", "--task.val_examples", "2",
                     "--train.steps", "2"] if args.quick else ["--config", "small", "--train.steps", str(t["steps"])]
            for v in args.variants or t["variants"]:
                name = f"{task}-{v}-s{seed}"
                jobs.append((name, [sys.executable, "-m", "forethought.cli", "predgen", "train", *t["args"], *quick,
                                    "--eval.latency_examples", "0", "--run.seed", str(seed), "--run.out_dir",
                                    str(args.runs_dir), "--run.name", name, "--resume", "auto", *VARIANTS[v],
                                    *args.overrides]))
    return jobs


def collect(command: str, args: argparse.Namespace, archive: Path) -> dict:
    seen = invocations(archive, command)  # kept beside the archived runs (a fresh machine keeps the list)
    res: dict = {"command": " ; ".join(seen), "base": "smollm2-135m", "adapter": "LoRA r=16 (all linear layers)",
                 "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                             "threads_per_run": args.threads, "parallel_runs": 1},
                 "seeds": args.seeds, "quick": args.quick, "tasks": {}}
    for task, t in TASKS.items():
        records: dict[str, dict[int, dict]] = {}
        for v in VARIANTS:
            for seed in args.seeds:
                rec = finished_run(args.runs_dir / f"{task}-{v}-s{seed}", archive)
                if rec is not None:
                    res["wall_s"] = res.get("wall_s", 0.0) + rec["finished"] - rec["started"]  # train + evaluate
                    records.setdefault(v, {})[seed] = rec
        if records:  # the MC default is picked on the validation split, never the eval split
            res["tasks"][task] = task_entry(records, t["metric"], COMPARE, SELECT, paired, steps=t["steps"],
                                            args=t["args"])
    out = args.results_dir / ("predgen_mc_quick.json" if args.quick else "predgen_mc.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    plot(res, out.with_suffix(".png"))
    print(json.dumps({t: {v: m.get("prediction") for v, m in e["methods"].items()} for t, e in res["tasks"].items()},
                     indent=1))
    return res


def plot(res: dict, path: Path) -> None:
    """Accuracy of each MC variant's answers (mean over seeds, error bar = std), one panel per task."""
    from forethought.core.plots import pyplot, save_figure

    tasks = [t for t, e in res["tasks"].items() if e["metric"] == "accuracy"]
    if not tasks:
        return
    plt = pyplot()
    fig, axes = plt.subplots(1, len(tasks), figsize=(7 * len(tasks), 4.2), squeeze=False, layout="constrained")
    for ax, task in zip(axes[0], tasks):
        labels, means, stds = [], [], []
        for v, m in res["tasks"][task]["methods"].items():
            for key in ("prediction", "decoded", "rank"):
                if key in m and not (key == "prediction" and v.startswith(("base", "generator"))):
                    labels.append(f"{v}" if key == "prediction" else f"{v} ({key})")
                    means.append(m[key])
                    stds.append(m.get(f"{key}_std") or 0.0)
        ax.barh(range(len(labels)), means, xerr=stds, color="tab:blue", alpha=0.7)
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        ax.invert_yaxis()
        ax.set(xlabel="accuracy (eval split)", title=task)
        ax.grid(alpha=0.3, axis="x")
    save_figure(fig, path)


if __name__ == "__main__":
    main()
