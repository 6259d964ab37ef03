"""Results of the PredGen benchmarks whose JSON is not an experiment spec's collected file (written before the
runner, or by a script), as markdown; collected JSON renders through :mod:`forethought.report.experiment`."""

from __future__ import annotations

import dataclasses

from forethought.experiments.paper_grid import VARIANT_WORDS
from forethought.experiments.spec import load_spec
from forethought.report import experiment
from forethought.report.common import SMOLLM2
from forethought.report.common import smollm2 as _smollm2
from forethought.report.fmt import mean_std, table
from forethought.report.fmt import num as _fmt
from forethought.report.papers import PREDGEN_SST2


def sst2(r: dict) -> list[str]:
    b = r.get("budget", {})
    out = [f"{SMOLLM2} + LoRA r=16 (all linear layers), {b.get('steps')} steps × {b.get('batch_size')} examples "
           f"per run (the same examples in the same order for every method), SST-2 dev (872).", "",
           "| method | accuracy (mean ± std) | per seed | train wall per run (min) | reference code (SmolLM-135M) |",
           "|---|---|---|---|---|"]
    for m in ("predictor", "generator", "predgen"):
        if m not in r:
            out.append(f"| {m} | – | – | – | {_fmt(PREDGEN_SST2.values.get(m))} |")
            continue
        row = r[m]
        seeds = ", ".join(f"{a:.3f}" for a in row["per_seed"])
        out.append(f"| {m} | {row['accuracy']:.3f} ± {row['std']:.3f} | {seeds} | "
                   f"{row['train_wall_s_mean'] / 60:.1f} | {_fmt(PREDGEN_SST2.values.get(m))} |")
    d = r.get("predgen_minus_predictor")
    if d:
        out.append(f"\nPredGen − Predictor: {d['mean']:+.3f} ± {d['stderr']:.3f} (standard error over "
                   f"{len(d['per_seed'])} seeds).")
    out.append(f"\nReference code: {PREDGEN_SST2.source}.")
    return out




def mine(r: dict) -> list[str]:
    out = [f"{r['task']}; checkpoints: {r['checkpoints']} ({SMOLLM2} + LoRA). H(Y) = {r['h_y']:.3f} nats.", "",
           "| method | I(Y; pooled last state) | I(Y; pooled mean) | I(Y; answer-token states) |", "|---|---|---|---|"]
    for m in ("predictor", "generator", "predgen"):
        if m in r:
            x = r[m]
            out.append(f"| {m} | {x['mi_pooled']:.3f} ± {x['mi_pooled_std']:.3f} | "
                       f"{x['mi_pooled_mean_pooling']:.3f} | "
                       f"{x['mi_tokens']:.3f} ± {x['mi_tokens_std']:.3f} |")
    return out


def regression(r: dict) -> list[str]:
    out = [f"{_smollm2(r['base'])}; seed 0; each method's own prediction (PredGen: the adapter's), its decoded "
           "number and the "
           "expected value over the number format.", "",
           "| task | method | steps × batch | train wall (min) | eval examples | MSE | Pearson | Spearman | "
           "decoded MSE / Pearson | expected-value MSE / Pearson | parse failures |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]

    def pair(d: dict | None) -> str:
        return "–" if d is None else f"{d['mse']:.3f} / {d['pearson']:.3f}"

    methods = ("predictor", "generator", "predgen")
    for task in (t for t in r if isinstance(r[t], dict) and any(m in r[t] for m in methods)):
        for m in methods:
            if m not in r[task]:
                continue
            x = r[task][m]
            out.append(f"| {task} | {m} | {x['steps']} × {x['batch_size']} | {x['train_wall_s'] / 60:.0f} | "
                       f"{x['eval_examples']} | {x['mse']:.3f} | {x['pearson']:.3f} | {x['spearman']:.3f} | "
                       f"{pair(x.get('decoded'))} | {pair(x.get('expected_value'))} | "
                       f"{_fmt(x.get('parse_failure_rate'))} |")
    return out


def grid_lead(r: dict) -> list[str]:
    """The predgen_grid block that opens docs/predgen.md: how much of the grid has run, then its tables (one per
    task family), the seed-paired differences and each multiple-choice run's agreement with its rank decoder."""
    spec = load_spec("predgen_grid")[0]
    done, left = len(r["runs"]), len(r["unfinished"])
    status = (f"{done} of {done + left} planned runs have finished; the rest resume with the same command. "
              "Groups missing below have not run yet." if left else f"All {done} planned runs have finished.")
    return [status, "", *experiment.summary(spec, r, derived=("comparisons", "agreement"))]


def own_tokens_lead(r: dict) -> list[str]:
    """predgen_speed's table of the scheduled-sampling step with the model's own tokens by the roll-out and by the
    one-pass approximation (docs/predgen.md, where the two forms are described)."""
    spec = load_spec("predgen_speed")[0]
    picked = [t for t in spec.tables if "rollout_p05_s" in (t.measures or [])]
    return experiment.measure_tables(dataclasses.replace(spec, tables=picked), r)


def paper_table(r: dict) -> list[str]:
    """predgen_paper_grid's derived table in the paper's layout: a row per dataset, a column per method, each cell
    our mean ± std over seeds (number of seeds) and, where it is kept, the paper's Llama2-7B number."""
    derived = r.get("derived", {})
    rows = []
    for task, row in derived.get("table", {}).items():
        metric = next((c["metric"] for c in row.values() if "metric" in c), "–")
        cells = []
        for method in VARIANT_WORDS:
            c = row.get(method, {})
            ours = (f"{mean_std(c['mean'], c.get('std'))} ({len(c.get('seeds', []))})" if "mean" in c else "–")
            cells.append(ours + (f" · paper {c['paper']:.2f} %" if "paper" in c else ""))
        rows.append([task, metric, *cells])
    if not rows:
        return []
    source = derived.get("paper_source")
    return [*table(["dataset", "metric", "Predictor", "Generator", "PredGen"], rows), "",
            "Ours: fractions (accuracy) or MSE, mean ± std over seeds (number of seeds). "
            + (f"Paper: {source}." if source else "The paper's per-dataset numbers for this base are not kept.")]
