"""Results of the Predictive State Flow benchmarks (their specs' collected JSON, and files written before the
experiment runner by removed scripts) as markdown."""

from __future__ import annotations

from forethought.experiments.psf_bench import wikitext_rows
from forethought.experiments.runner import SCHEMA
from forethought.report.common import smollm2 as _smollm2
from forethought.report.fmt import interval as _iv
from forethought.report.fmt import public, table
from forethought.report.papers import PLANTED_NO_CODE_CEILING, PSF, psf_rows


def wikitext(r: dict) -> list[str]:
    s = r["settings"]
    out = [f"{s['corpus']}, L={s['seq_len']}, K={s['blocks']}, {s['samples_per_point']} samples per sweep point, "
           f"judge {_smollm2(s['judge'])} (texts cut to {s['judge_max_tokens']} judge tokens); target entropy "
           f"{s['target_entropy']:.3f} nats (held-out references, gen-PPL {s['reference_gen_ppl']:.1f}).", "",
           "| model | gen-PPL @ matched entropy | entropy | MAUVE | FLOPs / sample (measured) | (analytic) | "
           "samples/s b1 | samples/s b32 | serial depth | params | train tokens | train wall (min) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    rows = wikitext_rows(r)
    models = tuple(rows)
    for m in models:
        x = rows[m]
        g = x["gen_ppl_at_matched_entropy"]
        iv = x.get("matched_entropy", {}).get("interval")  # the 95 % bootstrap interval (psf eval)
        g = "not bracketed" if g is None else f"{g:.1f}" + (f" [{iv[0]:.1f}, {iv[1]:.1f}]" if iv else "")
        out.append(f"| {m} | {g} | {x['entropy']:.3f} | "
                   f"{x['mauve']:.3f} | {x['flops_per_sample']:.3g} | {x['flops_per_sample_analytic']:.3g} | "
                   f"{x['samples_per_s_b1']:.2f} | {x['samples_per_s_b32']:.2f} | {x['serial_depth']} | "
                   f"{x['params'] / 1e6:.2f}M | {x['train_tokens'] / 1e6:.2f}M | {x['train_wall_s'] / 60:.0f} |")
    out += ["", f"The paper's numbers ({PSF.source}; {PSF.setting}), for orientation, not comparable in scale:", "",
            *table(["model", "gen-PPL", "entropy", "MAUVE@512", "TFLOPs / document"], psf_rows())]
    if "differences" in r:  # psf eval's rows: every sweep point with 95 % bootstrap intervals
        out += ["", "Every sweep point (95 % bootstrap intervals over samples):", "",
                "| model | point | entropy | gen-PPL | MAUVE | rep-2 | rep-4 |", "|---|---|---|---|---|---|---|"]
        for m in models:
            for p in rows[m]["sweep"]:
                iv = p["interval"]
                point = ", ".join(f"{p[k]:g}" for k in rows[m]["reported_point"])
                cells = [f"{p[k]:{spec}} {_iv(iv.get(k), spec.lstrip('+'))}" if p.get(k) is not None else "–"
                         for k, spec in (("entropy", ".3f"), ("gen_ppl", ".1f"), ("mauve", ".3f"),
                                         ("repetition_2", ".3f"), ("repetition_4", ".3f"))]
                out.append(f"| {m} | {point} | " + " | ".join(cells) + " |")
        out += ["", "Differences psf − model (unpaired bootstrap 95 % intervals over samples): at the references' "
                "entropy where both sweeps bracket it, and at every shared sweep point (NLL/token = log gen-PPL).",
                "", "| psf − | gen-PPL @ matched entropy | NLL/token @ matched entropy | "
                "NLL/token per shared point |",
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


def evaluation(r: dict) -> dict:
    """A psf_wikitext* results file in the layout its readings quote: a file the removed benchmark script wrote is
    that layout already; a file the experiment runner collected holds it as its run's ``derived[run]['evaluation']``
    (the specs run one training seed; with several, the first run's)."""
    if r.get("schema") != SCHEMA:
        return r
    return next(iter(r["derived"].values()))["evaluation"]


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
    below = _below_floor(a, seeds)
    for m, v in a["models"].items():
        flag = f" **invalid**: below the floor at seeds {below[m]}" if below.get(m) else ""
        out.append(f"| {m} | {_ms(v['nll_at_matched_entropy'], '.4f')}{flag} | {_ms(v['excess_over_floor'], '.4f')} | "
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
    if any(below.values()):
        out += ["", "A matched-entropy NLL below the floor (the entropy rate, the lowest expected NLL of any "
                "distribution) is impossible for a model that matched the references' diversity: unigram entropy of a "
                "short document does not control it here, so those rows are invalid; compare at temperature 1 and "
                "by persistence (below)."]
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
        if c is not None and c["basis"].startswith("the ref") and (below.get("psf") or below.get(other)):
            nll += " (invalid: a matched NLL below the floor)"
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




def _below_floor(a: dict, seeds: list[int]) -> dict[str, list[int]]:
    """Per model, the seeds whose NLL at matched entropy lies below the floor (a negative excess): invalid."""
    out = {}
    for m, v in a["models"].items():
        per = (v.get("excess_over_floor") or {}).get("per_seed") or []
        out[m] = [s for s, x in zip(seeds, per, strict=False) if x is not None and x < 0]
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
                     _se((dec.get("clean") or {}).get("true_nll")),
                     "–" if not agree else f"{agree['same_source']:.2f} "
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


def _diagnose(diag: dict) -> list[str]:
    """``psf diagnose`` of each PSF model: state-shuffle cost per stage and the AR baseline's block-cut ceiling."""
    rows = []
    for model, d in diag.items():
        for stage, sh in (d.get("shuffle") or {}).items():
            c = (sh.get("modes") or {}).get("none")
            if c:
                rows.append([model, f"shuffle cost, {stage} stage", f"{c['first']['diff']:+.3f} "
                             f"{_iv(c['first']['interval'])}", f"{c['rest']['diff']:+.3f}", f"{c['all']['diff']:+.3f}"])
        codes = d.get("codes") or {}
        if codes.get("available"):  # what the codes are worth to the decoder, and the KL's informative part
            z, u = codes["zeroing_cost"], codes["usage"]
            rows.append([model, "codes zeroed − posterior-mean codes", f"{z['first']['diff']:+.3f} "
                         f"{_iv(z['first']['interval'])}", f"{z['rest']['diff']:+.3f}",
                         f"{z['all']['diff']:+.3f} {_iv(z['all']['interval'])}"])
            rows.append([model, "code KL/token: spread of the posterior means (the part that can carry "
                         "information) / all", "", "", f"{u['kl_parts_per_token']['spread']:.3f} / "
                         f"{u['kl_per_token']:.3f}"])
        ceil = d.get("ceiling") or {}
        if ceil.get("available"):
            rows.append([model, "AR ceiling: context cut at block boundaries − full",
                         f"{ceil['first']['diff']:+.3f} {_iv(ceil['first']['interval'])}",
                         f"{ceil['rest']['diff']:+.3f}", f"{ceil['all']['diff']:+.3f}"])
    if not rows:
        return []
    return ["", "`psf diagnose` (nats/token, 95 % bootstrap intervals over validation documents): the decoder's "
            "teacher-forced CE with other documents' states minus with its own, per stage; with codes, its CE with "
            "zero codes minus with posterior-mean codes, and the codes' KL; and what earlier blocks are worth to "
            "the AR baseline:", "", "| model | measure | first token of a block | other tokens | all |",
            "|---|---|---|---|---|", *("| " + " | ".join(x) + " |" for x in rows)]


def wikitext_reading(r: dict) -> str:
    """What the WikiText-2 comparison shows, quoting the JSON."""
    p, tf, ar = r["psf"], r["token_flow"], r["ar"]
    out = [f"**Cost**: PSF's FLOPs per document are {100 * p['flops_per_sample'] / tf['flops_per_sample']:.1f} % "
           f"of the token flow's; its serial depth is {p['serial_depth']} (prior steps + L/K) against the AR "
           f"model's {ar['serial_depth']}; at batch 32 it writes "
           f"{p['samples_per_s_b32'] / ar['samples_per_s_b32']:.1f}× "
           "as many samples per second as the AR baseline."]
    c = r.get("differences", {}).get("psf - psf_content", {}).get("matched_entropy")
    if c and c.get("gen_ppl_diff") is not None:
        out.append(f"**Predictive against content states**: at the references' entropy the gen-PPL difference is "
                   f"{c['gen_ppl_diff']:+.1f} {_iv(c['interval'], '+.1f')} (NLL/token {c['nll_per_token_diff']:+.3f} "
                   f"{_iv(c['nll_per_token_interval'])}): no difference either way, where the paper finds content "
                   f"states {PSF.values['content_worse_low_pct']:g}–{PSF.values['content_worse_high_pct']:g} % "
                   "worse. "
                   "At equal temperature PSF looks better only because content's samples have higher entropy.")
    t1 = [q for q in r.get("differences", {}).get("psf - ar", {}).get("per_point", [])
          if q.get("temperature") == 1 and q.get("top_p") == 1 and "nll_per_token" in q.get("diff", {})]
    out.append("**Against AR**: the AR sweep brackets the references' entropy only across a wide gap, so its "
               "matched-entropy value is an interpolation"
               + (f"; at temperature 1, where neither model is truncated, PSF's NLL per token under the judge is "
                  f"{t1[0]['diff']['nll_per_token']:+.3f} {_iv(t1[0]['interval']['nll_per_token'])} against AR's "
                  "(positive: worse), the same direction as on the planted corpus." if t1 else "."))
    tf_cfg = tf.get("config") or {}
    if tf_cfg.get("latents", "table") == "table":  # a record from before the flow followed ELF-B's recipe
        out.append("**The token flow row is not ELF-B**: this record's token flow is the earlier baseline (the frozen "
                   "token table as latents, a logits head, " + f"rounding {tf_cfg.get('rounding', '?')}), none of "
                   "ELF-B's recipe; it is kept as measured and is no comparison for PSF. The flow that follows "
                   "ELF-B's recipe is the codes record's `token_flow` below, and why it writes no text at this "
                   "budget is the subject of the token-flow latents section.")
    diag = (r.get("diagnose") or {}).get("psf") or {}
    ceil, stage = diag.get("ceiling") or {}, (diag.get("shuffle") or {}).get(diag.get("stage", ""), {})
    mode = (stage.get("modes") or {}).get("none")
    if ceil.get("available") and mode:
        out.append(f"**Why the states matter little here**: cross-block context is worth {ceil['all']['diff']:.3f} "
                   f"nats/token to the AR model (the ceiling), and PSF's states deliver {mode['all']['diff']:.3f} of "
                   "it: at this scale little long-range information is left for a state to carry.")
    return "\n\n".join(out)


def _me_diff(d: dict | None) -> str:
    """A psf eval difference at the references' entropy: gen-PPL and NLL/token with intervals, and which side of
    zero the NLL interval lies."""
    me = (d or {}).get("matched_entropy") or {}
    if me.get("gen_ppl_diff") is None:
        return "not bracketed by both sweeps"
    lo, hi = me["nll_per_token_interval"]
    side = ("lower for psf" if hi < 0 else "higher for psf" if lo > 0 else "the interval includes zero")
    return (f"gen-PPL {me['gen_ppl_diff']:+.1f} {_iv(me['interval'], '+.1f')}, NLL/token "
            f"{me['nll_per_token_diff']:+.3f} {_iv(me['nll_per_token_interval'])} ({side})")


def _t1_diff(d: dict | None) -> str:
    """A psf eval difference at temperature 1, top-p 1 (neither model truncated): NLL/token with interval."""
    for q in (d or {}).get("per_point", []):
        if q.get("temperature") == 1 and q.get("top_p") == 1 and "nll_per_token" in q.get("diff", {}):
            return f"{q['diff']['nll_per_token']:+.3f} {_iv(q['interval']['nll_per_token'])}"
    return "–"


def _code_information(name: str, d: dict) -> str | None:
    """``psf diagnose``'s codes section of one run in a sentence: what zeroing them costs and the KL's informative
    part (the spread of the posterior means)."""
    c = d.get("codes") or {}
    if not c.get("available"):
        return None
    z, u = c["zeroing_cost"], c["usage"]
    return (f"`{name}` {z['all']['diff']:+.3f} {_iv(z['all']['interval'])} nats/token ({z['first']['diff']:+.3f} on "
            f"a block's first token), KL {u['kl_per_token']:.3f} nats/token of which "
            f"{u['kl_parts_per_token']['spread']:.3f} is the spread of the posterior means")


def wikitext_codes_reading(r: dict) -> str:
    """What WikiText-2 with codes on shows (the results page's reading)."""
    return "\n\n".join(_wikitext_codes_parts(r))


def wikitext_codes_lead(r: dict) -> list[str]:
    """docs/psf.md's summary of WikiText-2 with codes on: the same points as the results page's reading."""
    return ["- " + x for x in _wikitext_codes_parts(evaluation(r))]


def _wikitext_codes_parts(r: dict) -> list[str]:
    """WikiText-2 with codes on, quoting the JSON: the codes' information beside every comparison of predictive
    and content states, the paper's two configurations, and the speed against AR."""
    rows, diffs = wikitext_rows(r), r.get("differences") or {}
    info = [x for name, d in (r.get("diagnose") or {}).items() if (x := _code_information(name, d))]
    out = ["**What the codes carry** (`psf diagnose`, validation documents; the cost of decoding with zero codes "
           "instead of the posterior means): " + "; ".join(info) + ". A code is its block's own posterior, so what it "
           "is worth here is content the decoder reads from the block itself, not a plan from the states."]
    if "psf_state_only" in rows:
        out.append(f"**The paper's two configurations** on one decoder, main (prior over states + codes) minus "
                   "state-only (zero codes) at the references' entropy: "
                   f"{_me_diff(diffs.get('psf - psf_state_only'))}; "
                   f"at temperature 1, NLL/token {_t1_diff(diffs.get('psf - psf_state_only'))}.")
    ps = rows["psf"]

    def at_target(x: dict) -> str:
        g, iv = x["gen_ppl_at_matched_entropy"], (x.get("matched_entropy") or {}).get("interval")
        return "not bracketed" if g is None else f"{g:.1f}" + (f" {_iv(iv, '.1f')}" if iv else "")

    line = (f"**Predictive against content states, codes on** (read beside the codes' information above): psf minus "
            f"psf_content at the references' entropy, {_me_diff(diffs.get('psf - psf_content'))}; at temperature 1, "
            f"NLL/token {_t1_diff(diffs.get('psf - psf_content'))} (the two sweeps' entropies differ at equal "
            "temperature)")
    if "psf_content_state_only" in rows and "psf_state_only" in rows:
        line += (f". Without the code channel (each run's state-only prior, zero codes) gen-PPL at the references' "
                 f"entropy is {at_target(rows['psf_state_only'])} for predictive states and "
                 f"{at_target(rows['psf_content_state_only'])} for content states (95 % intervals; no paired "
                 "difference is computed between these two rows)")
    out.append(line + ".")
    target = r["settings"]["target_entropy"]
    for name, x in (r.get("other_rows") or {}).items():  # compared runs (e.g. a longer codes stage), state-only rows
        if name not in ("psf_state_only", "psf_content_state_only") and x["kind"] != "token_flow":
            out.append(_compared_run(name, x, ps, diffs.get("psf - " + name), target))
    ar = rows["ar"]
    span = _ar_gap(ar, r["settings"])
    gap = (f" (its sweep brackets the references' {target:.3f} nats only between {span[0]:.3f} and "
           f"{span[1]:.3f}, so the AR value there is an interpolation)" if span else "")
    out.append(f"**Against AR**: psf minus ar at the references' entropy, {_me_diff(diffs.get('psf - ar'))}{gap}; at "
               f"temperature 1, where neither model is truncated, NLL/token {_t1_diff(diffs.get('psf - ar'))} "
               "(positive: PSF worse).")
    out.append(_sweeps(rows, r["settings"]))
    out += [_token_flow(name, x, ps, diffs.get("psf - " + name), target) for name, x in rows.items()
            if x["kind"] == "token_flow"]
    out.append(f"**Speed**: at batch 32 PSF writes {ps['samples_per_s_b32']:.2f} documents/s against the AR model's "
               f"{ar['samples_per_s_b32']:.2f} (key-value cache preallocated), "
               f"{ps['samples_per_s_b32'] / ar['samples_per_s_b32']:.1f}×; "
               f"at batch 1 {ps['samples_per_s_b1']:.2f} against {ar['samples_per_s_b1']:.2f}. Its FLOPs per document "
               f"are {100 * ps['flops_per_sample'] / rows['token_flow']['flops_per_sample']:.1f} % "
               "of the token flow's.")
    return out


def _ar_gap(ar: dict, s: dict) -> tuple[float, float] | None:
    """The entropies either side of the references' on AR's knob line (temperature at top-p ``densify_top_p``),
    when none of its points lies within ``entropy_tolerance`` of it: its matched value is read across that gap."""
    target = s["target_entropy"]
    line = [q["entropy"] for q in ar["sweep"] if q.get("top_p") == s["densify_top_p"]]
    below, above = [e for e in line if e <= target], [e for e in line if e > target]
    near = ar["matched_entropy"]["nearest_entropy_gap"] <= s["entropy_tolerance"]
    return None if near or not below or not above else (max(below), min(above))


def _sweeps(rows: dict, s: dict) -> str:
    """Whether each model's knob line came within the tolerance of the references' entropy, and how near."""
    tol = s["entropy_tolerance"]
    gaps = {m: x["matched_entropy"]["nearest_entropy_gap"] for m, x in rows.items()
            if (x.get("matched_entropy") or {}).get("nearest_entropy_gap") is not None}
    near = [f"`{m}` {g:.3f}" for m, g in gaps.items() if g <= tol]
    far = [f"`{m}` {g:.3f}" for m, g in gaps.items() if g > tol]
    return (f"**Sweeps** (densified, each on one knob line: temperature at top-p {s['densify_top_p']:g}, the token "
            f"flow's {s['token_flow_sweep']['knob']}): the nearest point lies within {tol:g} nats of the references' "
            f"{s['target_entropy']:.3f} for " + (", ".join(near) or "no model")
            + (f"; not for {', '.join(far)}" if far else "; for every model") + " (nats from the target).")


def _token_flow(name: str, x: dict, ps: dict, d: dict | None, target: float) -> str:
    """A token-level flow's row in a sentence: its difference with psf at the references' entropy, or, when its
    sweep does not reach that entropy, where its sweep lies instead."""
    opt = (x.get("optimizer") or {}).get("kind")
    head = (f"**The token-level flow `{name}`** (ELF-B's recipe as far as it carries over offline"
            + (f", optimiser `{opt}`" if opt else "") + f"; {x['train_tokens'] / 1e6:.2f}M training tokens)")
    if x["gen_ppl_at_matched_entropy"] is not None:
        return f"{head}: psf minus the token flow at the references' entropy, {_me_diff(d)}."
    ent = [q["entropy"] for q in x["sweep"]]
    ppl = [q["gen_ppl"] for q in x["sweep"]]
    t1 = next((q for q in ps["sweep"] if q.get("temperature") == 1 and q.get("top_p") == 1), None)
    out = (f"{head}: over its {len(ent)} {x.get('knob', 'knob')} values its samples' unigram entropy stays between "
           f"{min(ent):.3f} and {max(ent):.3f} nats, {min(abs(e - target) for e in ent):.3f} from the references' "
           f"{target:.3f} at the nearest, so it has no matched-entropy value and no difference with psf; its gen-PPL "
           f"lies between {min(ppl):.0f} and {max(ppl):.0f}")
    if t1 is None:
        return out + "."
    out += f" (psf at temperature 1: {t1['gen_ppl']:.0f})"
    if min(ppl) > 10 * t1["gen_ppl"]:
        out += (", more than ten times psf's at its least truncated point: at this training budget the flow has not "
                "learned to write text, so no claim about PSF against a token-level flow rests on this run")
    return out + "."


def _compared_run(name: str, x: dict, ps: dict, d: dict | None, target: float) -> str:
    """One compared run of psf_wikitext.py (``--compare-runs``) against psf: its training tokens, the difference at
    the references' entropy (or why there is none), at temperature 1, and at the lowest shared temperature."""
    low = min((q for q in (d or {}).get("per_point", []) if "entropy" in q.get("diff", {})),
              key=lambda q: q["temperature"], default=None)
    lowest = min(q["entropy"] for q in x["sweep"])
    me = _me_diff(d)
    if ((d or {}).get("matched_entropy") or {}).get("gen_ppl_diff") is None and lowest > target:
        me += f" (its lowest entropy, {lowest:.3f} nats, stays above the references' {target:.3f})"
    line = (f"**psf minus `{name}`** ({x['train_tokens'] / 1e6:.2f}M model training tokens against psf's "
            f"{ps['train_tokens'] / 1e6:.2f}M): at the references' entropy, {me}; at temperature 1, NLL/token "
            f"{_t1_diff(d)} (positive: psf worse)")
    if low:
        q = low["diff"], low["interval"]
        line += (f"; at temperature {low['temperature']:g}, unigram entropy {q[0]['entropy']:+.3f} "
                 f"{_iv(q[1]['entropy'])} and repeated bigrams {q[0]['repetition_2']:+.3f} "
                 f"{_iv(q[1]['repetition_2'])}")
    return line + "."


def planted_reading(r: dict) -> str:
    """What the planted corpus shows, quoting the JSON."""
    a = r["over_seeds"]
    sh = a["shuffle"]["psf"]["first"]
    out = [f"**The states matter here**: other documents' states cost the decoder {sh['mean']:.3f} ± {sh['std']:.3f} "
           "nats on the first token of every block."]
    m = a["models"]
    if {"psf", "token_flow", "psf_mean_trajectory"} <= set(m):
        f_psf, f_tf = m["psf"]["flops_per_sample"]["mean"], m["token_flow"]["flops_per_sample"]["mean"]
        f_mean = m["psf_mean_trajectory"]["flops_per_sample"]["mean"]
        out.append(f"**Cost**: PSF needs {100 * f_psf / f_tf:.1f} % of the token flow's FLOPs per document here. "
                   f"The prior's Euler steps are {100 * (1 - f_mean / f_psf):.0f} % of PSF's cost (the mean "
                   "trajectory skips the prior), and with short documents of few tokens per block the token flow's "
                   "passes are cheap; on WikiText-2's longer blocks the ratio is far smaller. Nothing was tuned to "
                   "pass the tenth: fewer prior steps would, but the prior's step count is the paper's.")
    d = a["differences"].get("psf - ar", {})
    if d.get("nll_at_t1") and d.get("persistence_at_t1"):
        n, q = d["nll_at_t1"], d["persistence_at_t1"]
        out.append(f"**NLL at matched unigram entropy rewards incoherence on this corpus**: PSF's documents switch "
                   "topics more often than real ones, which raises their unigram entropy, so they reach the "
                   "references' entropy at a low temperature where text inside a block is near-greedy. At "
                   "temperature 1, where the exact judge needs no entropy matching, the AR baseline is better: "
                   f"PSF − AR NLL {n['mean_diff']:+.3f} {_iv(n['interval'])}, persistence {q['mean_diff']:+.3f} "
                   f"{_iv(q['interval'])}. The paper reports the same loss of topical persistence for its "
                   "state-only prior. A predictive state summarises the blocks before block k, whose topic is "
                   "uncertain given them, so each branch, which never sees its neighbours' tokens, draws its own "
                   "topic; only the landing token couples neighbours.")
    codes = _planted_codes(a)
    if codes:
        out.append(codes)
    return "\n\n".join(out)


def _planted_codes(a: dict) -> str:
    """The codes configurations (psf_planted --codes-runs) against codes-off PSF and AR at temperature 1."""
    m, d = a["models"], a["differences"]
    if not {"psf_codes", "psf_codes_state_only", "ar"} <= set(m):
        return ""

    def minus_psf(name: str, key: str) -> str:  # name − psf, from the file's psf − name
        x = d[f"psf - {name}"][key]
        return "–" if x is None else f"{-x['mean_diff']:+.3f} {_iv([-x['interval'][1], -x['interval'][0]])}"

    pers = {k: m[k]["persistence_at_t1"]["mean"] for k in ("psf_codes", "psf_codes_state_only", "psf", "ar")}
    return ("**With realization codes** (`psf_codes`: planted_main's code-trained decoder with its prior over states "
            "+ codes; `psf_codes_state_only`: the same decoder with its state-only prior and zero codes; the runs "
            "of benchmarks/psf_codes.py, evaluated here with the same references and sampling seeds): at temperature "
            f"1 their documents persist {pers['psf_codes']:.3f} and {pers['psf_codes_state_only']:.3f}, against "
            f"{pers['psf']:.3f} for PSF without codes and {pers['ar']:.3f} for AR (psf_codes − psf: persistence "
            f"{minus_psf('psf_codes', 'persistence_at_t1')}, NLL/token {minus_psf('psf_codes', 'nll_at_t1')}; "
            "seed-paired t intervals). A code is its block's own posterior, so the main configuration's "
            "documents get a content channel that PSF without codes lacks; it is the paper's main model, not a "
            "comparison of predictive against content states.")


# ---- the code-channel pilot (benchmarks/psf_codes_pilot.py) -------------------------------------------------------

def _pilot_seed(r: dict) -> int:
    """A pilot file's training seed: its arms' ``seed`` (every arm of a file shares it)."""
    return next(iter(r["arms"].values()))["seed"]


def _agreement(a: dict) -> str:
    return f"{a['clean_topic_agreement']:.2f} / {a['clean_zero_codes_topic_agreement']:.2f}"


def codes_pilot(files: dict[str, dict]) -> list[str]:
    """Every seed file of the code-channel pilot in one table: per arm, the zeroing cost and the topic agreement
    (codes / zero codes) per seed, and their means over seeds when there are two or more."""
    runs = sorted(files.values(), key=lambda r: _pilot_seed(r))  # one parsed file per seed
    seeds = [_pilot_seed(r) for r in runs]
    arms: dict[str, str] = {}
    for r in runs:
        for name, a in r["arms"].items():
            arms.setdefault(name, public(a.get("change", "")))
    many = len(runs) >= 2
    head = ["arm", "change", *(f"zeroing cost, seed {s} [95 %]" for s in seeds),
            *(f"topic agreement, seed {s}: codes / zero codes" for s in seeds)]
    head += ["zeroing cost, mean over seeds", "topic agreement, mean: codes / zero codes"] if many else []
    rows = []
    for name, change in arms.items():
        per = [r["arms"].get(name) for r in runs]  # None where a seed did not run the arm
        # 4 decimals: an unused code's cost is ~1e-4, and its interval then says whether it is above zero
        cost = ["–" if a is None else f"{a['zeroing_cost']['all']['diff']:+.4f} "
                f"{_iv(a['zeroing_cost']['all'].get('interval'), '+.4f')}" for a in per]
        agree = ["–" if a is None else _agreement(a) for a in per]
        row = [name, change, *cost, *agree]
        done = [a for a in per if a is not None]
        if many:
            n = len(done)
            row += ["–", "–"] if n < 2 else [
                f"{sum(a['zeroing_cost']['all']['diff'] for a in done) / n:+.4f}",
                f"{sum(a['clean_topic_agreement'] for a in done) / n:.2f} / "
                f"{sum(a['clean_zero_codes_topic_agreement'] for a in done) / n:.2f}"]
        rows.append(row)
    first = runs[0]
    notes = first.get("notes", {})
    out = [f"Planted corpus, each arm the planted recipe with its codes stage ({first['codes_steps']} steps) plus "
           f"one change; training seeds {', '.join(map(str, seeds))}. Zeroing cost: {notes.get('zeroing_cost', '')}"
           f", nats/token, all tokens. Topic agreement: {notes.get('decoding', '')}. Target: "
           f"{first.get('target', '')}.", "", *table(head, rows)]
    # Where the KL goes: the mean code (no information), the spread of the means, and sigma (see psf diagnose).
    kl_head = ["arm", *(f"seed {s}: KL/token (mean / spread / σ), active units" for s in seeds)]
    kl_rows = []
    for name in arms:
        cells = []
        for r in runs:
            a = r["arms"].get(name)
            p = (a or {}).get("kl_parts_per_token")
            cells.append("–" if not p else f"{a['kl_per_token']:.3f} ({p['mean_shift']:.3f} / {p['spread']:.3f} / "
                         f"{p['sigma']:.3f}), {a['active_units']} of {a['dims']}")
        kl_rows.append([name, *cells])
    out += ["", "The KL per token split into the mean code's part (the same for every document: no information), "
            "the spread of the posterior means across documents, and the posterior's σ; active units: dimensions "
            "whose posterior mean varies across documents.", "", *table(kl_head, kl_rows)]
    return out


def codes_pilot_reading(files: dict[str, dict]) -> str:
    """Which arms used their codes at every seed, and where the zeroing cost sits, quoting the files."""
    runs = sorted(files.values(), key=lambda r: _pilot_seed(r))
    target = 0.1  # the pilot's target: zeroing cost >= 0.1 nats/token (each file's 'target' says so)
    names = [n for n in runs[0]["arms"] if all(n in r["arms"] for r in runs)]
    used = [n for n in names if all(r["arms"][n]["zeroing_cost"]["all"]["diff"] >= target for r in runs)]
    some = [n for n in names if n not in used
            and any(r["arms"][n]["zeroing_cost"]["all"]["diff"] >= target for r in runs)]
    seeds = ", ".join(str(_pilot_seed(r)) for r in runs)
    out = [f"Arms whose codes cost at least {target} nats/token to zero at every seed ({seeds}): "
           f"{', '.join(used) or 'none'}" + (f"; at some seeds only: {', '.join(some)}" if some else "") + "."]
    ex = next((r["arms"][n] for n in used for r in runs), None)
    if ex is not None:
        per = ex["zeroing_cost"]
        out.append(f"The cost sits on each block's first token (seed {ex['seed']}, {used[0]}: "
                   f"{per['first']['diff']:+.3f} nats there, {per['rest']['diff']:+.3f} on the other "
                   "tokens), and the teacher-forced validation CE with the code "
                   f"({ex['codes_val_ce']:.3f}) is below the true NLL ({ex['true_val_nll']:.3f}): the code also "
                   "carries content of the block, such as its first token, not only its topic.")
    idle = [r["arms"][n] for r in runs for n in r["arms"] if r["arms"][n]["active_units"] == 0]
    if idle:
        share = min(a["kl_parts_per_token"]["sigma"] / a["kl_per_token"] for a in idle if a["kl_per_token"] > 0)
        out.append(f"Where the codes go unused (no active unit), at least {100 * share:.0f} % of the KL is the "
                   "posterior's σ drifting from 1, which carries no information.")
    return " ".join(out)


# ---- the paper's two configurations over seeds (the psf_codes spec) ---------------------------------------------

def codes_lead(r: dict) -> list[str]:
    """docs/psf.md's summary of psf_codes.json (collected by ``forethought experiment collect psf_codes``): the two
    configurations over seeds against the spec's checks, and each ablation arm against its reference."""
    groups, checks, derived = r["groups"], r["checks"], r.get("derived") or {}
    out: list[str] = []
    main = groups.get("main")
    if main:
        m = main["measures"]
        by_value = {c["value"]: c for c in checks.values()}

        def mean(k: str) -> str:
            return f"{m[k]['mean']:.3f}"

        def target(k: str) -> str:
            c = by_value[f"groups.main.{k}.mean"]
            state = "met" if c["passed"] else "missed" if c["passed"] is False else "not measured"
            return f"target {'≤ ' if c['op'] == '<=' else ''}{c['threshold']:g}, {state}"

        nll = derived["main_minus_state_only"]["main"]["NLL/token at matched entropy"]
        ceiling = PLANTED_NO_CODE_CEILING.values["persistence"]
        seeds = m["zeroing_cost"]["seeds"]
        out += [f"- **The two configurations over {len(seeds)} training seeds** ({', '.join(map(str, seeds))}): "
                f"zeroing the codes costs {m['zeroing_cost']['mean']:+.3f} nats/token ({target('zeroing_cost')}); "
                f"clean-state decodes with posterior-mean codes keep the source block's topic (agreement "
                f"{mean('clean_topic_agreement')}; {target('clean_topic_agreement')}) and persist "
                f"{mean('clean_persistence')} ({target('clean_persistence')}). Documents from the main prior persist "
                f"{mean('prior_persistence')} ({target('prior_persistence')}); the state-only prior's "
                f"{mean('state_only_persistence')}; a decoder without codes given exact predictive states reaches "
                f"{ceiling} (`psf ceiling`), ours with zero codes on clean states "
                f"{mean('clean_zero_codes_persistence')}. Their exact NLL/token is {mean('prior_nll')} "
                f"({target('prior_nll')}). At the references' entropy the main prior's documents have NLL/token "
                f"{mean('psf_nll_matched')} against the state-only prior's {mean('state_only_nll_matched')} "
                f"(paired difference {nll['mean']:+.3f}, 95 % interval {_iv(nll['ci95_of_mean'])})."]
    for prefix, what, keys in (("prior_", "The joint prior", ("prior_persistence",)),
                               ("decoder_", "The decoder", ("clean_persistence", "prior_persistence",
                                                            "zeroing_cost"))):
        ref = groups.get(f"{prefix}reference")
        if not ref:
            continue
        arms: dict[str, list[dict]] = {}
        for c in r["comparisons"].values():
            if c["b"] == f"{prefix}reference" and c["measure"] in keys and "missing" not in c:
                arms.setdefault(c["a"], []).append(c)
        moves = [f"`{a}` " + ", ".join(f"{c['measure'].replace('_', ' ')} {c['mean']:+.3f}" for c in cs)
                 + f" (seeds {', '.join(map(str, cs[0]['seeds']))})" for a, cs in arms.items()]
        base = ", ".join(f"{k.replace('_', ' ')} {ref['measures'][k]['mean']:.3f}" for k in keys
                         if k in ref["measures"])
        out += [f"- **{what}, one change at a time** against `{prefix}reference` ({base}; seeds "
                f"{', '.join(map(str, ref['measures'][keys[0]]['seeds']))}), each arm minus it, paired by seed: "
                + "; ".join(moves) + "."]
    return out


def headline(r: dict) -> str:
    """README's PSF headline from the WikiText-2 run with codes on: PSF against AR and against content states,
    each a difference with its 95 % interval, at temperature 1 (neither model truncated) and at the references'
    entropy, with what limits each reading (an interpolation across a wide gap, an unbracketed sweep); the
    token-level flow at the references' entropy, or how far its sweep stays from it."""
    r = evaluation(r)
    rows, diffs = wikitext_rows(r), r.get("differences") or {}
    target = r["settings"]["target_entropy"]
    ar = rows["ar"]
    span = _ar_gap(ar, r["settings"])
    gap = (f"; AR's sweep brackets the references' {target:.3f} nats only between {span[0]:.3f} and "
           f"{span[1]:.3f}, so its value there is interpolated" if span else "")
    me_ar = (diffs.get("psf - ar") or {}).get("matched_entropy") or {}
    at_ar = ("not bracketed by both sweeps" if me_ar.get("nll_per_token_diff") is None else
             f"{me_ar['nll_per_token_diff']:+.3f} {_iv(me_ar['nll_per_token_interval'])}")
    flows = []  # every token-level flow (ELF-B's recipe, its variants): its difference, or why there is none
    for name, x in rows.items():
        if x["kind"] != "token_flow":
            continue
        if x["gen_ppl_at_matched_entropy"] is not None and rows["psf"]["gen_ppl_at_matched_entropy"] is not None:
            flows.append(f"PSF minus the token-level flow `{name}` at the references' entropy "
                         f"{_me_diff(diffs.get('psf - ' + name))}")
        elif x["gen_ppl_at_matched_entropy"] is not None:
            flows.append(f"the token-level flow `{name}` is not compared: PSF's sweep does not bracket the "
                         "references' entropy")
        else:
            nearest = min(abs(q["entropy"] - target) for q in x["sweep"])
            flows.append(f"the token-level flow `{name}` is not compared: its sweep comes no nearer than "
                         f"{nearest:.2f} nats to the references' entropy")
    flow = "".join("; " + f for f in flows)
    return (f"WikiText-2, realization codes on, one training seed; PSF minus AR NLL/token at temperature 1 "
            f"(neither truncated) **{_t1_diff(diffs.get('psf - ar'))}** (positive: PSF worse), at the references' "
            f"entropy {at_ar}{gap}; PSF minus content states at temperature 1 "
            f"**{_t1_diff(diffs.get('psf - psf_content'))}** (negative: PSF better; the two sweeps' entropies "
            f"differ at equal temperature), at the references' entropy {_me_diff(diffs.get('psf - psf_content'))}"
            f"{flow} (95 % bootstrap intervals)")
