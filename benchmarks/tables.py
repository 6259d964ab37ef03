"""Print README's results tables (markdown) from the committed ``benchmarks/results/*.json``, so every number
in README comes from a file a benchmark script wrote.

    python benchmarks/tables.py
"""

from __future__ import annotations

import json
import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def _load(name: str) -> dict | None:
    p = RESULTS / name
    return json.loads(p.read_text()) if p.is_file() else None


def _fmt(x: float | None, nd: int = 3) -> str:
    return "–" if x is None else f"{x:.{nd}f}"


def _mean_std(row: dict, name: str) -> str:
    m, sd = row.get(name), row.get(f"{name}_std")
    return _fmt(m) if sd is None else f"{m:.3f} ± {sd:.3f}"


# Wu et al. 2024's myopic normalised loss per p (../shared/SPEC.md), for files written before they carried it
PAPER_MYOPIC = {"p=1": 1.257, "p=0.3": 1.034, "p=0.1": 0.966, "p=0.01": 1.103}


def myopia_synthetic() -> list[str]:
    r = _load("myopia_synthetic.json")
    if r is None:
        return ["(myopia_synthetic.json not yet produced)"]
    out = ["| p | steps × batch | seeds | vanilla | myopic | paper myopic | myopic − vanilla (paired) | predict zero | "
           "probe R² lag 0 (van / myo) | best probe R², lags 0–10 (van / myo) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for key in sorted((k for k in r if k.startswith("p=")), key=lambda k: -float(k[2:])):
        row = r[key]
        d = row.get("myopic_minus_vanilla")
        diff = "–" if d is None else (f"{d['mean']:+.3f}" + ("" if d["std"] is None else f" ± {d['std']:.3f}"))
        if d and d.get("ci95_of_mean"):
            diff += f" (95 % CI of the mean [{d['ci95_of_mean'][0]:.2f}, {d['ci95_of_mean'][1]:.2f}])"
        seeds = ", ".join(map(str, row.get("vanilla_seeds", [])))
        out.append(f"| {key[2:]} | {row.get('vanilla_steps', '–')} × {row.get('vanilla_batch_size', '–')} | {seeds} | "
                   f"{_mean_std(row, 'vanilla')} | {_mean_std(row, 'myopic')} | {_fmt(row.get('paper_myopic', PAPER_MYOPIC.get(key)))} | "
                   f"{diff} | "
                   f"{_fmt(row.get('predict_zero'))} | "
                   f"{_fmt(row.get('vanilla_probe_r2_lag0'), 2)} / {_fmt(row.get('myopic_probe_r2_lag0'), 2)} | "
                   f"{_fmt(row.get('vanilla_probe_r2_best_lag0_10'), 2)} / "
                   f"{_fmt(row.get('myopic_probe_r2_best_lag0_10'), 2)} |")
    out.append(f"\nTraining wall time, all runs: {r.get('train_wall_s_total', 0) / 60:.0f} min "
               f"({r['machine'].get('cpu_count')} cores, {r['machine'].get('threads_per_run')} thread per run). "
               "± is the standard deviation over seeds.")
    return out


# Every table that used the offline `smollm2-135m` says which weights those are.
SMOLLM2 = "SmolLM2-135M-Instruct dequantised from its 4-bit Q4_1 GGUF (the offline `smollm2-135m`)"


def _smollm2(name: str) -> str:
    """'smollm2-135m + LoRA ...' -> the full description of those weights + ' + LoRA ...'."""
    return re.sub(r"^smollm2-135m", SMOLLM2, name.strip(), flags=re.IGNORECASE)


def myopia_step_cost() -> list[str]:
    r = _load("myopia_step_cost.json")
    if r is None:
        return ["(myopia_step_cost.json not yet produced)"]
    out = ["| model | batch × seq | vanilla step (s) | myopic step (s) | myopic / vanilla |", "|---|---|---|---|---|"]
    for key in ("gpt", "smollm2", "pythia"):
        m = r.get(key)
        if m:
            out.append(f"| {key} ({m.get('params', 0) / 1e6:.0f}M) | {m['batch_size']} × {m['seq_len']} | "
                       f"{_fmt(m['vanilla_median_s'])} | {_fmt(m['myopic_median_s'])} | {_fmt(m['ratio'], 2)} |")
    if "smollm2" in r:
        out.append(f"\nsmollm2 = {SMOLLM2}.")
    if "reference_ratio" in r.get("gpt", {}):
        out.append(f"\nThe explicit O(T²) reference form costs {r['gpt']['reference_ratio']:.2f}× vanilla on the GPT.")
    return out


def _paired_text(d: dict | None) -> str:
    if not d:
        return "–"
    out = f"{d['mean']:+.3f}" + ("" if d.get("std") is None else f" ± {d['std']:.3f}")
    if d.get("ci95_of_mean"):
        out += f" (95 % CI of the mean [{d['ci95_of_mean'][0]:.3f}, {d['ci95_of_mean'][1]:.3f}])"
    return out


def myopia_lm() -> list[str]:
    r = _load("myopia_lm.json")
    if r is None:
        return ["(myopia_lm.json not yet produced)"]
    s = r["setup"]
    paper = r["paper"] if isinstance(r.get("paper"), dict) else {}  # older files held a sentence
    out = [f"{s['params'] / 1e6:.1f}M-parameter GPT, {s['corpus']} ({s['tokenizer']}), {s['steps']} steps × "
           f"{s['batch_size']} × {s['seq_len']} tokens = {s['tokens_seen']:,} tokens per model; "
           f"validation on {s['eval_sequences']} windows.", "",
           "| model | val loss (nats), mean ± std | per seed | paper (GPT-2 124M) |", "|---|---|---|---|"]
    for name, variant, pkey in (("vanilla", "vanilla", "vanilla"), ("myopic (detach_hidden)", "detach_hidden", "myopic"),
                                ("local myopic", "local", "local_myopic"),
                                ("transformer bigram (zero_past)", "zero_past", "transformer_bigram")):
        seeds = r.get("per_seed", {}).get(variant, {})
        per = ", ".join(f"{v:.3f}" for v in seeds.values()) or "–"
        out.append(f"| {name} | {_lm_cell(r, variant)} | {per} | "
                   f"{_fmt(paper.get(pkey), 2)} |")
    gap = r.get("gap_paired")
    n = len(gap["seeds"]) if gap else 0
    bonus = r.get("local_myopic_bonus_paired")
    if bonus and bonus.get("per_seed") and r.get("myopic_minus_local_paired") is None:
        bonus = None  # an older file: its "bonus" was myopic − local, not the paper's vanilla − local
    out += ["", "| difference (nats) | ours, paired over seeds | paper (GPT-2 124M) |", "|---|---|---|",
            f"| myopia gap (myopic − vanilla), {n} seeds | {_paired_text(gap)} | {_fmt(paper.get('gap'), 2)} |",
            f"| gap / vanilla | {100 * (r.get('gap_relative') or 0):.1f} % | "
            f"{100 * paper['gap'] / paper['vanilla'] if paper.get('gap') else 0:.1f} % |",
            f"| gap / (bigram − vanilla) | {_fmt(r.get('gap_over_context'), 3)} | "
            f"{_fmt(paper.get('gap_over_context'), 3)} |",
            f"| local-myopic bonus (vanilla − local) | {_paired_text(bonus)} | "
            f"{_fmt(paper.get('local_myopic_bonus'), 2)} |",
            f"| myopic − local | {_paired_text(r.get('myopic_minus_local_paired'))} | "
            f"{_fmt(paper.get('myopic_minus_local'), 2)} |"]
    return out


def myopia_families() -> list[str]:
    r = _load("myopia_families.json")
    if r is None:
        return ["(myopia_families.json not yet produced)"]
    s = r["step_cost_setup"]
    out = ["| family | forward max abs diff | gradient into earlier states | one-pass vs per-position grads "
           f"(max rel) | step time myopic / vanilla (d {s['hidden']}, {s['layers']} layers, {s['batch']} × "
           f"{s['seq_len']}) |", "|---|---|---|---|---|"]
    for name, f in r["families"].items():
        out.append(f"| {name} | {f['forward_max_abs_diff']:.1e} | {f['earlier_state_grad_max_abs']:.0e} | "
                   f"{f['param_grad_max_rel_diff']:.1e} | {f['step_cost']['ratio']:.2f} |")
    out.append(f"\n{r['exactness_setup']}. {r['note']}.")
    p = r.get("pythia_lm")
    if p and p.get("gap_paired"):
        out.append(f"\nPythia-shaped GPT-NeoX on WikiText-2: gap (myopic − vanilla) {_paired_text(p['gap_paired'])}"
                   f" nats; local-myopic bonus (vanilla − local) {_paired_text(p.get('local_myopic_bonus_paired'))}.")
    return out


def myopia_horizon() -> list[str]:
    r = _load("myopia_horizon.json")
    if r is None:
        return ["(myopia_horizon.json not yet produced)"]
    out = []
    for part, label in (("synthetic", "normalised loss (p = 1)"), ("lm", "val loss (nats)")):
        per = r[part]["per_k"]
        if not per:
            continue
        out += [f"| horizon k ({part}) | {label} | − vanilla | fraction of the myopic − vanilla difference recovered |",
                "|---|---|---|---|"]
        out += [f"| {k} | {_fmt(v['mean'])} | {_fmt(v.get('minus_vanilla'))} | {_fmt(v.get('fraction_recovered'), 2)} |"
                for k, v in per.items()]
        out.append("")
    return out or ["(no horizon runs yet)"]


def _lm_cell(r: dict, variant: str) -> str:
    m, sd = r.get(f"{variant}_mean"), r.get(f"{variant}_std")
    return _fmt(m) if sd is None else f"{m:.3f} ± {sd:.3f}"


def myopia_gradients() -> list[str]:
    r = _load("myopia_gradients.json")
    if r is None:
        return ["(myopia_gradients.json not yet produced)"]
    out = ["| experiment | steps × batch | group | ‖g − g_m‖/‖g‖: first → max (step) → last | cos(g, g_m) last |",
           "|---|---|---|---|---|"]
    for e, x in r["experiments"].items():
        for key, v in x["summary"].items():
            out.append(f"| {e} | {x['steps']} × {x['batch_size']} | {key} | {v['rel_diff_first']:.3f} → "
                       f"{v['rel_diff_max']:.3f} ({v['rel_diff_step_of_max']}) → {v['rel_diff_last']:.3f} | "
                       f"{v['cos_last']:.3f} |")
    return out


def predgen_sst2() -> list[str]:
    r = _load("predgen_sst2.json")
    if r is None:
        return ["(predgen_sst2.json not yet produced)"]
    b = r.get("budget", {})
    out = [f"{SMOLLM2} + LoRA r=16 (all linear layers), {b.get('steps')} steps × {b.get('batch_size')} examples "
           f"per run (the same examples in the same order for every method), SST-2 dev (872).", "",
           "| method | accuracy (mean ± std) | per seed | train wall per run (min) | reference code (SmolLM-135M) |",
           "|---|---|---|---|---|"]
    for m in ("predictor", "generator", "predgen"):
        if m not in r:
            out.append(f"| {m} | – | – | – | {r['anchor_reference_code_smollm_135m'][m]} |")
            continue
        row = r[m]
        seeds = ", ".join(f"{a:.3f}" for a in row["per_seed"])
        out.append(f"| {m} | {row['accuracy']:.3f} ± {row['std']:.3f} | {seeds} | "
                   f"{row['train_wall_s_mean'] / 60:.1f} | {r['anchor_reference_code_smollm_135m'][m]} |")
    d = r.get("predgen_minus_predictor")
    if d:
        out.append(f"\nPredGen − Predictor: {d['mean']:+.3f} ± {d['stderr']:.3f} (standard error over "
                   f"{len(d['per_seed'])} seeds).")
    return out


def predgen_curves() -> list[str]:
    r = _load("predgen_curves.json")
    if r is None or not (r.get("tasks") or r.get("sweep")):
        return ["(predgen_curves.json not yet produced)"]
    out = [f"{SMOLLM2} + {r['adapter']}, lr {r['lr']:g}, batch {r['batch_size']}, seed {r['seed']}, evaluated every "
           f"{r['eval_every_examples']} examples.", ""]
    if r.get("sweep"):
        out += ["Learning-rate sweep (generator, SST-2, accuracy on a seeded dev subset at the end of a short run):",
                "", "| lr | " + " | ".join(f"{n} ex." for n, _ in next(iter(r["sweep"].values()))["curve"]) + " |",
                "|---|" + "---|" * len(next(iter(r["sweep"].values()))["curve"])]
        for lr, row in r["sweep"].items():
            out.append(f"| {lr} | " + " | ".join(f"{a:.3f}" for _, a in row["curve"]) + " |")
        out.append("")
    if not r.get("tasks"):
        return out + ["(no curve finished yet)"]
    out += ["| task | method | final accuracy | decoded answer | examples seen | best on the curve (at examples) |",
            "|---|---|---|---|---|---|"]
    for task, e in r["tasks"].items():
        for m, v in e["methods"].items():
            best = max(v["curve"], key=lambda c: c["accuracy"]) if v["curve"] else None
            at = f"{best['accuracy']:.3f} ({best['examples_seen']})" if best else "–"
            out.append(f"| {task} ({v['eval_examples']}) | {m} | {v['accuracy']:.3f} | "
                       f"{_fmt(v.get('decoded_accuracy'))} | {v['examples_seen']} | {at} |")
    for task, e in r["tasks"].items():  # every curve point
        xs = sorted({c["examples_seen"] for v in e["methods"].values() for c in v["curve"]})
        out += ["", f"{task}, accuracy at every curve point (examples seen):", "",
                "| method | " + " | ".join(map(str, xs)) + " |", "|---|" + "---|" * len(xs)]
        for m, v in e["methods"].items():
            at = {c["examples_seen"]: c["accuracy"] for c in v["curve"]}
            out.append(f"| {m} | " + " | ".join(_fmt(at.get(x)) for x in xs) + " |")
            dec = {c["examples_seen"]: c["decoded_accuracy"] for c in v["curve"] if "decoded_accuracy" in c}
            if dec:
                out.append(f"| {m} (decoded) | " + " | ".join(_fmt(dec.get(x)) for x in xs) + " |")
    grads = [(task, m, {"0": v["gradients"]}) for task, e in r["tasks"].items() for m, v in e["methods"].items()
             if m == "predgen" and v.get("gradients")]
    out += _gradient_table(grads, "seed 0")
    out += ["", "Paired on the same eval examples (final models): accuracy difference, paired bootstrap 95 % "
            "interval, McNemar's exact p (b = first right only, c = second right only):", "",
            "| task | comparison | difference | 95 % interval | McNemar p (b / c) |", "|---|---|---|---|---|"]
    for task, e in r["tasks"].items():
        for name, d in e["paired"].items():
            mc = d["mcnemar"]
            out.append(f"| {task} | {name.replace('_', ' ')} | {d['difference']:+.3f} | "
                       f"[{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] | {mc['p_value']:.3g} ({mc['b']} / {mc['c']}) |")
    return out


def predgen_tasks() -> list[str]:
    r = _load("predgen_tasks.json")
    if r is None or not r.get("tasks"):
        return ["(predgen_tasks.json not yet produced)"]
    abl = r.get("ablation_seeds")
    out = [f"{SMOLLM2} + {r['adapter']}, seeds {', '.join(map(str, r['seeds']))}"
           + ("" if abl is None else f"; the ablations (each variant that changes one thing) on seed(s) "
              f"{', '.join(map(str, abl))}") + ".", "",
           "| task | method | lr | examples seen | metric (mean ± std over seeds) | per seed | decoded, per seed |",
           "|---|---|---|---|---|---|---|"]
    for task, e in r["tasks"].items():
        k = e["metric"]
        for v, m in e["methods"].items():
            per = ", ".join(f"{row[k]:.3f}" for row in m["per_seed"].values())
            sd = "" if m.get(f"{k}_std") is None else f" ± {m[f'{k}_std']:.3f}"
            lr = m.get("lr")
            lr = f"{lr:g}" if isinstance(lr, float) else "–" if lr is None else ", ".join(map(str, lr))
            dec = ", ".join(f"{row['decoded'][k]:.3f}" for row in m["per_seed"].values() if row.get("decoded")) or "–"
            out.append(f"| {task} | {v} | {lr} | {m['examples_seen']} | {k} {m[k]:.3f}{sd} | {per} | {dec} |")
    out += ["", "Paired differences (first − second): per seed on the same eval examples, paired bootstrap 95 % "
            "interval (accuracy: and McNemar's p); over seeds, the t-interval of the mean difference:", "",
            "| task | comparison | per seed: difference [95 % interval] | seed mean [95 % interval] |",
            "|---|---|---|---|"]
    for task, e in r["tasks"].items():
        for name, d in e["paired"].items():
            cells = []
            for s, row in d["per_seed"].items():
                x = row if "difference" in row else row[d["metric"]]
                p = f", p {row['mcnemar']['p_value']:.2g}" if "mcnemar" in row else ""
                cells.append(f"s{s} {x['difference']:+.3f} [{x['ci95'][0]:+.3f}, {x['ci95'][1]:+.3f}]{p}")
            ci = d["ci95_of_seed_mean"]
            over = f"{d['seed_mean_difference']:+.3f}" + ("" if ci is None else f" [{ci[0]:+.3f}, {ci[1]:+.3f}]")
            out.append(f"| {task} | {name.replace('_', ' ')} ({d['metric']}) | {'; '.join(cells)} | {over} |")
    grads = [(task, v, m["gradients_per_seed"]) for task, e in r["tasks"].items() for v, m in e["methods"].items()
             if v.startswith("predgen") and m.get("gradients_per_seed")]
    return out + _gradient_table(grads, "mean over seeds")


def _gradient_table(grads: list[tuple[str, str, dict]], over: str) -> list[str]:
    """(task, variant, {seed: gradient summary}) -> what WDAL does to each part, as a table ([] when none)."""
    if not grads:
        return []
    out = ["", f"What WDAL does to each part (late-training medians, second half of the logged steps, {over}): the "
           "losses and the gradient norms before clipping of the writer (LM adapter) and the head (task adapter):",
           "", "| task | variant | L_W | L_D | writer grad norm | head grad norm | head / writer |",
           "|---|---|---|---|---|---|---|"]
    for task, v, per in grads:
        def mean(k: str, per: dict = per) -> str:
            vals = [g[k] for g in per.values() if k in g]
            return f"{sum(vals) / len(vals):.3g}" if vals else "–"
        out.append(f"| {task} | {v} | {mean('l_w')} | {mean('l_d')} | {mean('grad_norm_writer')} | "
                   f"{mean('grad_norm_head')} | {mean('head_over_writer')} |")
    return out


def predgen_speed() -> list[str]:
    r = _load("predgen_speed.json")
    if r is None:
        return ["(predgen_speed.json not yet produced)"]
    d = r["decode"]
    return [f"{_smollm2(r['model'])}, batch {r['batch_size']}, prompts of {r['prompt_tokens_mean']:.0f} tokens on average, "
            f"{r['machine']['torch_threads']} thread(s).", "",
            "| measure | value |", "|---|---|",
            f"| training step, generator (s, median) | {r['train_step_s']['generator']:.2f} |",
            f"| training step, predgen (s, median) | {r['train_step_s']['predgen']:.2f} |",
            f"| **train_step_ratio** predgen / generator | **{r['train_step_ratio']:.2f}** |",
            f"| decoding {d['generated_tokens']} tokens, KV-cached (examples/s) | {d['examples_per_s_cached']:.2f} |",
            f"| decoding, full re-run per token (examples/s) | {d['examples_per_s_rerun']:.2f} |",
            f"| **decode_speedup** | **{r['decode_speedup']:.2f}** (same tokens: {d['same_tokens']}) |",
            *_speed_extras(r)]


def _speed_extras(r: dict) -> list[str]:
    """The waste removed (before / after) and a PredGen step part by part, where the JSON has them."""
    out = []
    if "prompt_logits" in r:
        w = r["prompt_logits"]
        out.append(f"| prompt pass fwd+bwd, logits at every position → last only (examples/s) | "
                   f"{w['examples_per_s_before']:.1f} → {w['examples_per_s_after']:.1f} (×{w['speedup']:.2f}) |")
    if "expected_value_decoder" in r:
        e = r["expected_value_decoder"]
        out.append(f"| expected-value decoder, all paths → level walk (examples/s; tokens fed per example "
                   f"{e['tokens_fed_per_example_before']} → {e['tokens_fed_per_example_after']}) | "
                   f"{e['examples_per_s_before']:.2f} → {e['examples_per_s_after']:.2f} (×{e['speedup']:.2f}; "
                   f"max difference {e['max_abs_difference']:.1e}) |")
    for task, parts in r.get("predgen_step_parts_s", {}).items():
        if parts:
            names = [k for k in parts if k not in ("examples_per_s", "answer_tokens_max", "prompt_tokens_mean")]
            out += ["", f"One PredGen step on {task} ({parts['prompt_tokens_mean']:.0f} prompt tokens, at most "
                    f"{parts['answer_tokens_max']} answer tokens; {parts['examples_per_s']:.1f} examples/s), "
                    "median seconds:", "", "| " + " | ".join(names) + " |", "|" + "---|" * len(names),
                    "| " + " | ".join(f"{parts[k]:.2f}" for k in names) + " |"]
    return out


def predgen_mine() -> list[str]:
    r = _load("predgen_mine.json")
    if r is None:
        return ["(predgen_mine.json not yet produced)"]
    out = [f"{r['task']}; checkpoints: {r['checkpoints']} ({SMOLLM2} + LoRA). H(Y) = {r['h_y']:.3f} nats.", "",
           "| method | I(Y; pooled last state) | I(Y; pooled mean) | I(Y; answer-token states) |", "|---|---|---|---|"]
    for m in ("predictor", "generator", "predgen"):
        if m in r:
            x = r[m]
            out.append(f"| {m} | {x['mi_pooled']:.3f} ± {x['mi_pooled_std']:.3f} | {x['mi_pooled_mean_pooling']:.3f} | "
                       f"{x['mi_tokens']:.3f} ± {x['mi_tokens_std']:.3f} |")
    return out


def predgen_regression() -> list[str]:
    r = _load("predgen_regression.json")
    if r is None:
        return ["(predgen_regression.json not yet produced)"]
    out = [f"{_smollm2(r['base'])}; seed 0; each method's own prediction (PredGen: the adapter's), its decoded number and the "
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


def psf_wikitext() -> list[str]:
    r = _load("psf_wikitext.json")
    if r is None:
        return ["(psf_wikitext.json not yet produced)"]
    s = r["settings"]
    out = [f"{s['corpus']}, L={s['seq_len']}, K={s['blocks']}, {s['samples_per_point']} samples per sweep point, "
           f"judge {_smollm2(s['judge'])} (texts cut to {s['judge_max_tokens']} judge tokens); target entropy "
           f"{s['target_entropy']:.3f} nats (held-out references, gen-PPL {s['reference_gen_ppl']:.1f}).", "",
           "| model | gen-PPL @ matched entropy | entropy | MAUVE | FLOPs / sample (measured) | (analytic) | "
           "samples/s b1 | samples/s b32 | serial depth | params | train tokens | train wall (min) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    models = ("psf", "psf_content", "psf_mean_trajectory", "ar", "token_flow")
    for m in models:
        x = r[m]
        g = x["gen_ppl_at_matched_entropy"]
        iv = x.get("matched_entropy", {}).get("interval")  # the 95 % bootstrap interval (psf eval)
        g = "not bracketed" if g is None else f"{g:.1f}" + (f" [{iv[0]:.1f}, {iv[1]:.1f}]" if iv else "")
        out.append(f"| {m} | {g} | {x['entropy']:.3f} | "
                   f"{x['mauve']:.3f} | {x['flops_per_sample']:.3g} | {x['flops_per_sample_analytic']:.3g} | "
                   f"{x['samples_per_s_b1']:.2f} | {x['samples_per_s_b32']:.2f} | {x['serial_depth']} | "
                   f"{x['params'] / 1e6:.2f}M | {x['train_tokens'] / 1e6:.2f}M | {x['train_wall_s'] / 60:.0f} |")
    if "differences" in r:  # psf eval's rows: every sweep point with 95 % bootstrap intervals
        out += ["", "Every sweep point (95 % bootstrap intervals over samples):", "",
                "| model | point | entropy | gen-PPL | MAUVE | rep-2 | rep-4 |", "|---|---|---|---|---|---|---|"]
        for m in models:
            for p in r[m]["sweep"]:
                iv = p["interval"]
                point = ", ".join(f"{p[k]:g}" for k in r[m]["reported_point"])
                cells = [f"{p[k]:{spec}} {_iv(iv.get(k), spec.lstrip('+'))}" if p.get(k) is not None else "–"
                         for k, spec in (("entropy", ".3f"), ("gen_ppl", ".1f"), ("mauve", ".3f"),
                                         ("repetition_2", ".3f"), ("repetition_4", ".3f"))]
                out.append(f"| {m} | {point} | " + " | ".join(cells) + " |")
        out += ["", "Differences psf − model (unpaired bootstrap 95 % intervals over samples): at the references' "
                "entropy where both sweeps bracket it, and at every shared sweep point (NLL/token = log gen-PPL).",
                "", "| psf − | gen-PPL @ matched entropy | NLL/token @ matched entropy | NLL/token per shared point |",
                "|---|---|---|---|"]
        for name, d in r["differences"].items():
            me = d["matched_entropy"]
            g = ("not bracketed" if me["gen_ppl_diff"] is None
                 else f"{me['gen_ppl_diff']:+.1f} {_iv(me['interval'], '+.1f')}")
            n = ("–" if me["nll_per_token_diff"] is None
                 else f"{me['nll_per_token_diff']:+.3f} {_iv(me['nll_per_token_interval'])}")
            pts = "; ".join(f"T {q['temperature']:g}, p {q['top_p']:g}: {q['diff']['nll_per_token']:+.3f} "
                            f"{_iv(q['interval']['nll_per_token'])}" for q in d["per_point"]
                            if "nll_per_token" in q["diff"]) or "–"
            out.append(f"| {name.removeprefix('psf - ')} | {g} | {n} | {pts} |")
    out.append("")
    for k, v in r["checks"].items():
        out.append(f"- {k.replace('_', ' ')}: **{'met' if v['pass'] else 'MISSED' if v['pass'] is False else 'n/a'}**")
    return out


def _ms(stat: dict | None, spec: str = ".3f") -> str:
    """mean ± std of a psf_planted over-seeds entry."""
    if stat is None:
        return "not bracketed"
    return f"{stat['mean']:{spec}}" + (f" ± {stat['std']:{spec}}" if stat.get("std") is not None else "")


def _iv(iv: list | None, spec: str = "+.3f") -> str:
    return "–" if not iv else f"[{iv[0]:{spec}}, {iv[1]:{spec}}]"


def psf_planted() -> list[str]:
    r = _load("psf_planted.json")
    if r is None:
        return ["(psf_planted.json not yet produced)"]
    a, seeds = r["over_seeds"], r["over_seeds"]["seeds"]
    out = [f"Planted corpus, floor (entropy rate) {r['floor']:.4f} nats/token; training seeds {seeds}; "
           f"{r['settings']['samples_per_point']} samples per sweep point, {r['settings']['references']} test "
           "documents as references; exact NLL under the true generator; mean ± std over seeds.", "",
           "| model | NLL/token @ matched entropy | excess over floor | topic persistence @ matched entropy | "
           "FLOPs / sample | serial depth |", "|---|---|---|---|---|---|"]
    for m, v in a["models"].items():
        out.append(f"| {m} | {_ms(v['nll_at_matched_entropy'], '.4f')} | {_ms(v['excess_over_floor'], '.4f')} | "
                   f"{_ms(v['persistence_at_matched_entropy'])} | {_ms(v['flops_per_sample'], '.3g')} | "
                   f"{_ms(v['serial_depth'], '.0f')} |")
    out += ["", "Each model's own distribution (temperature 1, no nucleus; the token flow at step temperature 1), "
            f"the same runs (references: NLL {r['per_seed'][str(seeds[0])]['references_nll']:.3f}, persistence "
            f"{r['per_seed'][str(seeds[0])]['references_persistence']:.3f}):", "",
            "| model | NLL/token | unigram entropy | topic persistence | psf − model: NLL [t interval] | "
            "persistence [t interval] |", "|---|---|---|---|---|---|"]
    for m, v in a["models"].items():
        d = a["differences"].get(f"psf - {m}", {})
        dn, dp = d.get("nll_at_t1"), d.get("persistence_at_t1")
        out.append(f"| {m} | {_ms(v['nll_at_t1'])} | {_ms(v['entropy_at_t1'])} | {_ms(v['persistence_at_t1'])} | "
                   + ("–" if dn is None else f"{dn['mean_diff']:+.3f} {_iv(dn['interval'])}") + " | "
                   + ("–" if dp is None else f"{dp['mean_diff']:+.3f} {_iv(dp['interval'])}") + " |")
    out += ["", "Differences psf − other over seeds (seed-paired: mean and Student-t 95 % interval). NLL at matched "
            "entropy: at the references' entropy where both sweeps reach it in every seed, else at the other "
            "model's own entropy (psf interpolated there); gain = the fraction of the other's NLL excess over "
            "the floor that psf removes. Persistence: each model at its sweep point nearest the target entropy.", "",
            "| psf − | matched at | NLL/token | t interval | gain | persistence | t interval |",
            "|---|---|---|---|---|---|---|"]
    for name, d in a["differences"].items():
        other = name.removeprefix("psf - ")
        c, per = a["nll_comparisons"][other], d["persistence_near"]
        basis = "–" if c is None else ("references' entropy" if c["basis"].startswith("the ref") else "its entropy")
        nll = "–" if c is None else f"{c['mean']:+.4f}"
        gain = "–" if c is None or c["gain_mean"] is None else f"{c['gain_mean']:.2f}"
        per_mean = "–" if per is None else f"{per['mean_diff']:+.3f}"
        out.append(f"| {other} | {basis} | {nll} | {_iv(c and c['interval'], '+.4f')} | {gain} | {per_mean} | "
                   f"{_iv(per and per['interval'])} |")
    out += ["", "State-shuffle cost (nats/token: other documents' states minus the document's own, final stage):",
            "", "| model | first token of a block | other tokens | all |", "|---|---|---|---|"]
    for m, v in a["shuffle"].items():
        out.append(f"| {m} | {_ms(v['first'])} | {_ms(v['rest'])} | {_ms(v['all'])} |")
    out.append("")
    for k, v in (r["checks"] or {}).items():
        out.append(f"- {k.replace('_', ' ')}: **{'met' if v['pass'] else 'MISSED' if v['pass'] is False else 'n/a'}**")
    return out


if __name__ == "__main__":
    for title, fn in (("synthetic", myopia_synthetic), ("step cost", myopia_step_cost), ("lm", myopia_lm),
                      ("families", myopia_families), ("horizon", myopia_horizon), ("gradients", myopia_gradients),
                      ("predgen sst2", predgen_sst2), ("predgen curves", predgen_curves), ("predgen tasks", predgen_tasks), ("predgen speed", predgen_speed), ("predgen mine", predgen_mine),
                      ("predgen regression", predgen_regression),
                      ("psf wikitext", psf_wikitext), ("psf planted", psf_planted)):
        print(f"### {title}\n")
        print("\n".join(fn()))
        print()
