"""Results of the PredGen benchmarks whose JSON is not an experiment spec's collected file (written before the
runner, or by a script), as markdown; collected JSON renders through :mod:`forethought.report.experiment`."""

from __future__ import annotations

from forethought.report.common import SMOLLM2
from forethought.report.common import smollm2 as _smollm2
from forethought.report.fmt import interval, mean_std, table
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


def _seed_cells(d: dict) -> str:
    """A paired comparison's per-seed cells: ``s<seed> difference [95 % interval], p <McNemar>``, "; "-joined."""
    cells = []
    for s, row in d["per_seed"].items():
        x = row if "difference" in row else row[d["metric"]]
        p = f", p {row['mcnemar']['p_value']:.2g}" if "mcnemar" in row else ""
        cells.append(f"s{s} {x['difference']:+.3f} {interval(x['ci95'])}{p}")
    return "; ".join(cells)


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


def words(r: dict) -> list[str]:
    """The token-level analysis: the input words most associated (NPMI) with each answer the model writes."""
    out = [f"{r['model']}; {r['task']}, {r['examples']} examples; words in at least {r['min_count']} examples; "
           f"the written answer matches the target on {r['answers_match_targets']:.3f} of them.", "",
           f"Definition: {r['definition']}.", "",
           "| answer (examples) | top words: NPMI (examples with this answer / with the word) |", "|---|---|"]
    for answer, x in r["per_answer"].items():
        top = ", ".join(f"{w['word']} {w['npmi']:.2f} ({w['with_answer']}/{w['examples']})" for w in x["top"])
        out.append(f"| {answer} ({x['answered']}) | {top} |")
    return out


MC_ANSWERS = ("prediction", "decoded", "rank", "rank_norm", "expected_value", "validation")


def mc(r: dict) -> list[str]:
    """benchmarks/predgen_mc.py: each variant's answers per task (mean ± std over seeds), the variant picked on the
    validation split, and the paired differences (per seed and over seeds)."""
    out = [f"{_smollm2(r['base'])} + {r['adapter']}, seeds {', '.join(map(str, r['seeds']))}"
           + (" (a `--quick` smoke run: its numbers mean nothing)" if r.get("quick") else "") + ".", ""]
    for task, e in r["tasks"].items():
        k = e["metric"]
        keys = [a for a in MC_ANSWERS if any(a in m for m in e["methods"].values())]
        rows = [[v, *(mean_std(m.get(a), m.get(f"{a}_std")) for a in keys), f"{m['train_wall_s'] / 60:.1f}"]
                for v, m in e["methods"].items()]
        picked = e.get("selected_on_validation")
        out += [f"**{task}** ({k} on the eval split; `validation` = on the examples carved from the training data; "
                f"{e['steps']} steps)" + (f". Picked on validation: `{picked}`." if picked else "."), "",
                *table(["variant", *(a.replace("_", " ") for a in keys), "train wall per run (min)"], rows), ""]
        prow = []
        for name, d in e["paired"].items():
            prow.append([" − ".join(_mc_side(x) for x in name.split("_minus_")), _seed_cells(d),
                         f"{d['seed_mean_difference']:+.3f} {interval(d['ci95_of_seed_mean'])}"])
        if prow:
            out += [*table(["comparison (first − second)", "per seed [95 % interval]", "seed mean [95 % interval]"],
                           prow), ""]
    return out[:-1] if out and out[-1] == "" else out


def _mc_side(side: str) -> str:
    """'generator_rank' -> 'generator (rank)': variant names use hyphens, answer keys underscores."""
    variant, _, key = side.partition("_")
    return f"{variant} ({key.replace('_', ' ')})" if key else variant


# the MC variants as the PredGen doc names them: variant -> (model, prompt)
MC_LABELS = {
    "base-lmeval": ("untrained (`--method base`)", "lm-eval"),
    "generator-lmeval": ("Generator", "lm-eval"),
    "predgen-choices-lmeval": ("PredGen, choice-scoring adapter without log-likelihoods", "lm-eval"),
    "predgen-choices-ll-lmeval": ("PredGen, choice-scoring adapter (the default)", "lm-eval"),
    "base": ("untrained (`--method base`)", "lists the choices"),
    "predictor": ("Predictor", "lists the choices"),
    "generator": ("Generator", "lists the choices"),
    "predgen": ("PredGen, states adapter", "lists the choices"),
    "predgen-choices": ("PredGen, choice-scoring adapter without log-likelihoods", "lists the choices"),
    "predgen-choices-a1": ("PredGen, the same starting at α 1", "lists the choices"),
    "predgen-choices-ll": ("PredGen, choice-scoring adapter (the default)", "lists the choices"),
    "predgen-logits": ("PredGen, the reference's logit adapter", "lists the choices"),
    "generator-name": ("Generator", "names the choices (answer1..)"),
    "predgen-name": ("PredGen, states adapter", "names the choices (answer1..)"),
}
# the comparisons the doc leads with: (key in "paired", what it says)
MC_LEAD_PAIRS = [
    ("predgen-choices-ll-lmeval_minus_predgen-choices-ll-lmeval_decoded", "PredGen's prediction − its own written "
     "answer"),
    ("predgen-choices-ll-lmeval_minus_generator-lmeval", "PredGen's prediction − the Generator's written answer"),
    ("predgen-choices-ll-lmeval_minus_generator-lmeval_rank", "PredGen's prediction − the Generator's rank decoder"),
    ("predgen-choices-ll-lmeval_minus_base-lmeval_rank", "PredGen's prediction − the untrained model's rank "
     "decoder"),
    ("predgen-choices-ll-lmeval_minus_predgen-choices-lmeval", "reading the log-likelihoods (one change)"),
    ("predgen-choices-lmeval_minus_predgen-choices", "lm-eval's prompt instead of the listed choices (one change)"),
    ("predictor_minus_base-lmeval_rank", "the Predictor − the untrained model's rank decoder"),
]


def _seeds(m: dict, key: str) -> list[str]:
    return [s for s, v in m["per_seed"].items() if key in v]


def mc_lead(r: dict) -> list[str]:
    """docs/predgen.md's lead: each MC task's table of every variant's answers (mean ± std over the seeds that
    ran), the comparisons that carry the claim (per seed and the seed-mean interval), STS-B's adapter against the
    expected value."""
    out: list[str] = []
    for task in ("arc-easy", "arc-challenge"):
        e = r["tasks"].get(task)
        if not e:
            continue
        n_eval = e["args"][e["args"].index("--task.max_eval_examples") + 1]
        out += [f"**{task}**: answers written as the choice's text, {_smollm2(r['base'])} + LoRA, {e['steps']} "
                f"training steps, up to {int(n_eval):,} test items per seed; accuracy, mean ± std over the seeds "
                "that ran.", ""]
        rows = []
        for v, (model, prompt) in MC_LABELS.items():
            m = e["methods"].get(v)
            if m is None:
                continue
            pred = "–" if v.startswith(("base", "generator")) else mean_std(m.get("prediction"),
                                                                           m.get("prediction_std"))
            dec = mean_std(m.get("decoded"), m.get("decoded_std")) if "decoded" in m else "–"
            rank = mean_std(m.get("rank"), m.get("rank_std")) if "rank" in m else "–"
            rows.append([model, prompt, ", ".join(_seeds(m, "prediction")), pred, dec, rank])
        out += [*table(["model", "prompt", "seeds", "its prediction", "decoded (greedy)", "rank decoder"], rows), ""]
        lines = []
        for key, what in MC_LEAD_PAIRS:
            d = e["paired"].get(key)
            if d is None:
                continue
            per = ", ".join(f"{x:+.3f}" for x in d["per_seed_difference"])
            iv = d["ci95_of_seed_mean"]
            lines.append(f"- {what}: {d['seed_mean_difference']:+.3f}"
                         + (f", 95 % interval of the seed mean {interval(iv)}" if iv else " (one seed: no interval)")
                         + f" (seeds {', '.join(map(str, d['seeds']))}: {per})")
        picked = e.get("selected_on_validation")
        if picked:
            sel = e["selection"]
            lines.append(f"- Best mean validation accuracy over the PredGen variants (seeds "
                         f"{', '.join(sel['seeds'])}, the examples carved from the training data): `{picked}` "
                         f"({sel['validation'][picked]:.3f}).")
        out += [*lines, ""] if lines else []
    sts = r["tasks"].get("stsb", {}).get("paired", {}).get("predgen-expected_minus_predgen-expected_expected_value")
    if sts:
        iv = sts["ci95_of_seed_mean"]
        out += [f"**STS-B** (MSE, lower is better): PredGen's adapter − the expected-value decoder of the same model "
                f"{sts['seed_mean_difference']:+.3f}"
                + (f", 95 % interval of the seed mean {interval(iv)}" if iv else " (one seed)")
                + f" (seeds {', '.join(map(str, sts['seeds']))}: "
                + ", ".join(f"{x:+.3f}" for x in sts["per_seed_difference"]) + ").", ""]
    return out[:-1] if out and out[-1] == "" else out
