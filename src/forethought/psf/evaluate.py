"""``forethought psf eval``: the field's evaluation of a finished ``psf recipe`` run, with intervals.

What is evaluated (each a *model*, named in the results):

- ``psf``: the run's final PSF model sampling state trajectories from its prior; ``psf_mean_trajectory``: the
  same decoder on the prior's stored mean trajectory (the ablation); ``psf_state_only``: the same decoder with
  the run's state-only prior and zero codes (the paper's state-only configuration; recipe
  ``prior.state_only_variant``), if trained; ``ar``: the run's AR baseline, if trained;
- every folder in ``compare``, named by its folder name: another ``psf recipe`` run (its final PSF model and
  prior, e.g. the content-state ablation) or a token-flow run (:func:`forethought.psf.token_flow.load_token_flow`).
  They must share the run's corpus, tokenizer and L.

Each model samples ``samples`` documents at every sweep point: (temperature, top-p) for the decoders, the
entropy knob's values for a token flow (``token_flow_knob``: its softmax temperature at every Euler step, or
its SDE noise). Sweep point i is sampled with seed ``seed + i`` for every model.

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

**Matched entropy**: gen-PPL at the references' mean unigram entropy, interpolated on each model's sweep
(forethought.eval.curves.ppl_at_entropy) only where the sweep brackets it (else null), with the bootstrap
interval over the draws that bracket their own target (``bracketed_fraction`` says how many did).

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
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from forethought.core.errors import ForethoughtError, first_line
from forethought.core.io import atomic_write_json
from forethought.core.runtime import pick_device
from forethought.data.corpora import load_corpus_text, resolve_corpus, spread_windows
from forethought.data.planted import (
    PLANTED,
    build_generator,
    entropy_rate,
    planted_split,
)
from forethought.eval.cost import (
    analytic_cached_decode,
    analytic_flops,
    count_forward_calls,
    flops_per_document,
    matmul_params,
    samples_per_second,
)
from forethought.eval.curves import plot_entropy_curves
from forethought.eval.judge import load_judge, matched_length, score_texts
from forethought.eval.mauve import mauve_available, mauve_score
from forethought.eval.stats import resample_indices
from forethought.eval.text import decode_samples, reference_set
from forethought.psf.ar import sample_ar
from forethought.psf.config import OWN_MODELS, EvalConfig
from forethought.psf.generate import RecipeArtifacts, load_recipe, sample_psf
from forethought.psf.model import PSFModel
from forethought.psf.prior import FlowPrior
from forethought.psf.prompted import Sampler, check_prompt_blocks, prompted_continuations, prompted_table
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
from forethought.psf.token_flow import TokenFlow, check_knobs, is_token_flow_run, load_token_flow, sample_token_flow

KNOB_NEUTRAL = {"step_temperature": 1.0, "noise": 0.0}  # the plain ODE sampler


# ---- the models ----------------------------------------------------------------------------------------------

@dataclass
class Candidate:
    """One evaluated model: ``sample(n, point, generator)`` -> (n, L) ids at one sweep point, and its cost facts."""

    name: str
    kind: Literal["psf", "psf_mean_trajectory", "ar", "token_flow"]
    run: Path  # its run folder (its results.json keys the cache)
    points: list[dict[str, float]]  # the sweep point settings
    sample: Callable[[int, dict[str, float], torch.Generator], torch.Tensor]
    neutral: dict[str, float]  # the setting at which cost is measured
    depth_modules: list[torch.nn.Module]  # modules whose forward calls are the sequential steps of sampling
    analytic: int  # analytic FLOPs per document
    params: int
    info: dict[str, Any]  # sizes, training facts and settings, copied into the results row
    # PSF models: (prompt (n, m·L/K), generator, replace) -> (n, L) continuations; None for the others
    prompted: Callable[[torch.Tensor, torch.Generator, bool], torch.Tensor] | None = None
    conditioned: bool = False  # its prior takes the prompt's states as input (conditioning known_mask)


def analytic_psf(model: PSFModel, prior: FlowPrior, steps: int, mean: bool) -> int:
    """Analytic FLOPs of one PSF document: the prior's ``steps`` passes over K states (none for the mean
    trajectory), the state / code / landing projections, and K KV-cached decodes of K + 1 prefix slots and
    L/K - 1 further steps."""
    K, n, d = model.blocks, model.block_len, model.config.n_embd
    dec = model.decoder
    flops = K * analytic_cached_decode(matmul_params(dec), dec.config.n_layer, d, K + 1, n - 1)
    flops += 2 * model.state_in.weight.numel() * K  # states -> memory slots
    if model.use_codes:
        flops += 2 * model.code_in.weight.numel() * K
    if model.landing:
        flops += 2 * model.land_proj.weight.numel() * (K - 1)
    if not mean:
        pc = prior.config
        per_step = analytic_flops(matmul_params(prior.net), K, pc.n_layer, pc.n_embd)
        per_step += 2 * matmul_params(prior.time_mlp)  # the time MLP runs once per document and step
        flops += steps * per_step
    return int(flops)


def analytic_ar(ar: torch.nn.Module, L: int) -> int:
    """Analytic FLOPs of one KV-cached AR document of L tokens."""
    return analytic_cached_decode(matmul_params(ar), ar.config.n_layer, ar.config.n_embd, 0, L)


def analytic_token_flow(tf: TokenFlow) -> int:
    """Analytic FLOPs of one token-flow document: ``steps`` dense passes over L positions (+ softmax·E)."""
    c = tf.config
    per_step = analytic_flops(matmul_params(tf.net), c.seq_len, c.n_layer, c.n_embd)
    if c.head == "logits":
        per_step += 2 * c.seq_len * tf.vocab_size * tf.dim  # x̂ = softmax(logits) · E
    return int(c.steps * per_step)


def psf_training(results: dict) -> dict[str, Any]:
    """Training facts of a recipe run's PSF model: tokens of all model stages, wall time of all PSF stages."""
    stages = {k: v for k, v in results["stages"].items() if k != "ar"}
    return {"train_tokens": results.get("model_training_tokens"),
            "train_wall_s": sum(v["train_wall_s"] for v in stages.values()),
            "prior_train_steps": sum(v["steps"] for k, v in stages.items() if k.startswith("prior")),
            "stages": list(stages)}


def psf_candidate(name: str, art: RecipeArtifacts, run: Path, trajectory: Literal["prior", "mean"],
                  cfg: EvalConfig, enc_dec: int, state_only: bool = False) -> Candidate:
    prior = art.state_only_prior if state_only else art.prior
    if prior is None:
        what = ("state-only prior (recipe prior.state_only_variant)" if state_only
                else "prior (the recipe's prior stage)")
        raise ForethoughtError(f"{name}: stage '{art.stage}' of {run} has no trained {what}, so PSF cannot sample")
    model, steps = art.model, prior.config.steps

    def sample(n: int, point: dict[str, float], g: torch.Generator) -> torch.Tensor:
        return sample_psf(model, prior, n, temperature=point["temperature"], top_p=point["top_p"], steps=steps,
                          generator=g, trajectory=trajectory, batch_size=cfg.batch_size)

    counts = model.num_params()
    n_prior = sum(p.numel() for p in prior.parameters())
    mean = trajectory == "mean"
    info = {"params_encoder_decoder": counts["encoder"] + counts["decoder"],
            "params_breakdown": {**counts, "prior": n_prior}, "prior_steps": 0 if mean else steps,
            "blocks": model.blocks, "block_len": model.block_len, "states": model.config.states,
            "trajectory": trajectory, "final_stage": art.stage, **psf_training(art.results),
            "codes": "none" if not model.use_codes else "zero (state-only prior)" if prior.dim == model.state_dim
            else "sampled with the states"}
    if mean:
        info["note"] = "the psf model and prior (no training of its own)"
    if enc_dec != info["params_encoder_decoder"]:
        info["params_ratio_to_psf_encoder_decoder"] = info["params_encoder_decoder"] / enc_dec
    def prompted(prompt: torch.Tensor, g: torch.Generator, replace: bool = True) -> torch.Tensor:
        dev = next(model.parameters()).device
        return sample_psf(model, prior, len(prompt), steps=steps, generator=g, prompt=prompt.to(dev),
                          replace=replace, batch_size=cfg.batch_size)

    return Candidate(name, "psf_mean_trajectory" if mean else "psf", run, points_of(cfg.sweep), sample,
                     {"temperature": 1.0, "top_p": 1.0}, ([] if mean else [prior]) + [model.decoder],
                     analytic_psf(model, prior, steps, mean), counts["total"] + n_prior, info,
                     None if mean else prompted, bool(getattr(prior, "conditioned", False)))


def ar_candidate(art: RecipeArtifacts, run: Path, cfg: EvalConfig, enc_dec: int) -> Candidate:
    ar, L, b = art.ar, art.cfg.model.seq_len, cfg.batch_size

    def sample(n: int, point: dict[str, float], g: torch.Generator) -> torch.Tensor:
        return torch.cat([sample_ar(ar, min(b, n - i), L, art.bos_id, temperature=point["temperature"],
                                    top_p=point["top_p"], generator=g) for i in range(0, n, b)])

    res = art.results["stages"]["ar"]
    info = {"kv_cache": True, "params_ratio_to_psf_encoder_decoder": ar.num_params() / enc_dec,
            "train_tokens": res["training_tokens"], "train_wall_s": res["train_wall_s"]}
    return Candidate("ar", "ar", run, points_of(cfg.sweep), sample, {"temperature": 1.0, "top_p": 1.0}, [ar],
                     analytic_ar(ar, L), ar.num_params(), info)


def token_flow_candidate(name: str, tf: TokenFlow, results: dict, run: Path, cfg: EvalConfig,
                         enc_dec: int) -> Candidate:
    knob, b = cfg.token_flow_knob, cfg.batch_size
    for v in cfg.token_flow_sweep:  # before anything is sampled: e.g. step_temperature needs a logits head
        check_knobs(tf, **{**KNOB_NEUTRAL, knob: v})

    def sample(n: int, point: dict[str, float], g: torch.Generator) -> torch.Tensor:
        return sample_token_flow(tf, n, None, g, temperature=cfg.token_flow_temperature, batch_size=b,
                                 **{knob: point[knob]})

    info = {"steps": tf.config.steps, "params_ratio_to_psf_encoder_decoder": tf.num_params() / enc_dec,
            "config": asdict(tf.config), "knob": knob, "rounding_temperature": cfg.token_flow_temperature,
            "top_p": "none (no nucleus)", "frozen_table_params": tf.table.numel(),
            "train_tokens": results.get("training_tokens"), "train_wall_s": results.get("train_wall_s")}
    return Candidate(name, "token_flow", run, [{knob: float(v)} for v in cfg.token_flow_sweep], sample,
                     {knob: KNOB_NEUTRAL[knob]}, [tf], analytic_token_flow(tf), tf.num_params(), info)


def points_of(sweep: list[list[float]]) -> list[dict[str, float]]:
    return [{"temperature": float(t), "top_p": float(p)} for t, p in sweep]


def data_signature(art: RecipeArtifacts) -> dict[str, Any]:
    """What a run models: the corpus, its tokenizer (planted: the generator's settings), L and the vocabulary."""
    d = art.cfg.data
    return {"corpus": d.corpus, "tokenizer": asdict(d.planted) if d.corpus == PLANTED else d.tokenizer,
            "seq_len": art.cfg.model.seq_len, "vocab_size": art.results["vocab_size"]}


def build_candidates(cfg: EvalConfig, device: torch.device) -> tuple[RecipeArtifacts, dict[str, Candidate]]:
    """The evaluated run and every model to evaluate, checked (nothing is written)."""
    run = Path(cfg.recipe_run)
    names = [Path(f).resolve().name for f in cfg.compare]
    for folder, name in zip(cfg.compare, names):
        if not Path(folder).is_dir():
            raise ForethoughtError(f"compare: {folder} is not a folder")
        if name in OWN_MODELS or names.count(name) > 1:
            raise ForethoughtError(f"compare: the folder name '{name}' of {folder} names another model too (models "
                                   f"are named by their folders; {', '.join(OWN_MODELS)} are the run's own)")
    art = load_recipe(run, device=device)
    counts = art.model.num_params()
    enc_dec = counts["encoder"] + counts["decoder"]
    has = {"ar": art.ar is not None, "psf_state_only": art.state_only_prior is not None}
    wanted = list(cfg.models) or [m for m in OWN_MODELS if has.get(m, True)]
    if "ar" in wanted and art.ar is None:
        raise ForethoughtError(f"models: {run} has no AR baseline (train it with baselines: [ar])")
    cands: dict[str, Candidate] = {}
    for name in wanted:
        if name == "ar":
            cands[name] = ar_candidate(art, run, cfg, enc_dec)
        else:
            cands[name] = psf_candidate(name, art, run, "mean" if name == "psf_mean_trajectory" else "prior", cfg,
                                        enc_dec, state_only=name == "psf_state_only")
    L, vocab = art.cfg.model.seq_len, art.results["vocab_size"]
    for folder, name in zip(cfg.compare, names):
        path = Path(folder)
        if is_token_flow_run(path):
            tf, results = load_token_flow(path, device)
            if tf.vocab_size != vocab or tf.config.seq_len != L:
                raise ForethoughtError(f"compare: the token flow {path} models {tf.config.seq_len} tokens over "
                                       f"{tf.vocab_size} ids, the run {L} over {vocab}")
            cands[name] = token_flow_candidate(name, tf, results, path, cfg, enc_dec)
        elif (path / "config.yaml").is_file() and (path / "results.json").is_file():
            other = load_recipe(path, device=device)
            mine, theirs = data_signature(art), data_signature(other)
            if mine != theirs:
                diff = "; ".join(f"{k} {theirs[k]} vs {mine[k]}" for k in mine if mine[k] != theirs[k])
                raise ForethoughtError(f"compare: {path} models other data than {run} ({diff})")
            cands[name] = psf_candidate(name, other, path, "prior", cfg, enc_dec)
        else:
            raise ForethoughtError(f"compare: {path} is neither a finished 'psf recipe' run (config.yaml, "
                                   "results.json) nor a token-flow run (a step-NNNNNN/ token-flow checkpoint)")
    return art, cands


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
    for name, c in cands.items():
        sets[name], keys[name] = [], []
        fp = run_fingerprint(c.run)
        for i, point in enumerate(c.points):
            k = cache_key(name=name, kind=c.kind, run=fp, seed=cfg.seed + i, n=cfg.samples, batch=cfg.batch_size,
                          **point, **({"rounding": cfg.token_flow_temperature} if c.kind == "token_flow" else {}))

            def make(c: Candidate = c, i: int = i, point: dict = point) -> tuple[list[list[int]], list[str]]:
                ids = c.sample(cfg.samples, point, device_generator(cfg.seed + i, device)).cpu()
                texts = (art.tokenizer.batch_decode(ids.tolist()) if planted
                         else decode_samples(ids, art.tokenizer, wikitext=wikitext))
                return ids.tolist(), texts

            ids, texts, wall, hit = cached_samples(cache / f"{name}-p{i}-{k}.json", make)
            sets[name].append((ids, texts))
            keys[name].append(k)
            timings[f"sample_{name}"] = timings.get(f"sample_{name}", 0.0) + wall
            if hit:
                hits.append(f"{name}-p{i} samples")
    timings["sampling"] = time.perf_counter() - t0

    # judging
    t0 = time.perf_counter()
    cap = None
    if planted:
        gen = build_generator(art.cfg.data.planted)
        if cfg.prepare_only:
            return {"prepared": list(cands), "timings": timings, "cache_hits": hits}
        ref_scores = planted_scores(gen, refs.ids)
        scores = {name: [planted_scores(gen, np.asarray(ids)) for ids, _ in s] for name, s in sets.items()}
        floor, floor_se = entropy_rate(gen)
    else:
        limit = getattr(judge.config, "max_position_embeddings", None) or getattr(judge.config, "n_positions", None)
        full = limit - 1 if limit else None  # each pass reads whole texts (up to the judge's window); cut below

        def judged(tag: str, texts: list[str], k: str) -> Any:
            jk = cache_key(texts=k, judge=cfg.judge, max_tokens=full)
            jp, hit = cached_pass(cache / f"{tag}-judge-{jk}.safetensors",
                                  lambda: score_texts(texts, judge, jtok, max_tokens=full, batch_size=cfg.judge_batch))
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
        ref_scores = judge_scores(ref_pass, cap)
        scores = {name: [judge_scores(jp, cap) for jp in ps] for name, ps in passes.items()}

    t0 = time.perf_counter()
    use_mauve = cfg.mauve and not planted
    rows, differences, target, ref_row = score_models(cands, sets, scores, ref_scores, cfg, use_mauve)
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
        "judge_max_tokens": cap, "target_entropy": target["value"], "target_entropy_interval": target["interval"],
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
                                       "seed 1000·seed + m for every method",
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
    curves = {name: [(p["entropy"], p["gen_ppl"]) for p in row["sweep"]] for name, row in rows.items()}
    try:
        plot_entropy_curves(curves, png, target_entropy=target["value"], judge=res["judge"] if planted
                            else Path(cfg.judge).name,
                            title=f"gen-PPL vs unigram entropy, {art.cfg.data.corpus} L={L}")
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
    T = art.cfg.model.seq_len
    docs = planted_split(art.cfg.data.planted, "test").reshape(-1, T).astype(np.int64)
    if len(docs) < cfg.prompts:
        raise ForethoughtError(f"prompts: the planted test split holds {len(docs)} documents, {cfg.prompts} asked "
                               "(data.planted.test_documents)")
    return docs[:cfg.prompts]


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


def point_row(s: Scores, boot: dict[str, np.ndarray]) -> dict[str, Any]:
    """Metrics of one set and their intervals."""
    obs = metrics(s)
    row: dict[str, Any] = dict(obs)
    row["tokens" if s.features is None else "judge_tokens"] = int(s.tokens.sum())
    row["interval"] = {k: interval(boot[k]) for k in obs}
    return row


def score_models(cands: dict[str, Candidate], sets: dict, scores: dict[str, list[Scores]], refs: Scores,
                 cfg: EvalConfig, use_mauve: bool
                 ) -> tuple[dict[str, dict], dict[str, dict], dict[str, Any], dict[str, Any]]:
    """Rows (per model: sweep points with intervals, matched entropy, the reported point), the differences
    psf - other, the target entropy with its interval and the references' own metrics."""
    rng = np.random.default_rng(cfg.seed)
    ref_idx = resample_indices(len(refs), cfg.n_boot, rng)
    ref_boot = metrics(refs, ref_idx)
    target = {"value": metrics(refs)["entropy"], "interval": interval(ref_boot["entropy"])}
    boots: dict[str, list[dict[str, np.ndarray]]] = {}
    rows: dict[str, dict] = {}
    for name, c in cands.items():
        sweep, boots[name] = [], []
        for point, s, (_, texts) in zip(c.points, scores[name], sets[name]):
            idx = resample_indices(len(s), cfg.n_boot, rng)
            boot = metrics(s, idx)
            row = {**point, **point_row(s, boot)}
            if use_mauve:
                row["mauve"] = mauve_score(refs.features, s.features, seed=cfg.seed)
                if cfg.mauve_boot:
                    boot["mauve"] = np.array([mauve_score(refs.features[ref_idx[b]], s.features[idx[b]],
                                                          seed=cfg.seed + b) for b in range(cfg.mauve_boot)])
                    row["interval"]["mauve"] = interval(boot["mauve"])
            row["example"] = texts[0][:300]
            sweep.append(row)
            boots[name].append(boot)
        curve = [(p["entropy"], p["gen_ppl"]) for p in sweep]
        at = none_if_nan(matched(curve, target["value"]))
        at_boot = np.array([matched([(b["entropy"][j], b["gen_ppl"][j]) for b in boots[name]],
                                    ref_boot["entropy"][j]) for j in range(cfg.n_boot)])
        near = min(sweep, key=lambda p: abs(p["entropy"] - target["value"]))
        rows[name] = {"kind": c.kind, "run_dir": str(c.run), "gen_ppl_at_matched_entropy": at,
                      "matched_entropy": {"gen_ppl": at, "interval": interval(at_boot) if at is not None else None,
                                          "bracketed_fraction": float(np.isfinite(at_boot).mean()),
                                          "_boot": at_boot},
                      "entropy": near["entropy"], "gen_ppl": near["gen_ppl"], "mauve": near.get("mauve"),
                      "reported_point": {k: near[k] for k in c.points[0]}, "sweep": sweep}
        if at is not None:
            rows[name]["matched_entropy"]["nll_per_token"] = math.log(at)
    differences = {}
    if "psf" in cands:
        for name, c in cands.items():
            if name != "psf":
                differences[f"psf - {name}"] = difference(cands["psf"], c, rows, boots)
    for row in rows.values():
        row["matched_entropy"].pop("_boot")
    return rows, differences, target, point_row(refs, ref_boot)


def difference(a: Candidate, b: Candidate, rows: dict, boots: dict) -> dict[str, Any]:
    """a - b at every sweep point they share and at matched entropy (unpaired bootstrap)."""
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
    d = ma["_boot"] - mb["_boot"]
    with np.errstate(invalid="ignore"):  # nan (unbracketed draws) stays nan
        d_nll = np.log(ma["_boot"]) - np.log(mb["_boot"])  # NLL per token = log gen-PPL
    return {"per_point": per_point,
            "matched_entropy": {"gen_ppl_diff": ma["gen_ppl"] - mb["gen_ppl"] if both else None,
                                "interval": interval(d) if both else None,
                                "nll_per_token_diff": math.log(ma["gen_ppl"] / mb["gen_ppl"]) if both else None,
                                "nll_per_token_interval": interval(d_nll) if both else None,
                                "bracketed_fraction": float(np.isfinite(d).mean())},
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
        "gen_ppl_at_matched_entropy": "log-linear interpolation on the sweep at target_entropy (the references' "
                                      "entropy); null when not bracketed",
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
             f"({res['references']['n']} test references, {res['references']['spread']} spread)"]
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
            at = fmt_iv(m.get("nll_per_token"), log_iv, ".3f")
        else:
            at = fmt_iv(m["gen_ppl"], m["interval"])
        cells = [", ".join(f"{v:g}" for v in r["reported_point"].values()), at,
                 fmt_iv(near["entropy"], iv["entropy"], ".3f")]
        cells += [fmt_iv(near.get(k), iv.get(k), spec) for k, _, spec in cols]
        cells += [fmt_iv(r.get(k), None) for k in ("flops_per_sample", "serial_depth", "samples_per_s_b32")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if res["differences"]:
        lines += ["", "differences (unpaired bootstrap, 95%):"]
        for name, d in res["differences"].items():
            m = d["matched_entropy"]
            parts = [f"gen-PPL @ matched entropy {fmt_iv(m['gen_ppl_diff'], m['interval'], '+.3g')}"]
            for p in d["per_point"]:
                setting = ", ".join(f"{k} {v:g}" for k, v in p.items() if k not in ("diff", "interval"))
                nll = fmt_iv(p["diff"]["nll_per_token"], p["interval"]["nll_per_token"], "+.3f")
                parts.append(f"({setting}) NLL/token {nll}")
            lines.append(f"- {name}: " + "; ".join(parts))
    return "\n".join(lines)
