"""Benchmark: the myopia horizon k, a dial between myopic (k = 0) and vanilla (k = T) training.

``--myopia.horizon k`` (see forethought.myopia.wrap.make_myopic): in every attention layer query t reads the live
keys/values of positions t − k .. t and detached ones before, so through L layers the gradient of position t's loss
reaches back at most L·k positions. Two sweeps, each model one run of the project's CLI (single-threaded, two at a
time on 2 cores), resumable (rerunning continues unfinished runs and skips finished ones):

* **synthetic** (``myopia synthetic --config small``, p = 1, whose target sums sin(10·x) over the 10 previous
  inputs): a myopic model at k ∈ {0, 2, 5, 9, 10, 12} and vanilla (k = T); the normalised loss vs k says how much
  pre-caching a short horizon already buys (k = 0 is predict-zero-like, k = T the vanilla loss);
* **lm** (``myopia lm --config small``, WikiText-2): a myopic model at k ∈ {0, 1, 2, 4, 8, 16} and vanilla; the gap
  (myopic_k − vanilla) vs k. Needs FORETHOUGHT_DATA (a data root with wikitext-2/).

Writes ``benchmarks/results/myopia_horizon.json`` and ``myopia_horizon.png``.

    python benchmarks/myopia_horizon.py [--part synthetic lm] [--seeds 0] [--steps-synthetic 5000] [--steps-lm 800]
    python benchmarks/myopia_horizon.py --quick --runs /tmp/h --out /tmp/o   # tiny smoke: seconds per run
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
from pathlib import Path

from forethought.experiments import finished_runs, invocations, over_seeds, seed_paired, span_s
from forethought.experiments.jobs import run_queue_or_exit as run_queue

ROOT = Path(__file__).resolve().parents[1]

OUT = ROOT / "benchmarks" / "results"
RUNS = ROOT / "runs" / "bench-myopia-horizon"
SYNTH_K = [0, 2, 5, 9, 10, 12]
LM_K = [0, 1, 2, 4, 8, 16]
VANILLA = "T"  # the k = T point: vanilla training (a horizon >= T - 1 is vanilla exactly)


def _jobs(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    """One ``myopia <verb>`` run per (part, k, seed); k = T trains vanilla, every other k the myopic model with
    ``--myopia.horizon k``."""
    parts = {"synthetic": (args.k_synthetic, args.synthetic_config, "--modes", args.steps_synthetic,
                           ["--p_values", "[1.0]"], args.synthetic_set),
             "lm": (args.k_lm, args.lm_config, "--variants", args.steps_lm, [], args.lm_set)}
    queue = []
    for seed in args.seeds:
        for part in ("synthetic", "lm"):
            if part not in args.part:
                continue
            ks, config, which, steps, extra, overrides = parts[part]
            for k in [*ks, VANILLA]:
                name = f"{part}-k={k}-s{seed}"
                model = "vanilla" if k == VANILLA else "detach_hidden"
                horizon = [] if k == VANILLA else ["--myopia.horizon", str(k)]
                queue.append((f"bench-myopia-horizon-{name}",
                              [sys.executable, "-m", "forethought.cli", "myopia", part, "--config", config,
                               "--run.out_dir", str(args.runs), "--run.name", name, "--run.seed", str(seed), *extra,
                               which, f"[{model}]", "--train.steps", str(steps), *horizon, "--resume", "auto",
                               *overrides]))
    return queue


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", nargs="+", choices=["synthetic", "lm"], default=["synthetic", "lm"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--k-synthetic", type=int, nargs="+", default=SYNTH_K)
    ap.add_argument("--k-lm", type=int, nargs="+", default=LM_K)
    ap.add_argument("--steps-synthetic", type=int, default=5000)
    ap.add_argument("--steps-lm", type=int, default=800)
    ap.add_argument("--jobs", type=int, default=2, help="parallel single-threaded processes")
    ap.add_argument("--collect-only", action="store_true", help="only assemble the JSON from finished runs")
    ap.add_argument("--quick", action="store_true", help="smoke: tiny presets, a few steps, k in {0, 2} and T")
    ap.add_argument("--runs", type=Path, default=RUNS)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    args.synthetic_config, args.lm_config, args.synthetic_set, args.lm_set = "small", "small", [], []
    if args.quick:
        args.synthetic_config, args.lm_config = "tiny", "tiny"
        args.k_synthetic, args.k_lm, args.seeds = [0, 2], [0, 2], args.seeds[:1]
        args.steps_synthetic, args.steps_lm = 10, 6
        args.synthetic_set = ["--eval_sequences", "128", "--probe.train_sequences", "64",
                              "--probe.test_sequences", "32"]
    elif "lm" in args.part and not args.collect_only and not os.environ.get("FORETHOUGHT_DATA"):
        ap.error("the lm part needs FORETHOUGHT_DATA (a data root with wikitext-2/), or --part synthetic")
    if not args.collect_only:
        args.runs.mkdir(parents=True, exist_ok=True)
        prefix = "bench-myopia-horizon-"  # finished runs (results.json written) are skipped, not re-evaluated
        todo = [j for j in _jobs(args) if not (args.runs / j[0][len(prefix):] / "results.json").is_file()]
        run_queue(todo, args.jobs, args.runs.parent, ROOT)
    collect(args.runs, args.out, " ".join(["python", "benchmarks/myopia_horizon.py",
                                           *(sys.argv[1:] if argv is None else argv)]))


def _k(text: str) -> int | str:
    return text if text == VANILLA else int(text)


def collect(runs: Path, out: Path, command: str) -> dict:
    """Every finished run (its folder under ``runs``, else its record archived in ``out``/runs/myopia_horizon,
    committed for the benchmark): loss per k (mean over seeds), the synthetic fraction of the myopic −
    vanilla difference that horizon k recovers, and the LM gap per k."""
    archive = out / "runs" / "myopia_horizon"
    seen = invocations(archive, command)  # kept beside the archived runs
    synth: dict = {}
    lm: dict = {}
    walls, escape = {}, {}
    records = finished_runs(runs, archive, "*-k=*-s*")
    for name, record in records.items():
        part, rest = name.split("-k=", 1)
        k_text, seed_text = rest.rsplit("-s", 1)
        k, seed = _k(k_text), int(seed_text)
        r = record["results"]
        if part == "synthetic":
            row = r["p=1"]
            m = row["vanilla" if k == VANILLA else "detach_hidden"]
            synth.setdefault(str(k), {})[seed] = m["normalised_loss"]
            synth.setdefault("predict_zero", {})[seed] = row["predict_zero"]
            escape.setdefault(str(k), {})[str(seed)] = escape_step(m["curve"], row["predict_zero"])
            walls[name] = m["train_wall_s"]
        else:
            v = r["variants"]["vanilla" if k == VANILLA else "detach_hidden"]
            lm.setdefault(str(k), {})[seed] = v["val_loss"]
            walls[name] = v["train_wall_s"]
    res: dict = {"command": " ; ".join(seen), "wall_s": span_s(records),
                 "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "threads_per_run": 1},
                 "definition": "horizon k: in every attention layer query t reads live K/V of positions t-k..t and "
                               "detached K/V (detach_hidden) before; through L layers the gradient of position t's "
                               "loss reaches back at most L*k positions; k = T is vanilla",
                 "train_wall_s": walls}
    res["synthetic"] = _summary(synth, "normalised_loss", lower_ref="predict_zero")
    for k, row in res["synthetic"]["per_k"].items():  # when training left predict-zero sets the loss at the end
        row["escape_step"] = escape.get(k)
    res["lm"] = _summary(lm, "val_loss")
    out.mkdir(parents=True, exist_ok=True)
    (out / "myopia_horizon.json").write_text(json.dumps(res, indent=2) + "\n")
    _plot(res, out / "myopia_horizon.png")
    print(json.dumps({p: {k: v.get("mean") for k, v in res[p].get("per_k", {}).items()} for p in ("synthetic", "lm")},
                     indent=2))
    return res


def escape_step(curve: list, predict_zero: float, fraction: float = 0.8) -> int | None:
    """The first logged step whose training loss (normalised) is below ``fraction`` × the predict-zero level:
    when the run left predict-zero (None if it never did)."""
    return next((int(step) for step, loss in curve if loss < fraction * predict_zero), None)


def _summary(loss: dict, metric: str, lower_ref: str | None = None) -> dict:
    """Per k over seeds (:func:`over_seeds`); against vanilla (k = T) the seed-paired difference
    (``minus_vanilla`` its mean, ``minus_vanilla_paired`` with its interval) and, against k = 0, the fraction of
    the myopic − vanilla difference that horizon k recovers (mean over the seeds all three have)."""
    ref = loss.pop(lower_ref, None) if lower_ref else None
    out: dict = {"metric": metric, "per_k": {}}
    if ref:
        out[lower_ref] = over_seeds(ref)["mean"]
    ks = sorted((k for k in loss if k != VANILLA), key=int) + ([VANILLA] if VANILLA in loss else [])
    van, myo = loss.get(VANILLA, {}), loss.get("0", {})
    for k in ks:
        row = out["per_k"][k] = over_seeds(loss[k])
        if set(loss[k]) & set(van):  # paired by seed: same initialisation and data order
            row["minus_vanilla_paired"] = seed_paired(loss[k], van)
            row["minus_vanilla"] = row["minus_vanilla_paired"]["mean"]
        both = sorted(set(loss[k]) & set(van) & set(myo))
        if both and all(myo[s] != van[s] for s in both):
            row["fraction_recovered"] = statistics.fmean((myo[s] - loss[k][s]) / (myo[s] - van[s]) for s in both)
    return out


def _plot(res: dict, path: Path) -> None:
    from forethought.core.plots import pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, part, ylabel in ((axes[0], "synthetic", "normalised loss (p = 1)"), (axes[1], "lm", "gap (nats)")):
        per = res[part]["per_k"]
        ks = [k for k in per if k != VANILLA]
        if not ks:
            ax.set_title(f"{part}: no runs")
            continue
        if part == "synthetic":
            ax.plot([int(k) for k in ks], [per[k]["mean"] for k in ks], "o-", label="myopic, horizon k")
            if VANILLA in per:
                ax.axhline(per[VANILLA]["mean"], color="C2", ls="--", label="vanilla (k = T)")
            if "predict_zero" in res[part]:
                ax.axhline(res[part]["predict_zero"], color="k", lw=0.8, label="predict zero")
        else:
            ks = [k for k in ks if "minus_vanilla" in per[k]]
            ax.plot([int(k) for k in ks], [per[k]["minus_vanilla"] for k in ks], "o-", label="myopic_k − vanilla")
            ax.axhline(0.0, color="k", lw=0.8)
        ax.set(title=f"{part}: loss vs myopia horizon k", xlabel="horizon k", ylabel=ylabel)
        ax.legend()
        ax.grid(alpha=0.3)
    save_figure(fig, path)


if __name__ == "__main__":
    main()
