"""``forethought psf eval``: the field's evaluation of a finished ``psf recipe`` run, with intervals.

What is evaluated (each a *model*, named in the results):

- ``psf``: the run's final PSF model sampling state trajectories from its prior; ``psf_mean_trajectory``: the
  same decoder on the prior's stored mean trajectory (the ablation); ``psf_state_only``: the same decoder with
  the run's state-only prior and zero codes (the paper's state-only configuration; recipe
  ``prior.state_only_variant``), if trained; ``ar``: the run's AR baseline, if trained;
- every folder in ``compare``, named by its folder name: another ``psf recipe`` run (its final PSF model and
  prior, e.g. the content-state ablation; with a state-only prior, also ``<name>_state_only``) or a token-flow run
  (:func:`forethought.psf.token_flow.load_token_flow`). They must share the run's corpus, tokenizer and L.

Each model samples ``samples`` documents at every sweep point: (temperature, top-p) for the decoders, the
entropy knob's values for a token flow (``token_flow_knob``: its self-conditioning guidance scale, its softmax
temperature at every step, or its Euler sampler's SDE noise). Sweep point i is sampled with seed
``mix_seed("psf-eval-point", seed, i)`` for every model.

**References** are ``references`` windows of L tokens of the **test** split (never trained on), tokenised as
training data and taken evenly spaced over the whole split (``reference_spread``; the first N windows of
WikiText-2's test split are 7-9 of its 62 articles), decoded and detokenised like samples.

**Judge.** On a text corpus, every set (references and samples) is retokenised for a judge LM, cut to one
common judge-token cap (``length_quantile`` of all lengths, so MAUVE compares equal lengths) and scored in one
pass (forethought.eval.judge): gen-PPL = exp(token-weighted mean NLL), unigram entropy of judge tokens, MAUVE
features. On the planted corpus (forethought.data.planted) the judge is the true generator: each sample's exact
NLL per token (gen-PPL = exp of its mean), topic persistence and block coherence, with the floor
(``entropy_rate``) beside them; unigram entropy is that of the model's token ids; no judge LM, no MAUVE.

Per model and sweep point: gen-PPL, NLL per token, unigram entropy, **n-gram repetition** (rep-n, n = 2, 3, 4:
the fraction of a sample's n-grams that repeat one earlier in the sample, mean over samples; judge tokens on a
text corpus, model ids on the planted one), MAUVE vs the references (text), persistence and coherence (planted),
each with a **95 % percentile bootstrap interval over samples**: ``n_boot`` resamples of the sample set (MAUVE:
the first ``mauve_boot`` of them, one k-means fit each). The references are resampled too, once per bootstrap
draw and shared by every model, so the target entropy's uncertainty enters the matched-entropy interval.

**Densified sweeps** (``densify``, default on): after its sweep, each model's temperature (top-p fixed at
``densify_top_p``; a token flow: its knob) is bisected (forethought.eval.curves.next_knob_value) until one of its
points lies within ``entropy_tolerance`` (0.05 nats) of the references' entropy and its points bracket it, at most
``densify_points`` added points (a row's ``densify`` says how many and whether its knob line reached the
tolerance). An added point at knob value v samples with seed ``mix_seed("psf-eval-densify", seed, repr(v))``
(every model alike). The judge-token cap is fixed by the references and the sweep's own points before any point is
added (added sets are cut to it too).

**Matched entropy**: gen-PPL at the references' mean unigram entropy (or at a fixed ``target_entropy``, as the
paper's 5.16 nats; its interval then has no target term), interpolated on each model's knob line
(forethought.eval.curves.ppl_at_entropy): the sweep's and the densified points at top-p ``densify_top_p`` (a token
flow: all its points), so the curve is one temperature curve at fixed top-p (``curve_points`` counts them;
``nearest_entropy_gap`` is the line's), only where the line brackets it (else null), with the bootstrap
interval over the draws that bracket their own target (``bracketed_fraction`` says how many did), **widened by
the interpolation error** (forethought.eval.curves.interpolation_error: the straight line against the quadratic
through the three nearest points, in nats/token) on both sides. On the planted corpus a matched-entropy NLL below
the entropy floor is flagged ``valid: false`` (unigram entropy of a short document does not control its
diversity there), and so is every difference that uses it: compare at temperature 1 (``at_temperature_1`` of
each difference: NLL, persistence, coherence) instead.

**Differences** psf - every other model (ar, the compared runs, the mean trajectory): at every sweep point the
other model shares with psf (same temperature and top-p), for every metric, and at matched entropy. They are
**unpaired** bootstraps: each model's samples are resampled independently. Sampling both models with the same
seed does not pair their samples (the models consume the generator differently, so sample i of one says nothing
about sample i of the other), so resampling pairs would add nothing but the look of pairing.

**Cost** (``cost``): FLOPs per sample measured with FlopCounterMode (temperature 1) and analytic, samples per
second at batch 1 and 32 (wall clock after a warm-up), serial depth (sequential network calls while sampling one
document, counted with forward hooks: prior steps + L/K for PSF, L for AR, Euler steps for a token flow).

Every sample set and judge pass is cached in ``cache_dir``, keyed by everything it depends on, so an interrupted
evaluation resumes and ``prepare_only`` can fill the cache while other runs still train. All checks of the
inputs run before anything is written; ``<out>/results.json`` and ``<out>/curves.png`` are written once,
atomically, at the end.
"""

from __future__ import annotations

import contextlib
import functools
import math
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from forethought.core.env import run_models
from forethought.core.errors import ForethoughtError, first_line
from forethought.core.io import atomic_write_json
from forethought.core.runtime import mix_seed, pick_device
from forethought.data.corpora import load_corpus_text, resolve_corpus, spread_windows
from forethought.data.planted import (
    PLANTED,
    build_generator,
    entropy_rate,
    planted_split,
)
from forethought.eval.cost import count_forward_calls, flops_per_document, samples_per_second
from forethought.eval.curves import interpolation_error, next_knob_value, plot_sweeps
from forethought.eval.judge import load_judge, matched_length, score_texts
from forethought.eval.mauve import mauve_available, mauve_score
from forethought.eval.stats import resample_indices
from forethought.eval.text import decode_samples, reference_set
from forethought.psf.config import EvalConfig
from forethought.psf.eval_models import Candidate, build_candidates
from forethought.psf.generate import RecipeArtifacts
from forethought.psf.prompted import (
    Sampler,
    check_prompt_blocks,
    prompt_documents,
    prompted_continuations,
    prompted_table,
)
from forethought.psf.sampling import device_generator
from forethought.psf.scores import (
    LEVEL,
    Scores,
    cache_key,
    cached_pass,
    cached_samples,
    interval,
    judge_scores,
    matched,
    metrics,
    none_if_nan,
    planted_scores,
    run_fingerprint,
)

# ---- references ----------------------------------------------------------------------------------------------

@dataclass
class References:
    ids: np.ndarray  # (n, L) int64
    offsets: np.ndarray  # (n,) token offsets in the test split
    split_tokens: int  # tokens in the test split
    texts: list[str]


def draw_references(art: RecipeArtifacts, cfg: EvalConfig) -> References:
    """``cfg.references`` windows of L tokens across the whole test split (planted: test documents)."""
    L, corpus = art.cfg.model.seq_len, art.cfg.data.corpus
    if corpus == PLANTED:
        tokens = planted_split(art.cfg.data.planted, "test")
        if cfg.references > len(tokens) // L:
            raise ForethoughtError(f"references: the planted test split holds {len(tokens) // L} documents, "
                                   f"{cfg.references} asked (raise data.planted.test_documents or lower it)")
        ids, offsets = spread_windows(tokens, cfg.references, L, cfg.reference_spread, cfg.seed)
        ids = ids.numpy()
        return References(ids, offsets, len(tokens), art.tokenizer.batch_decode(ids.tolist()))
    ids, offsets, total = reference_set(load_corpus_text(corpus, "test"), art.tokenizer, L, cfg.references,
                                        documents=resolve_corpus(corpus).documents, spread=cfg.reference_spread,
                                        seed=cfg.seed)
    return References(ids, offsets, total, decode_samples(ids, art.tokenizer, wikitext=is_wikitext(corpus)))


def is_wikitext(corpus: str) -> bool:
    return corpus.startswith("wikitext")


# ---- the command ---------------------------------------------------------------------------------------------

def output_dirs(cfg: EvalConfig, art: RecipeArtifacts) -> tuple[Path, Path]:
    run = Path(cfg.recipe_run)
    out = Path(cfg.out) if cfg.out else run / "eval"
    cache = Path(cfg.cache_dir) if cfg.cache_dir else out / "cache"
    for what, p in (("out", out), ("cache_dir", cache)):
        if p.exists() and not p.is_dir():
            raise ForethoughtError(f"{what}: {p} is a file, not a folder")
        if p.resolve().parent == run.resolve() and p.name in art.results["stages"]:
            raise ForethoughtError(f"{what}: {p} is the folder of the run's stage '{p.name}'; choose another")
    return out, cache


@run_models()  # env.json names the models this run loads, not an earlier run's
def evaluate(cfg: EvalConfig, resume: str | None = None) -> dict[str, Any]:
    """``forethought psf eval``: writes ``<out>/results.json`` and ``<out>/curves.png`` and prints a table; with
    ``prepare_only`` fills the cache only. Returns the results (or what was prepared)."""
    del resume  # nothing here is trained; the cache makes a rerun resume
    cfg.validate()  # also when the config was built in Python rather than loaded
    device = pick_device(cfg.device, "--device")
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    hits: list[str] = []
    # every input is read and checked before anything is written
    art, cands = build_candidates(cfg, device)
    out, cache = output_dirs(cfg, art)
    planted = art.cfg.data.corpus == PLANTED
    refs = draw_references(art, cfg)
    prompt_docs = check_prompted(cfg, art, planted)
    judge = jtok = None
    if not planted:
        if cfg.mauve and not cfg.prepare_only:
            if not mauve_available():
                raise ForethoughtError("MAUVE needs the packages mauve-text and faiss-cpu (pip install "
                                       "mauve-text==0.4.0 faiss-cpu==1.15.1), or pass --mauve false")
        judge, jtok = load_judge(cfg.judge)
        judge = judge.to(device)
    timings["load"] = time.perf_counter() - t_start

    # sampling: every set cached under its key
    t0 = time.perf_counter()
    wikitext = is_wikitext(art.cfg.data.corpus)
    sets: dict[str, list[tuple[list[list[int]], list[str]]]] = {}
    keys: dict[str, list[str]] = {}

    def progress(what: str, tag: str, hit: bool, seconds: float) -> None:
        # one line per sample set and judge pass: an evaluation of hours says where it is and what the cache saved
        print(f"psf eval: {what} {tag} ({'cached' if hit else f'{seconds:.0f} s'})", file=sys.stderr, flush=True)

    def draw(name: str, c: Candidate, point: dict[str, float], seed: int, tag: str) -> None:
        """Sample (or read from the cache) one set of ``c`` at ``point`` and append it to sets / keys."""
        k = cache_key(name=name, kind=c.kind, run=run_fingerprint(c.run), seed=seed, n=cfg.samples,
                      batch=cfg.batch_size, **point,
                      **({"rounding": cfg.token_flow_temperature} if c.kind == "token_flow" else {}))

        def make() -> tuple[list[list[int]], list[str]]:
            ids = c.sample(cfg.samples, point, device_generator(seed, device)).cpu()
            texts = (art.tokenizer.batch_decode(ids.tolist()) if planted
                     else decode_samples(ids, art.tokenizer, wikitext=wikitext))
            return ids.tolist(), texts

        ids, texts, wall, hit = cached_samples(cache / f"{tag}-{k}.json", make)
        progress("sampled", tag, hit, wall)
        sets.setdefault(name, []).append((ids, texts))
        keys.setdefault(name, []).append(k)
        timings[f"sample_{name}"] = timings.get(f"sample_{name}", 0.0) + wall
        if hit:
            hits.append(f"{tag} samples")

    for name, c in cands.items():
        for i, point in enumerate(c.points):
            draw(name, c, point, mix_seed("psf-eval-point", cfg.seed, i), f"{name}-p{i}")
    timings["sampling"] = time.perf_counter() - t0

    # judging: the judge-token cap is fixed by the references and the sweep's own points, before densification
    t0 = time.perf_counter()
    cap = mauve_cap = None
    if planted:
        gen = build_generator(art.cfg.data.planted)
        if cfg.prepare_only:
            return {"prepared": list(cands), "timings": timings, "cache_hits": hits}
        ref_scores = planted_scores(gen, refs.ids)
        floor, floor_se = entropy_rate(gen)
        scores = {name: [planted_scores(gen, np.asarray(ids)) for ids, _ in s] for name, s in sets.items()}

        def score_set(tag: str, ids: list[list[int]], texts: list[str], k: str) -> Scores:
            return planted_scores(gen, np.asarray(ids))
    else:
        limit = getattr(judge.config, "max_position_embeddings", None) or getattr(judge.config, "n_positions", None)
        full = limit - 1 if limit else None  # each pass reads whole texts (up to the judge's window); cut below

        def judged(tag: str, texts: list[str], k: str) -> Any:
            unscored_first = {} if cfg.judge_first_token else {"first_token": False}  # earlier caches stay valid
            jk = cache_key(texts=k, judge=cfg.judge, max_tokens=full, **unscored_first)
            t = time.perf_counter()
            jp, hit = cached_pass(cache / f"{tag}-judge-{jk}.safetensors",
                                  lambda: score_texts(texts, judge, jtok, max_tokens=full, batch_size=cfg.judge_batch,
                                                      prepend_start=cfg.judge_first_token))
            progress("judged", tag, hit, time.perf_counter() - t)
            if hit:
                hits.append(f"{tag} judge")
            return jp

        ref_pass = judged("references", refs.texts, cache_key(refs=refs.texts))
        passes = {name: [judged(f"{name}-p{i}", texts, keys[name][i]) for i, (_, texts) in enumerate(s)]
                  for name, s in sets.items()}
        timings["judge_passes"] = time.perf_counter() - t0
        if cfg.prepare_only:
            return {"prepared": list(cands), "timings": timings, "cache_hits": hits}
        cap = matched_length(jtok, refs.texts, *[t for s in sets.values() for _, t in s], quantile=cfg.length_quantile)
        if full:
            cap = min(cap, full)
        mauve_cap = min(cfg.mauve_tokens, cap) if cfg.mauve_tokens else None  # MAUVE@N
        ref_scores = judge_scores(ref_pass, cap, mauve_cap)
        floor = None
        scores = {name: [judge_scores(jp, cap, mauve_cap) for jp in ps] for name, ps in passes.items()}

        def score_set(tag: str, ids: list[list[int]], texts: list[str], k: str) -> Scores:
            return judge_scores(judged(tag, texts, k), cap)

    # densification: bisect each model's knob until a point lies within the tolerance of the target entropy
    t0 = time.perf_counter()
    target_entropy = target_entropy_of(cfg, ref_scores)
    densified: dict[str, dict[str, Any]] = {}
    for name, c in list(cands.items()):
        if not cfg.densify or c.knob is None:
            continue
        points, added = list(c.points), 0
        while added < cfg.densify_points:
            measured = [(p[c.knob.name], metrics(sc)["entropy"]) for p, sc in zip(points, scores[name], strict=True)
                        if c.knob.matches(p)]
            v = next_knob_value(measured, target_entropy, cfg.entropy_tolerance, c.knob.increasing, c.knob.low,
                                c.knob.high, c.knob.start)
            if v is None or c.knob.point(v) in points:
                break
            point, tag = c.knob.point(v), f"{name}-d{added}"
            draw(name, c, point, mix_seed("psf-eval-densify", cfg.seed, repr(float(v))), tag)
            ids, texts = sets[name][-1]
            scores[name].append(score_set(tag, ids, texts, keys[name][-1]))
            points.append(point)
            added += 1
        cands[name] = replace(c, points=points)
        # the knob line's nearest point, as matched entropy reads it (a point off the line is never interpolated)
        gap = min(abs(metrics(sc)["entropy"] - target_entropy) for p, sc in zip(points, scores[name], strict=True)
                  if c.knob.matches(p))
        densified[name] = {"added": added, "nearest_entropy_gap": gap,
                           "within_tolerance": bool(gap <= cfg.entropy_tolerance)}
    timings["densify"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    use_mauve = cfg.mauve and not planted
    rows, differences, target, ref_row = score_models(cands, sets, scores, ref_scores, cfg, use_mauve, floor)
    for name, d in densified.items():
        rows[name]["densify"] = d
    timings["scores_and_bootstrap"] = time.perf_counter() - t0

    prompted = None
    if cfg.prompted_blocks:
        t0 = time.perf_counter()
        methods = prompt_methods(cands)
        prompted = prompted_continuations(build_generator(art.cfg.data.planted), prompt_docs, methods,
                                          cfg.prompted_blocks, cfg.seed, cfg.n_boot, device)
        timings["prompted"] = time.perf_counter() - t0

    if cfg.cost:
        for name, c in cands.items():
            t0 = time.perf_counter()
            rows[name].update(measure_cost(c, cfg.seed, device))
            timings[f"cost_{name}"] = time.perf_counter() - t0
        timings["cost"] = sum(v for k, v in timings.items() if k.startswith("cost_"))
    for name, c in cands.items():
        rows[name].update(params=c.params, **c.info)

    L = art.cfg.model.seq_len
    res: dict[str, Any] = {
        "run": str(cfg.recipe_run), "stage": art.stage, "corpus": art.cfg.data.corpus,
        "tokenizer": "token ids" if planted else art.cfg.data.tokenizer, "seq_len": L,
        "blocks": art.model.blocks, "judge": "true generator (planted)" if planted else cfg.judge,
        "judge_max_tokens": cap, "mauve_max_tokens": mauve_cap or cap,
        "target_entropy": target["value"], "target_entropy_interval": target["interval"],
        "target_entropy_source": target["source"],
        "references": {"split": "test", "n": len(refs.ids), "spread": cfg.reference_spread,
                       "split_tokens": refs.split_tokens, "offsets": refs.offsets.tolist(),
                       "first_offset": int(refs.offsets[0]), "last_end": int(refs.offsets[-1] + L), **ref_row},
        "models": rows, "differences": differences,
        "bootstrap": {"level": LEVEL, "n_boot": cfg.n_boot, "mauve_boot": cfg.mauve_boot if use_mauve else 0,
                      "over": "samples (each set resampled with replacement); the references once per draw, shared "
                              "by every model",
                      "differences": "unpaired: each model's samples resampled independently (equal seeds do not "
                                     "pair two models' samples)"},
        "conventions": conventions(planted),
        "settings": asdict(cfg), "timings": timings, "cache_hits": hits,
    }
    if prompted is not None:
        res["prompted"] = {"prompts": len(prompt_docs), "split": "test", "prompt_blocks": cfg.prompted_blocks,
                           "stay_prob": art.cfg.data.planted.stay_prob,
                           "chance_stay": 1.0 / art.cfg.data.planted.topics,
                           "sampling": "temperature 1, top-p 1, the prior's own Euler steps; prompt length m uses "
                                       "seed mix_seed('psf-prompted', seed, m) for every method",
                           "interval": "95 % percentile bootstrap over prompts; differences: paired (the same "
                                       "prompts), each method minus the first",
                           "results": prompted}
    if planted:
        res["floor"] = {"entropy_rate": floor, "se": floor_se,
                        "note": "H(X)/T of the true generator: the lowest expected NLL per token"}
    png = out / "curves.png"
    res["curves_png"] = str(png)
    res["wall_s"] = time.perf_counter() - t_start
    # the evaluation is written before the plot is drawn: a plotting error must not lose it
    atomic_write_json(out / "results.json", res)
    try:
        plot_sweeps(rows, png, target["value"], res["judge"] if planted else Path(cfg.judge).name,
                    art.cfg.data.corpus, L)
    except Exception as e:  # noqa: BLE001 - any plotting failure: keep the results, say what failed
        res["curves_png"], res["plot_error"] = None, f"{type(e).__name__}: {first_line(e)}"
        atomic_write_json(out / "results.json", res)
        print(f"psf eval: the plot was not drawn ({res['plot_error']}); results.json is complete", file=sys.stderr)
    print(report_table(res))
    if prompted is not None:
        print("\nprompted continuations (planted test prompts):\n" + prompted_table(prompted))
    print(f"\nwrote {out / 'results.json'}" + (f" and {png}" if res["curves_png"] else ""))
    return res


def check_prompted(cfg: EvalConfig, art: RecipeArtifacts, planted: bool) -> np.ndarray | None:
    """The prompts (n, T) of ``prompted_blocks`` (None without it), checked before anything is written."""
    if not cfg.prompted_blocks:
        return None
    if not planted:
        raise ForethoughtError("prompted_blocks scores continuations with the planted corpus's true generator; "
                               f"{cfg.recipe_run} trained on '{art.cfg.data.corpus}'")
    check_prompt_blocks(cfg.prompted_blocks, art.model.blocks)
    return prompt_documents(art.cfg.data.planted, cfg.prompts)


def prompt_methods(cands: dict[str, Candidate]) -> dict[str, Sampler]:
    """Every PSF model's prompted sampler (the prompt's states replaced in x_t); a conditioned prior also without
    replacement (``<name>_no_replace``: the prompt's states as its input only)."""
    methods: dict[str, Sampler] = {}
    for name, c in cands.items():
        if c.prompted is None:
            continue
        methods[name] = functools.partial(c.prompted, replace=True)
        if c.conditioned:
            methods[f"{name}_no_replace"] = functools.partial(c.prompted, replace=False)
    return methods


def target_entropy_of(cfg: EvalConfig, refs: Scores) -> float:
    """The entropy models are compared at: the fixed ``target_entropy``, else the references' own."""
    return cfg.target_entropy or metrics(refs)["entropy"]


def point_row(s: Scores, boot: dict[str, np.ndarray]) -> dict[str, Any]:
    """Metrics of one set and their intervals."""
    obs = metrics(s)
    row: dict[str, Any] = dict(obs)
    row["tokens" if s.features is None else "judge_tokens"] = int(s.tokens.sum())
    row["interval"] = {k: interval(boot[k]) for k in obs}
    return row


def score_models(cands: dict[str, Candidate], sets: dict, scores: dict[str, list[Scores]], refs: Scores,
                 cfg: EvalConfig, use_mauve: bool, floor: float | None = None
                 ) -> tuple[dict[str, dict], dict[str, dict], dict[str, Any], dict[str, Any]]:
    """Rows (per model: sweep points with intervals, matched entropy, the reported point), the differences
    psf - other, the target entropy with its interval and the references' own metrics. ``floor`` (the planted
    corpus's entropy rate) flags a matched-entropy NLL below it as invalid."""
    rng = np.random.default_rng(cfg.seed)
    ref_idx = resample_indices(len(refs), cfg.n_boot, rng)
    ref_boot = metrics(refs, ref_idx)
    # the target: the references' entropy, resampled with them, or a fixed value (no uncertainty of its own)
    target_boot = np.full(cfg.n_boot, cfg.target_entropy) if cfg.target_entropy else ref_boot["entropy"]
    target = {"value": target_entropy_of(cfg, refs), "interval": interval(target_boot),
              "source": "fixed" if cfg.target_entropy else "references"}
    boots: dict[str, list[dict[str, np.ndarray]]] = {}
    rows: dict[str, dict] = {}
    for name, c in cands.items():
        sweep, boots[name] = [], []
        for i, (point, s, (_, texts)) in enumerate(zip(c.points, scores[name], sets[name], strict=True)):
            idx = resample_indices(len(s), cfg.n_boot, rng)
            boot = metrics(s, idx)
            row = {**point, **point_row(s, boot)}
            if use_mauve:
                row["mauve"] = mauve_score(refs.features, s.features, seed=cfg.seed)
                if cfg.mauve_boot:
                    # sklearn / faiss take 32-bit seeds
                    boot["mauve"] = np.array([mauve_score(refs.features[ref_idx[b]], s.features[idx[b]],
                                                          seed=mix_seed("mauve-boot", cfg.seed, b) % 2**31)
                                                 for b in range(cfg.mauve_boot)])
                    row["interval"]["mauve"] = interval(boot["mauve"])
            row["example"] = texts[0][:300]
            row["densified"] = i >= len(cfg.token_flow_sweep if c.kind == "token_flow" else cfg.sweep)  # bisection's
            sweep.append(row)
            boots[name].append(boot)
        # the curve is one knob's line (a decoder: temperature at top-p densify_top_p): points at another top-p
        # lie on another curve, and mixing the two bends the interpolation
        line = [i for i, p in enumerate(c.points) if c.knob is None or c.knob.matches(p)]
        curve = [(sweep[i]["entropy"], sweep[i]["gen_ppl"]) for i in line]
        at = none_if_nan(matched(curve, target["value"]))
        at_boot = np.array([matched([(boots[name][i]["entropy"][j], boots[name][i]["gen_ppl"][j]) for i in line],
                                    target_boot[j]) for j in range(cfg.n_boot)])
        near = min(sweep, key=lambda p: abs(p["entropy"] - target["value"]))
        gap = min((abs(e - target["value"]) for e, _ in curve), default=math.inf)
        err = interpolation_error(curve, target["value"]) if at is not None else None
        me: dict[str, Any] = {"gen_ppl": at, "interval": widen(interval(at_boot), err) if at is not None else None,
                              "interval_sampling_only": interval(at_boot) if at is not None else None,
                              "interpolation_error_nats": err,
                              "nearest_entropy_gap": gap, "curve_points": len(line),
                              "bracketed_fraction": float(np.isfinite(at_boot).mean()), "_boot": at_boot,
                              "_err": err or 0.0}
        if at is not None:
            me["nll_per_token"] = math.log(at)
            if floor is not None:  # an NLL below the entropy rate: unigram entropy did not match the diversity
                me["below_floor"] = me["nll_per_token"] < floor
                me["valid"] = not me["below_floor"]
        rows[name] = {"kind": c.kind, "run_dir": str(c.run), "gen_ppl_at_matched_entropy": at, "matched_entropy": me,
                      "entropy": near["entropy"], "gen_ppl": near["gen_ppl"], "mauve": near.get("mauve"),
                      "reported_point": {k: near[k] for k in c.points[0]}, "sweep": sweep}
    differences = {}
    if "psf" in cands:
        for name, c in cands.items():
            if name != "psf":
                differences[f"psf - {name}"] = difference(cands["psf"], c, rows, boots)
    for row in rows.values():
        row["matched_entropy"].pop("_boot")
        row["matched_entropy"].pop("_err")
    return rows, differences, target, point_row(refs, ref_boot)


def widen(iv: list[float] | None, err: float | None) -> list[float] | None:
    """A gen-PPL interval widened by the interpolation error ``err`` (nats/token) on both sides, in log space."""
    if iv is None or not err:
        return iv
    return [iv[0] * math.exp(-err), iv[1] * math.exp(err)]


TEMPERATURE_1 = {"temperature": 1.0, "top_p": 1.0}  # where neither a decoder nor its nucleus is truncated


def difference(a: Candidate, b: Candidate, rows: dict, boots: dict) -> dict[str, Any]:
    """a - b at every sweep point they share, at temperature 1 (top-p 1) and at matched entropy (unpaired
    bootstrap). At matched entropy each side's interpolation error widens the interval: the gen-PPL difference
    spans a·e^(±err_a) - b·e^(∓err_b) over the draws, the NLL difference ± (err_a + err_b)."""
    per_point = []
    for i, point in enumerate(a.points):
        if point not in b.points:
            continue
        j = b.points.index(point)
        pa, pb = rows[a.name]["sweep"][i], rows[b.name]["sweep"][j]
        ba, bb = boots[a.name][i], boots[b.name][j]
        entry: dict[str, Any] = {**point, "diff": {}, "interval": {}}
        for k in pa["interval"]:
            if k in pb["interval"] and k in ba and k in bb:
                entry["diff"][k] = pa[k] - pb[k]
                entry["interval"][k] = interval(ba[k] - bb[k])
        per_point.append(entry)
    ma, mb = rows[a.name]["matched_entropy"], rows[b.name]["matched_entropy"]
    both = ma["gen_ppl"] is not None and mb["gen_ppl"] is not None
    ea, eb = ma["_err"], mb["_err"]
    d = ma["_boot"] - mb["_boot"]
    with np.errstate(invalid="ignore"):  # nan (unbracketed draws) stays nan
        d_nll = np.log(ma["_boot"]) - np.log(mb["_boot"])  # NLL per token = log gen-PPL
        lo = interval(ma["_boot"] * math.exp(-ea) - mb["_boot"] * math.exp(eb))
        hi = interval(ma["_boot"] * math.exp(ea) - mb["_boot"] * math.exp(-eb))
    nll_iv = interval(d_nll)
    matched_entropy: dict[str, Any] = {
        "gen_ppl_diff": ma["gen_ppl"] - mb["gen_ppl"] if both else None,
        "interval": [lo[0], hi[1]] if both and lo and hi else None,
        "nll_per_token_diff": math.log(ma["gen_ppl"] / mb["gen_ppl"]) if both else None,
        "nll_per_token_interval": [nll_iv[0] - ea - eb, nll_iv[1] + ea + eb] if both and nll_iv else None,
        "interpolation_error_nats": ea + eb if both else None,
        "bracketed_fraction": float(np.isfinite(d).mean())}
    if both and ("valid" in ma or "valid" in mb):
        matched_entropy["valid"] = bool(ma.get("valid", True) and mb.get("valid", True))
        if not matched_entropy["valid"]:
            matched_entropy["invalid_reason"] = ("a matched-entropy NLL below the entropy floor: unigram entropy "
                                                 "does not match these models' diversity; compare at temperature 1")
    t1 = next((p for p in per_point if all(p.get(k) == v for k, v in TEMPERATURE_1.items())), None)
    return {"per_point": per_point, "matched_entropy": matched_entropy,
            "at_temperature_1": None if t1 is None else {k: {"diff": t1["diff"][k], "interval": t1["interval"][k]}
                                                         for k in ("nll_per_token", "gen_ppl", "entropy",
                                                                   "persistence", "block_coherence")
                                                         if k in t1["diff"]},
            "points_shared": len(per_point)}


def measure_cost(c: Candidate, seed: int, device: torch.device) -> dict[str, Any]:
    """FLOPs per sample (measured), serial depth and samples/s at batch 1 and 32, at the neutral setting."""
    g = device_generator(seed, device)
    flops = flops_per_document(lambda n: c.sample(n, c.neutral, g), 1)
    with torch.no_grad(), contextlib.ExitStack() as stack:
        counts = [stack.enter_context(count_forward_calls(m)) for m in c.depth_modules]
        c.sample(1, c.neutral, g)
    sps = samples_per_second(lambda b: c.sample(b, c.neutral, g), [1, 32])
    return {"flops_per_sample": flops, "flops_per_sample_analytic": c.analytic, "samples_per_s_b1": sps[1],
            "samples_per_s_b32": sps[32], "serial_depth": sum(n[0] for n in counts), "cost_setting": c.neutral}


def conventions(planted: bool) -> dict[str, str]:
    judge = ("the true generator's exact NLL (forward algorithm), model token ids" if planted
             else "judge-token NLL after the judge_max_tokens cap")
    return {
        "gen_ppl": f"exp(token-weighted mean NLL) over a set: {judge}",
        "entropy": "mean over samples of each sample's unigram entropy (nats) of "
                   + ("its token ids" if planted else "its judge tokens after the cap"),
        "repetition_n": "mean over samples of the fraction of a sample's n-grams that repeat an earlier one "
                        "(1 - distinct-n)",
        "gen_ppl_at_matched_entropy": "log-linear interpolation on the sweep (densified: bisection until a point "
                                      "lies within entropy_tolerance) at target_entropy (the references' entropy, "
                                      "or the fixed target_entropy setting: target_entropy_source); "
                                      "null when not bracketed; its interval is the bootstrap's widened by the "
                                      "interpolation error (|linear - quadratic| in log gen-PPL through the nearest "
                                      "three points)" + ("; flagged invalid where its NLL falls below the entropy "
                                                         "floor" if planted else ""),
        "entropy/gen_ppl/mauve of a model": "of the sweep point nearest the target entropy (reported_point)",
        "interval": "95% percentile bootstrap over samples",
        "flops_per_sample": "FlopCounterMode around sampling one document at cost_setting",
        "flops_per_sample_analytic": "2·matmul params·positions + attention 4·layers·d·positions·context per "
                                     "network call, summed over the calls of one document (KV-cached decoders: one "
                                     "position per step; token flow adds softmax·E)",
        "serial_depth": "sequential forward calls counted with hooks while sampling one document",
        "samples_per_s": "wall clock, one untimed warm-up per batch size",
    }


def fmt_iv(x: float | None, iv: list[float] | None, spec: str = ".3g") -> str:
    if x is None:
        return "—"
    return f"{x:{spec}}" + (f" [{iv[0]:{spec}}, {iv[1]:{spec}}]" if iv else "")


def report_table(res: dict) -> str:
    """A markdown summary of a results.json of ``psf eval``."""
    lines = [f"psf eval {res['run']}: {res['corpus']}, L={res['seq_len']}, judge {res['judge']}; target entropy "
             f"{fmt_iv(res['target_entropy'], res['target_entropy_interval'], '.3f')} nats "
             + ("(fixed; " if res.get("target_entropy_source") == "fixed" else "(")
             + f"{res['references']['n']} test references, {res['references']['spread']} spread)"]
    if "floor" in res:
        lines.append(f"floor (entropy rate): {res['floor']['entropy_rate']:.3f} nats/token; references' NLL "
                     f"{res['references']['nll_per_token']:.3f}")
    planted = "floor" in res
    cols = ([("nll_per_token", "NLL/token", ".3f"), ("persistence", "persistence", ".3f"),
             ("block_coherence", "coherence", ".3f")] if planted
            else [("gen_ppl", "gen-PPL", ".3g"), ("mauve", "MAUVE", ".3f")])
    cols += [("repetition_2", "rep-2", ".3f"), ("repetition_4", "rep-4", ".3f")]
    matched_head = "NLL/token @ matched entropy" if planted else "gen-PPL @ matched entropy"
    lines += ["", f"| model | point | {matched_head} | entropy | " + " | ".join(h for _, h, _ in cols)
              + " | FLOPs / sample | serial depth | samples/s b32 |", "|---" * (len(cols) + 7) + "|"]
    for name, r in res["models"].items():
        near = next(p for p in r["sweep"] if all(p[k] == v for k, v in r["reported_point"].items()))
        iv = near["interval"]
        m = r["matched_entropy"]
        if planted:
            log_iv = None if m["interval"] is None else [math.log(x) for x in m["interval"]]
            at = fmt_iv(m.get("nll_per_token"), log_iv, ".3f") + (" INVALID (below the floor)"
                                                                   if m.get("valid") is False else "")
        else:
            at = fmt_iv(m["gen_ppl"], m["interval"])
        cells = [", ".join(f"{v:g}" for v in r["reported_point"].values()), at,
                 fmt_iv(near["entropy"], iv["entropy"], ".3f")]
        cells += [fmt_iv(near.get(k), iv.get(k), spec) for k, _, spec in cols]
        cells += [fmt_iv(r.get(k), None) for k in ("flops_per_sample", "serial_depth", "samples_per_s_b32")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    dense = {name: r["densify"] for name, r in res["models"].items() if "densify" in r}
    if dense:
        lines += ["", "densified sweeps: " + "; ".join(
            f"{name} +{d['added']} points, nearest {d['nearest_entropy_gap']:.3f} nats from the target"
            + ("" if d["within_tolerance"] else " (NOT within the tolerance)") for name, d in dense.items())]
    if res["differences"]:
        lines += ["", "differences (unpaired bootstrap, 95%):"]
        for name, d in res["differences"].items():
            m = d["matched_entropy"]
            parts = [f"gen-PPL @ matched entropy {fmt_iv(m['gen_ppl_diff'], m['interval'], '+.3g')}"
                     + (" INVALID (a matched NLL below the floor)" if m.get("valid") is False else "")]
            if d.get("at_temperature_1"):
                t1 = d["at_temperature_1"]
                parts.append("temperature 1: " + ", ".join(
                    f"{k} {fmt_iv(v['diff'], v['interval'], '+.3f')}" for k, v in t1.items()
                    if k in ("nll_per_token", "persistence")))
            for p in d["per_point"]:
                setting = ", ".join(f"{k} {v:g}" for k, v in p.items() if k not in ("diff", "interval"))
                nll = fmt_iv(p["diff"]["nll_per_token"], p["interval"]["nll_per_token"], "+.3f")
                parts.append(f"({setting}) NLL/token {nll}")
            lines.append(f"- {name}: " + "; ".join(parts))
    return "\n".join(lines)
