"""Results of the myopic-training benchmarks produced before the experiment runner (old-schema JSON) and of the
in-process ones (`benchmarks/myopia_*.py`) as markdown; the spec-run ones render through report.experiment."""

from __future__ import annotations

from forethought.report.fmt import interval, mean_std, num, table
from forethought.report.papers import MYOPIA_LM, MYOPIA_SYNTHETIC, MYOPIA_SYNTHETIC_MYOPIC


def _paired(d: dict | None, nd: int = 3) -> str:
    """A seed-paired difference: mean ± std (95 % CI of the mean)."""
    if not d:
        return "–"
    out = f"{d['mean']:+.3f}" + ("" if d.get("std") is None else f" ± {d['std']:.3f}")
    if d.get("ci95_of_mean"):
        out += f" (95 % CI of the mean {interval(d['ci95_of_mean'], f'.{nd}f')})"
    return out


def _copy_cell(r: dict, key: str) -> str:
    """The COPY level of a pre-runner file's row: at p = 1 no position copies, so it is the predict-zero level;
    below 1 those files did not measure it on their sequences ('–')."""
    row = r[key]
    if row.get("copy") is not None:
        return num(row["copy"])
    return num(row.get("predict_zero")) if float(key[2:]) == 1 else "–"


def synthetic(r: dict, paper: bool = True, keys: tuple[str, ...] | None = None) -> list[str]:
    """A pre-runner synthetic file's table (its p rows, or only ``keys``), with the COPY level beside predict-zero."""
    rows = []
    p_keys = (k for k in r if k.startswith("p=") and (keys is None or k in keys))
    for key in sorted(p_keys, key=lambda k: -float(k[2:])):
        row = r[key]
        rows.append([key[2:], f"{row.get('vanilla_steps', '–')} × {row.get('vanilla_batch_size', '–')}",
                     ", ".join(map(str, row.get("vanilla_seeds", []))),
                     mean_std(row.get("vanilla"), row.get("vanilla_std")),
                     mean_std(row.get("myopic"), row.get("myopic_std")),
                     num(MYOPIA_SYNTHETIC_MYOPIC.values.get(key)) if paper else "–",
                     _paired(row.get("myopic_minus_vanilla"), 2), _copy_cell(r, key), num(row.get("predict_zero")),
                     f"{num(row.get('vanilla_probe_r2_lag0'), '.2f')} / {num(row.get('myopic_probe_r2_lag0'), '.2f')}",
                     f"{num(row.get('vanilla_probe_r2_best_lag0_10'), '.2f')} / "
                     f"{num(row.get('myopic_probe_r2_best_lag0_10'), '.2f')}",
                     f"{num(row.get('vanilla_probe_sum_r2_last_layer'), '.2f')} / "
                     f"{num(row.get('myopic_probe_sum_r2_last_layer'), '.2f')}"])
    out = table(["p", "steps × batch", "seeds", "vanilla", "myopic", "paper myopic", "myopic − vanilla (paired)",
                 "copy", "predict zero", "probe R² lag 0 (van / myo)", "best probe R², lags 0–10 (van / myo)",
                 "probe R² of the 10-term sum, last layer (van / myo)"], rows)
    out.append("\nCopy: the loss of outputting x_n where z = 0 and zero where z = 1 (none of the sum computed); at "
               "p = 1 it is the predict-zero level" + ("" if all(float(k[2:]) == 1 for k in r if k.startswith("p=")
                                                        and (keys is None or k in keys))
                                                    else "; below 1 these runs did not measure it on their "
                                                         "sequences (–)") + ".")
    m = r.get("machine", {})
    if r.get("train_wall_s_total"):
        out.append(f"\nTraining wall time, all runs: {r['train_wall_s_total'] / 60:.0f} min ({m.get('cpu_count')} "
                   f"cores, {m.get('threads_per_run')} thread per run). ± is the standard deviation over seeds.")
    if not paper:
        return out
    v = MYOPIA_SYNTHETIC.values
    out.append(f"\nThe paper ({MYOPIA_SYNTHETIC.source}): the vanilla model reaches a normalised loss of at most "
               f"{v['vanilla_at_most']:g} at p = 1, after {v['steps']:,} steps × {v['batch_size']}; the reference "
               f"code computes the predict-zero level at p = 1 as {v['predict_zero_p1']:.4f} "
               f"({MYOPIA_SYNTHETIC.setting_note}).")
    return out


def synthetic_p1(r: dict) -> list[str]:
    """The synthetic benchmark's pre-runner file at p = 1 only: its p = 0.1 run was trained on the data stream
    before the current seed mixing, and the p-grid section holds the same run on the current stream."""
    return [*synthetic(r, keys=("p=1",)),
            "\nThe file's p = 0.1 run (seed 0) was trained on an earlier data stream; the same command on the current "
            "stream is the p = 0.1 row of [the p grid](#the-papers-p-grid-at-the-cpu-budget), which replaces it."]


def synthetic_earlier(r: dict) -> list[str]:
    """Earlier settings of the synthetic benchmark (kept for the record), without the paper's line."""
    return synthetic(r, paper=False)


def synthetic_levels(derived: dict) -> list[str]:
    """The synthetic derive's per-p rows as one table: each model's loss against the COPY level measured on the
    same evaluation sequences (paired by seed, with an interval from two seeds on), and the predict-zero level."""
    def minus(entry: dict, name: str) -> str:
        v, ci = entry.get(f"{name}_minus_copy"), entry.get(f"{name}_minus_copy_ci95")
        return "–" if v is None else f"{v:+.3f}" + (f" {interval(ci, '+.3f')}" if ci else "")

    rows = []
    for key, e in derived.items():
        if not key.startswith("p="):
            continue
        seeds = sorted({*e.get("vanilla_per_seed", {}), *e.get("myopic_per_seed", {})}, key=int)
        rows.append([key[2:], ", ".join(seeds), mean_std(e.get("vanilla"), e.get("vanilla_std")),
                     mean_std(e.get("myopic"), e.get("myopic_std")),
                     " / ".join(f"{v:.3f}" for v in e.get("copy_per_seed", {}).values()) or "–",
                     minus(e, "myopic"), minus(e, "vanilla"), num(e.get("predict_zero")), num(e.get("paper_myopic"))])
    return table(["p", "seeds", "vanilla", "myopic", "copy (per seed)", "myopic − copy (paired, 95 % CI)",
                  "vanilla − copy (paired, 95 % CI)", "predict zero", "paper myopic"], rows)


# variant key in the JSON -> (row label, key of the published number)
LM_VARIANTS = (("vanilla", "vanilla", "vanilla"), ("myopic (detach_hidden)", "detach_hidden", "myopic"),
               ("myopic, past K/V frozen (detach_kv)", "detach_kv", None),
               ("local myopic", "local", "local_myopic"),
               ("transformer bigram (zero_past)", "zero_past", "transformer_bigram"))
# seed-paired differences by key; any other '*_paired' key is shown under its own name
PAIRED_LABELS = {"gap_paired": "myopia gap (myopic − vanilla)",
                 "local_myopic_bonus_paired": "local-myopic bonus (vanilla − local, the paper's definition)",
                 "myopic_minus_local_paired": "myopic − local",
                 "context_benefit_paired": "context benefit (bigram − vanilla)",
                 "detach_kv_gap_paired": "detach_kv − vanilla",
                 "detach_kv_minus_myopic_paired": "detach_kv − detach_hidden"}
# the paper's number for each paired difference, where it gives one
PAIRED_PAPER = {"gap_paired": "gap", "local_myopic_bonus_paired": "local_myopic_bonus",
                "myopic_minus_local_paired": "myopic_minus_local"}


def lm(r: dict, model: str = "GPT") -> list[str]:
    s, paper = r["setup"], MYOPIA_LM.values
    rows = []
    for name, variant, pkey in LM_VARIANTS:
        if r.get(f"{variant}_mean") is None:
            continue
        seeds = r.get("per_seed", {}).get(variant, {})
        rows.append([name, mean_std(r.get(f"{variant}_mean"), r.get(f"{variant}_std")),
                     ", ".join(f"{v:.3f}" for v in seeds.values()) or "–",
                     num(paper.get(pkey) if pkey else None, ".2f")])
    out = [f"{s['params'] / 1e6:.1f}M-parameter {model}, {s['corpus']} ({s['tokenizer']}), {s['steps']} steps × "
           f"{s['batch_size']} × {s['seq_len']} tokens = {s['tokens_seen']:,} tokens per model; validation on "
           f"{s['eval_sequences']} windows.", "",
           *table(["model", "val loss (nats), mean ± std", "per seed", "paper (GPT-2 124M)"], rows), "",
           "Seed-paired differences (nats):", ""]
    prow = []
    for key in sorted(k for k in r if k.endswith("_paired") and isinstance(r[k], dict)):
        d = r[key]
        paper_key = PAIRED_PAPER.get(key)
        prow.append([PAIRED_LABELS.get(key, key.removesuffix("_paired").replace("_", " ")),
                     ", ".join(map(str, d.get("seeds", []))), _paired(d),
                     num(paper.get(paper_key), ".2f") if paper_key else "–"])
    out += table(["difference", "seeds", "mean ± std (95 % CI of the mean)", "paper"], prow)
    if r.get("gap_relative") is not None:
        out.append(f"\nThe gap is {100 * r['gap_relative']:.1f} % of the vanilla loss; the paper's is "
                   f"{paper['gap']:.2f} nats ({100 * paper['gap'] / paper['vanilla']:.1f} %).")
    if r.get("gap_over_context") is not None:
        out.append(f"\nThe gap over what context buys, (myopic − vanilla) / (bigram − vanilla): "
                   f"{r['gap_over_context']:.3f}; the paper's {paper['gap_over_context']:.3f}. Our small CPU model "
                   "gains far less from context than GPT-2 124M does, so the same gap is a larger share of it.")
    out.append(f"\nPaper: {MYOPIA_LM.source}; {MYOPIA_LM.setting}.")
    return out
