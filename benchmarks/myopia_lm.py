"""Benchmark: vanilla vs myopic language modelling on WikiText-2 (our GPT from scratch, same budget), over seeds.

Runs ``forethought myopia lm --config small`` per seed as two single-threaded processes side by side (2 cores):
one trains ``vanilla`` and the other ``detach_hidden`` (myopic); on the ``--baseline-seeds`` the first also trains
``local`` (local-myopic reads the frozen trained vanilla model) and the second ``zero_past`` (the
transformer-bigram baseline). Every model of a seed shares that seed's initialisation and data order. Writes ``benchmarks/results/myopia_lm.json``: validation loss (nats) per
variant and seed, means ± std, the gap (myopic − vanilla), the paper's local-myopic bonus (vanilla − local) and
myopic − local as paired per-seed differences with a t-interval of their mean, the gap over the benefit of context
(myopic − vanilla) / (bigram − vanilla), per-position curves (mean over seeds) and the paper's figures beside ours;
plus the per-position plot. Resumable: rerunning continues unfinished runs and skips finished ones. Needs
FORETHOUGHT_DATA (a data root with wikitext-2/). ``--from-json`` re-derives every summary from the per-seed losses
already in myopia_lm.json (no runs needed, e.g. after a definition changed).

    FORETHOUGHT_DATA=../shared/data python benchmarks/myopia_lm.py [--seeds 0 1 2] [--baseline-seeds 0] [--steps 800]
    python benchmarks/myopia_lm.py --from-json
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

from forethought.experiments import invocations, run_started
from forethought.experiments.jobs import run_queue_or_exit as run_queue
from forethought.experiments.myopia import lm_summary, variant_stats

ROOT = Path(__file__).resolve().parents[1]

OUT = ROOT / "benchmarks" / "results"
RUNS = ROOT / "runs" / "bench-myopia-lm"
GROUPS = {"a": ["vanilla", "local"], "b": ["detach_hidden", "zero_past"]}
PAPER = {"model": "GPT-2 124M from scratch, 64-token sequences (Wu et al. 2024)", "vanilla": 3.28, "myopic": 3.40,
         "gap": 0.12, "transformer_bigram": 5.33, "local_myopic": 3.26, "local_myopic_bonus": 0.02,
         "myopic_minus_local": 0.14, "gap_over_context": round(0.12 / (5.33 - 3.28), 4),
         "note": "local_myopic_bonus = vanilla − local (the paper's definition); gap_over_context = "
                 "(myopic − vanilla) / (bigram − vanilla)"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--baseline-seeds", type=int, nargs="*", default=[0],
                    help="seeds that also train local and zero_past (each costs about one more model)")
    ap.add_argument("--jobs", type=int, default=2, help="parallel single-threaded processes")
    ap.add_argument("--collect-only", action="store_true", help="only assemble the JSON from finished runs")
    ap.add_argument("--from-json", action="store_true",
                    help="re-derive the summaries from the per-seed losses in the existing myopia_lm.json")
    args = ap.parse_args()
    if args.from_json:
        rederive(OUT / "myopia_lm.json")
        return
    if not os.environ.get("FORETHOUGHT_DATA"):
        sys.exit("set FORETHOUGHT_DATA to a data root with wikitext-2/ (e.g. ../shared/data)")
    if not args.collect_only:
        queue = []
        for seed in args.seeds:
            for group, variants in GROUPS.items():
                variants = variants if seed in args.baseline_seeds else variants[:1]
                name = f"s{seed}-{group}"
                queue.append((f"bench-myopia-lm-{name}",
                              [sys.executable, "-m", "forethought.cli", "myopia", "lm", "--config", "small",
                               "--run.out_dir", str(RUNS), "--run.name", name, "--run.seed", str(seed),
                               "--train.steps", str(args.steps), "--resume", "auto",
                               "--variants", "[" + ",".join(variants) + "]"]))
        RUNS.mkdir(parents=True, exist_ok=True)
        run_queue(queue, args.jobs, RUNS.parent, ROOT)
    collect(" ".join(["python", *sys.argv]))


def collect(command: str) -> None:
    """Assemble every finished run under RUNS, whichever invocation trained it (all invocations are listed in
    ``command``; ``wall_s`` spans from the first run's start to now)."""
    seen = invocations(RUNS, command)
    loss: dict[str, dict[int, float]] = {}
    per_pos: dict[str, dict[int, list[float]]] = {}
    curves: dict[str, list] = {}
    wall: dict[str, list[float]] = {}
    setup, starts, run_commands = None, [], {}
    for d in sorted(RUNS.glob("s*-[ab]")):
        rfile = d / "results.json"
        if not rfile.is_file():
            print(f"missing {rfile}; skipped (unfinished)")
            continue
        seed = int(d.name[1:].split("-")[0])
        r = json.loads(rfile.read_text())
        starts.append(run_started(d))
        run_commands[d.name] = json.loads((d / "env.json").read_text())["command"]
        setup = setup or {k: r[k] for k in ("base", "corpus", "tokenizer", "seq_len", "steps", "batch_size",
                                            "tokens_seen", "eval_sequences", "params")}
        for variant, x in r["variants"].items():
            loss.setdefault(variant, {})[seed] = x["val_loss"]
            per_pos.setdefault(variant, {})[seed] = x["per_position"]
            curves[f"{variant}/seed{seed}"] = x["curve"]
            wall.setdefault(variant, []).append(x["train_wall_s"])
    res: dict = {"command": " ; ".join(seen), "wall_s": time.time() - min(starts) if starts else 0.0,
                 "run_commands": run_commands,
                 "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "threads_per_run": 1,
                             "parallel_runs": 2},
                 "setup": setup, "metric": "validation cross-entropy (nats/token), mean over positions",
                 "per_seed": {v: {str(s): x for s, x in sorted(d.items())} for v, d in loss.items()}}
    res.update(variant_stats(loss))
    for variant in loss:
        res[f"{variant}_train_wall_s"] = statistics.fmean(wall[variant])
    # the headline keys stay numbers (means over seeds), as before
    res["vanilla"] = res.get("vanilla_mean")
    res["myopic"] = res.get("detach_hidden_mean")
    res["local_myopic"] = res.get("local_mean")
    res["transformer_bigram"] = res.get("zero_past_mean")
    summarise(res, loss)
    gap = res["gap_paired"]
    res["per_position_mean"] = {v: [statistics.fmean(c) for c in zip(*d.values())] for v, d in per_pos.items()}
    if gap:
        diffs = [[m - v for m, v in zip(per_pos["detach_hidden"][s], per_pos["vanilla"][s])] for s in gap["seeds"]]
        res["gap_per_position_mean"] = [statistics.fmean(c) for c in zip(*diffs)]
        res["gap_per_position_std"] = [statistics.stdev(c) if len(c) > 1 else None for c in zip(*diffs)]
    res["curves"] = curves
    res["paper"] = PAPER
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "myopia_lm.json").write_text(json.dumps(res, indent=2) + "\n")
    _plot(res)
    _print(res)


SUMMARY = ("vanilla", "myopic", "gap", "local_myopic", "local_myopic_bonus", "myopic_minus_local",
           "transformer_bigram", "gap_over_context")


def _print(res: dict) -> None:
    print(json.dumps({k: res.get(k) for k in SUMMARY} | {"paper": {k: res["paper"].get(k) for k in SUMMARY}},
                     indent=2))


def summarise(res: dict, loss: dict[str, dict[int, float]]) -> None:
    """The headline keys from per-seed losses ``loss[variant][seed]`` (forethought.experiments.myopia.lm_summary:
    paired differences over the seeds both variants have; local_myopic_bonus = vanilla − local, the paper's)."""
    res.update(lm_summary(loss))


def rederive(path: Path) -> None:
    """Recompute the summaries of an existing myopia_lm.json from its per-seed losses (no retraining)."""
    res = json.loads(path.read_text())
    loss = {v: {int(s): x for s, x in d.items()} for v, d in res["per_seed"].items()}
    summarise(res, loss)
    res["paper"] = PAPER
    res["rederived"] = "summaries recomputed from per_seed by `python benchmarks/myopia_lm.py --from-json`"
    path.write_text(json.dumps(res, indent=2) + "\n")
    _print(res)


def _plot(res: dict) -> None:
    from forethought.core.plots import pyplot, save_figure

    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for v, ys in res["per_position_mean"].items():
        a.plot(range(len(ys)), ys, label=v)
    a.set(title="validation loss per position (mean over seeds)", xlabel="position t", ylabel="nats")
    a.legend()
    a.grid(alpha=0.3)
    if "gap_per_position_mean" in res:
        m = res["gap_per_position_mean"]
        s = [x or 0.0 for x in res["gap_per_position_std"]]
        t = range(len(m))
        b.plot(t, m, color="C1", label="myopic − vanilla")
        b.fill_between(t, [x - y for x, y in zip(m, s)], [x + y for x, y in zip(m, s)], color="C1", alpha=0.25,
                       label="± 1 std over seeds")
        b.axhline(0.0, color="k", lw=0.8)
        b.set(title="myopia gap per position", xlabel="position t", ylabel="nats")
        b.legend()
        b.grid(alpha=0.3)
    save_figure(fig, OUT / "myopia_lm_per_position.png")


if __name__ == "__main__":
    main()
