"""Results of the Predictive State Flow benchmarks (``benchmarks/psf_*.py``) as markdown."""

from __future__ import annotations

from forethought.report.common import smollm2 as _smollm2
from forethought.report.fmt import interval as _iv
from forethought.report.fmt import public


def wikitext(r: dict) -> list[str]:
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
    out += _diagnose(r.get("diagnose") or {})
    out.append("")
    for k, v in r["checks"].items():
        out.append(f"- {k.replace('_', ' ')}: **{'met' if v['pass'] else 'MISSED' if v['pass'] is False else 'n/a'}**")
    return out


def _ms(stat: dict | None, spec: str = ".3f") -> str:
    """mean ± std of a psf_planted over-seeds entry."""
    if stat is None:
        return "not bracketed"
    return f"{stat['mean']:{spec}}" + (f" ± {stat['std']:{spec}}" if stat.get("std") is not None else "")


def planted(r: dict) -> list[str]:
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




def _se(x: dict | None, spec: str = ".3f") -> str:
    """mean ± standard error of a sample score, or '-' where the arm did not measure it."""
    return "–" if not x else f"{x['mean']:{spec}} ± {x['se']:{spec}}"


STAGES = ("base", "landing", "self_realized", "codes")


def states_ablation(r: dict) -> list[str]:
    """Planted corpus, one change per arm: how much the decoder relies on its states."""
    rows, per_stage = [], []
    for name, a in r["arms"].items():
        stage = a["final_stage"]
        sh = a["shuffle"].get(stage, {})
        cell = sh.get(a.get("shuffle_headline_mode") if stage == "codes" else "none") or next(iter(sh.values()), None)
        dec = a.get("decoding") or {}
        agree = a.get("topic_agreement_clean") or {}
        rows.append([name, public(a.get("change", "")), stage,
                     "–" if not cell else f"{cell['first']['diff']:+.3f} {_iv(cell['first']['interval'])}",
                     "–" if not cell else f"{cell['all']['diff']:+.3f}", f"{a['val_ce_minus_floor']:+.3f}",
                     _se((dec.get("clean") or {}).get("true_nll")), "–" if not agree else f"{agree['same_source']:.2f} "
                     f"({agree['other_source']:.2f})", _se((dec.get("prior") or {}).get("true_nll"))])
        if not a.get("stages_copied_from_preset"):
            firsts = []
            for s in STAGES:
                modes = a["shuffle"].get(s) or {}
                c = modes.get(a.get("shuffle_headline_mode") if s == "codes" else "none")
                firsts.append("–" if not c else f"{c['first']['diff']:+.3f}")
            per_stage.append([name, *firsts])
    ceil = r.get("ceiling_of_the_preset") or {}
    out = [f"Floor (the true generator's entropy rate): {r['floor_entropy_rate']:.3f} nats/token. Shuffle cost: "
           "the decoder's teacher-forced CE with other documents' states minus with its own, nats/token (final "
           "stage; codes kept where the stage has them). Samples: documents decoded at temperature 1 from the clean "
           "states of validation documents or from prior samples, scored by the true generator (mean ± standard "
           "error); topic agreement: the fraction of decoded blocks whose most likely topic is the source block's "
           "(in brackets: another document's, i.e. chance).", "",
           "| arm | change | final stage | shuffle cost, first token [95 %] | all tokens | val CE − floor | "
           "clean-state samples: exact NLL | topic agreement (chance) | prior samples: exact NLL |",
           "|---|---|---|---|---|---|---|---|---|", *("| " + " | ".join(x) + " |" for x in rows), "",
           "Shuffle cost on block-first tokens after each stage (arms that trained every stage themselves):", "",
           "| arm | " + " | ".join(STAGES) + " |", "|---|" + "---|" * len(STAGES),
           *("| " + " | ".join(x) + " |" for x in per_stage)]
    if ceil:
        out += ["", "The AR baseline's block-cut ceiling (its CE with the context cut at every block boundary minus "
                f"full context), reference run: {ceil['first']['cut_minus_full']:+.3f} "
                f"{_iv(ceil['first']['interval'])} nats on block-first tokens, {ceil['all']['cut_minus_full']:+.3f} "
                "on all tokens."]
    return out


PROMPTED_METRICS = (("junction_stay", "junction"), ("continuation_nll", "NLL"),
                    ("continuation_persistence", "persistence"))


def prompted(r: dict) -> list[str]:
    """Prompted continuations on the planted corpus: a prompt-conditioned prior against replacement."""
    rows = []
    for m, by in r["over_seeds"].items():
        rep = " / ".join(f"{by[k]['replace']['mean']:.3f}" for k, _ in PROMPTED_METRICS)
        diff = " / ".join(f"{by[k]['conditioned - replace']['mean_diff']:+.3f} "
                          f"{_iv(by[k]['conditioned - replace']['t_interval'])}" for k, _ in PROMPTED_METRICS)
        nore = " / ".join(f"{by[k]['conditioned_no_replace - replace']['mean_diff']:+.3f}" for k, _ in PROMPTED_METRICS
                          if "conditioned_no_replace - replace" in by[k])
        true = " / ".join(f"{by[k]['true']['mean']:.3f}" for k, _ in PROMPTED_METRICS)
        rows.append([m, rep, diff, nore or "–", true])
    seeds = ", ".join(map(str, r.get("seeds", [])))
    return [f"Seeds {seeds}; {r.get('prompts')} test documents as prompts of m of their blocks; one continuation per "
            f"prompt at temperature {r.get('sampling', {}).get('temperature', 1):g}; {r.get('sampling', {}).get('prior_steps')} "
            f"Euler steps. Scores under the true generator: junction stay = p(the topic stays at the prompt's end) "
            f"(true chain {r.get('stay_prob')}, chance {r.get('chance_stay')}), the exact NLL per token of the "
            "continuation given the prompt, and the persistence of consecutive continued blocks. Mean over seeds; "
            "differences with the Student-t 95 % interval over seeds.", "",
            "| m | replace: junction / NLL / persistence | conditioned − replace [t 95 %] | "
            "conditioned without replacement − replace | true continuation |", "|---|---|---|---|---|",
            *("| " + " | ".join(x) + " |" for x in rows)]


def _diagnose(diag: dict) -> list[str]:
    """``psf diagnose`` of each PSF model: state-shuffle cost per stage and the AR baseline's block-cut ceiling."""
    rows = []
    for model, d in diag.items():
        for stage, sh in (d.get("shuffle") or {}).items():
            c = (sh.get("modes") or {}).get("none")
            if c:
                rows.append([model, f"shuffle cost, {stage} stage", f"{c['first']['diff']:+.3f} "
                             f"{_iv(c['first']['interval'])}", f"{c['rest']['diff']:+.3f}", f"{c['all']['diff']:+.3f}"])
        ceil = d.get("ceiling") or {}
        if ceil.get("available"):
            rows.append([model, "AR ceiling: context cut at block boundaries − full",
                         f"{ceil['first']['diff']:+.3f} {_iv(ceil['first']['interval'])}",
                         f"{ceil['rest']['diff']:+.3f}", f"{ceil['all']['diff']:+.3f}"])
    if not rows:
        return []
    return ["", "`psf diagnose` (nats/token, 95 % bootstrap intervals over validation documents): the decoder's "
            "teacher-forced CE with other documents' states minus with its own, per stage; and what earlier blocks "
            "are worth to the AR baseline:", "", "| model | measure | first token of a block | other tokens | all |",
            "|---|---|---|---|---|", *("| " + " | ".join(x) + " |" for x in rows)]
