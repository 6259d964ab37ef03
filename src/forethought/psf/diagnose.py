"""``forethought psf diagnose``: where a finished ``psf recipe`` run's generations lose, measured three ways.

1. **State-shuffle cost** (:func:`state_shuffle_cost`): teacher-forced cross-entropy per token given each
   document's own states, and given states taken from other documents (a derangement of the documents, averaged
   over a few), split into the first token of every block, the other tokens and all. A decoder that reads its
   states pays for wrong ones; one that ignores them pays nothing. With realization codes it is measured three
   ways: the codes kept (each block's posterior mean), zeroed, and shuffled together with the states (codes
   describe the block being written, so with them kept the states may have little left to add).
2. **The ceiling** (:func:`context_ceiling`): the AR baseline's cross-entropy with full context and with its
   context cut at every block boundary (:func:`forethought.psf.ar.ar_token_nll`). Cut minus full is what the
   earlier blocks are worth to that model, an estimate at this scale of how much any state could give; the
   state-shuffle cost is what PSF's states do give.
3. **Decoding** (:func:`decoding_sources`): documents written from (a) the clean encoder states (and posterior-
   mean codes) of validation documents, (b) prior samples, (c) the prior's mean trajectory. If (a) is good and
   (b) is not, the prior is at fault; if (b) matches (c), the decoder ignores what the prior gives it. On the
   planted corpus every sample is judged exactly (:mod:`forethought.data.planted`): NLL per token under the true
   generator, topic persistence, block coherence, and for (a) how often a block's most likely topic is that of
   the source document's same block (beside the same rate against another document, the chance level). On a
   text corpus there is no judge here, and the decoder's own cross-entropy of its samples says nothing, so the
   measures are those of the ids alone: distinct-2 / distinct-3 (distinct n-grams / n-grams, per sample) and
   unigram entropy, with the mean entropy of the decoder's predictive distribution (temperature 1, no nucleus)
   at every written token. These are computed on the planted corpus too.

Every measure uses the first ``eval_sequences`` validation windows and seeded generators. The result is
``<run>/diagnose.json`` (written once, atomically, after everything is measured) and a short table on stdout.
The functions take a model and windows and return numbers; only :func:`diagnose` reads and writes files.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from forethought.core.config import field
from forethought.core.errors import ForethoughtError
from forethought.core.io import atomic_write_json
from forethought.core.runtime import pick_device
from forethought.data.corpora import eval_windows
from forethought.data.planted import (
    PLANTED,
    PlantedGenerator,
    block_coherence,
    build_generator,
    persistence,
    token_nll,
    topic_posteriors,
)
from forethought.eval.diversity import distinct_ngrams
from forethought.eval.judge import unigram_entropy
from forethought.eval.stats import paired_bootstrap
from forethought.psf.ar import ar_token_nll
from forethought.psf.generate import load_recipe, load_stage_model, sample_states, stage_kind
from forethought.psf.model import PSFModel, generate_blocks
from forethought.psf.prior import FlowPrior
from forethought.psf.sampling import device_generator

GROUPS = ("first", "rest", "all")  # the first token of every block, the other tokens, every token


@dataclass
class DiagnoseConfig:
    recipe_run: str = field("", "the finished 'psf recipe' run folder to diagnose (required)")
    stage: str = field("", "PSF model stage ('' = the final one): shuffle cost, ceiling blocks, decoding")
    all_stages: bool = field(False, "also measure the state-shuffle cost of every other model stage of the run")
    eval_sequences: int = field(256, "the first N validation windows are measured")
    permutations: int = field(4, "derangements of the documents averaged in the state-shuffle cost")
    ceiling_cut: Literal["restart", "mask"] = field(
        "restart", "how the AR model's context is cut at block boundaries: restart = every block its own "
        "sequence [bos, ...] at positions 0..n-1; mask = true positions, bos at each block start, block-diagonal "
        "attention")
    samples: int = field(64, "documents decoded from each source (at most the validation windows measured)")
    temperature: float = field(1.0, "decoder temperature of the decoding comparison (0 = greedy)")
    top_p: float = field(1.0, "decoder nucleus, in (0, 1]")
    prior_steps: int = field(0, "Euler steps (0 = the prior's configured steps)")
    n_boot: int = field(2000, "bootstrap resamples (documents) of the 95% intervals")
    batch_size: int = field(32, "documents per forward pass")
    seed: int = field(0, "seed of the permutations, the bootstrap and the samples")
    device: str = field("auto", "auto | cpu | cuda | mps")

    def validate(self) -> None:
        if not self.recipe_run:
            raise ForethoughtError("psf diagnose needs --recipe_run <folder of a finished 'psf recipe' run>")
        if self.eval_sequences < 2:
            raise ForethoughtError(f"eval_sequences must be at least 2 (states are swapped across documents), got "
                                   f"{self.eval_sequences}")
        for key in ("permutations", "samples", "n_boot", "batch_size"):
            if getattr(self, key) < 1:
                raise ForethoughtError(f"{key} must be at least 1, got {getattr(self, key)}")
        if self.prior_steps < 0:
            raise ForethoughtError(f"prior_steps must not be negative, got {self.prior_steps}")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ForethoughtError(f"temperature must be a number >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ForethoughtError(f"top_p must be in (0, 1], got {self.top_p}")


# ---- helpers -------------------------------------------------------------------------------------------------

def derangements(n: int, count: int, generator: torch.Generator) -> list[torch.Tensor]:
    """``count`` uniformly drawn permutations of n >= 2 items without a fixed point (rejection sampling:
    about e draws each)."""
    if n < 2:
        raise ForethoughtError(f"swapping states across documents needs at least 2 documents, got {n}")
    out = []
    while len(out) < count:
        p = torch.randperm(n, generator=generator)
        if not torch.any(p == torch.arange(n)):
            out.append(p)
    return out


def group_means(nll: torch.Tensor | np.ndarray, block_len: int) -> dict[str, np.ndarray]:
    """(N, L) per-token values -> per document (N,) float64 means over the first token of every block, the
    other tokens, and all tokens. Every document has as many tokens in each group, so the mean over documents
    is the mean over tokens."""
    x = torch.as_tensor(nll).double().reshape(len(nll), -1, block_len)  # (N, K, n)
    out = {"first": x[:, :, 0].mean(1), "all": x.mean((1, 2))}
    out["rest"] = x[:, :, 1:].mean((1, 2)) if block_len > 1 else torch.full_like(out["all"], math.nan)
    return {g: out[g].cpu().numpy() for g in GROUPS}


def mean_of(values: np.ndarray, targets: np.ndarray | None = None) -> np.ndarray:
    """The bootstrap's metric: the mean along the last axis."""
    del targets
    return np.mean(values, axis=-1)


def compare(base: torch.Tensor, other: torch.Tensor, block_len: int, names: tuple[str, str], n_boot: int,
            seed: int) -> dict[str, Any]:
    """Per group: the mean nats/token of ``base`` and ``other`` ((N, L) per-token NLL of the same documents),
    named ``names`` (base's, other's), their difference other - base and its paired bootstrap 95% interval over
    documents; and the difference per block index."""
    a, b = group_means(base, block_len), group_means(other, block_len)
    out: dict[str, Any] = {}
    for g in GROUPS:
        if np.isnan(a[g]).any():
            out[g] = None  # one-token blocks have no "rest"
            continue
        boot = paired_bootstrap(mean_of, b[g], a[g], n_boot=n_boot, seed=seed)
        out[g] = {names[0]: boot["metric_b"], names[1]: boot["metric_a"], "diff": boot["observed"],
                  "interval": list(boot["interval"])}
    per_block = (torch.as_tensor(other).double() - torch.as_tensor(base).double()).reshape(len(base), -1, block_len)
    out["diff_per_block"] = per_block.mean((0, 2)).tolist()
    return out


def mean_se(x: np.ndarray) -> dict[str, float | None]:
    """Mean and its standard error (None for one value)."""
    x = np.asarray(x, dtype=np.float64)
    se = float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else None
    return {"mean": float(x.mean()), "se": se}


# ---- 1. state-shuffle cost -----------------------------------------------------------------------------------

@torch.no_grad()
def encoder_conditioning(model: PSFModel, windows: torch.Tensor, batch: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The decoder's inputs from real text, in evaluation mode: states (N, K, S) and, when the stage uses
    codes, each block's posterior-mean code (N, K, code_dim)."""
    model.eval()
    dev = next(model.parameters()).device
    states, codes = [], []
    for i in range(0, len(windows), batch):
        h, feats = model.encode(windows[i:i + batch].to(dev))
        states.append(model.states_from(h))
        if model.use_codes:
            codes.append(model.posterior(feats)[0])
    return torch.cat(states), torch.cat(codes) if codes else None


@torch.no_grad()
def decoder_nll(model: PSFModel, windows: torch.Tensor, states: torch.Tensor, codes: torch.Tensor | None,
                batch: int) -> torch.Tensor:
    """Teacher-forced cross-entropy (N, L) of every token of ``windows`` given the states (and codes) given."""
    model.eval()
    dev = next(model.parameters()).device
    out = []
    for i in range(0, len(windows), batch):
        w = windows[i:i + batch].to(dev)
        logits = model.decode_logits(w, states[i:i + batch], None if codes is None else codes[i:i + batch])
        out.append(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), w.reshape(-1),
                                                     reduction="none").view(len(w), -1).cpu())
    return torch.cat(out)


def state_shuffle_cost(model: PSFModel, windows: torch.Tensor, perms: list[torch.Tensor], batch: int = 32,
                       n_boot: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Cross-entropy with each document's own states vs with the states of the documents that ``perms`` (each a
    permutation of the N windows) name, averaged over the permutations; per group (first token of each block,
    the rest, all) with a paired bootstrap interval over documents. Code modes (with codes): ``posterior_mean``
    (each document keeps its own codes), ``zeroed`` (no codes either way), ``shuffled_with_states``."""
    states, codes = encoder_conditioning(model, windows, batch)
    if codes is None:
        modes: dict[str, tuple] = {"none": (None, lambda p: None)}
    else:
        zero = torch.zeros_like(codes)
        modes = {"posterior_mean": (codes, lambda p: codes), "zeroed": (zero, lambda p: zero),
                 "shuffled_with_states": (codes, lambda p: codes[p.to(codes.device)])}
    out: dict[str, Any] = {"blocks": model.blocks, "block_len": model.block_len, "documents": len(windows),
                           "permutations": len(perms), "modes": {}}
    for mode, (own, swapped) in modes.items():
        true = decoder_nll(model, windows, states, own, batch)
        shuffled = torch.stack([decoder_nll(model, windows, states[p.to(states.device)], swapped(p), batch)
                                for p in perms]).mean(0)
        out["modes"][mode] = compare(true, shuffled, model.block_len, ("true", "shuffled"), n_boot, seed)
    return out


# ---- 2. the ceiling ------------------------------------------------------------------------------------------

@torch.no_grad()
def context_ceiling(ar: torch.nn.Module, windows: torch.Tensor, bos_id: int, block_len: int,
                    cut: Literal["restart", "mask"] = "restart", batch: int = 32, n_boot: int = 2000,
                    seed: int = 0) -> dict[str, Any]:
    """The AR model's cross-entropy with full context and with its context cut at every ``block_len``
    boundary, per group, with the difference cut - full and its paired bootstrap interval over documents."""
    ar.eval()
    dev = next(ar.parameters()).device
    full, cut_nll = [], []
    for i in range(0, len(windows), batch):
        w = windows[i:i + batch].to(dev)
        full.append(ar_token_nll(ar, w, bos_id).cpu())
        cut_nll.append(ar_token_nll(ar, w, bos_id, cut_every=block_len, cut=cut).cpu())
    res = compare(torch.cat(full), torch.cat(cut_nll), block_len, ("full", "cut"), n_boot, seed)
    return {"available": True, "cut": cut, "block_len": block_len, "documents": len(windows), **res}


# ---- 3. decoding from clean states, prior samples, the mean trajectory -----------------------------------------

@torch.no_grad()
def decode(model: PSFModel, states: torch.Tensor, codes: torch.Tensor | None, *, temperature: float, top_p: float,
           generator: torch.Generator, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """Write documents from given states (and codes): (N, L) ids and, per document, the mean entropy (nats) of
    the decoder's predictive distribution (temperature 1, no nucleus) at each written token. The teacher-forced
    logits of the written ids are the sampler's own (tested in test_psf)."""
    model.eval()
    ids, ent = [], []
    for i in range(0, len(states), batch):
        s, c = states[i:i + batch], None if codes is None else codes[i:i + batch]
        x = generate_blocks(model, s, c, temperature=temperature, top_p=top_p, generator=generator)
        logp = torch.log_softmax(model.decode_logits(x, s, c).double(), -1)  # (B, K, n, V)
        ent.append((-(logp.exp() * logp).sum(-1)).reshape(len(x), -1).mean(1).cpu())
        ids.append(x.cpu())
    return torch.cat(ids).numpy(), torch.cat(ent).numpy()


def sample_measures(ids: np.ndarray, entropy: np.ndarray | None, gen: PlantedGenerator | None) -> dict[str, Any]:
    """What is computed for a set of (N, L) documents: distinct-2/3 and unigram entropy (any corpus), the
    decoder's entropy (when given), and on the planted corpus the exact NLL per token, persistence, coherence."""
    out: dict[str, Any] = {"n": len(ids), "distinct_2": mean_se(distinct_ngrams(ids, 2)),
                           "distinct_3": mean_se(distinct_ngrams(ids, 3)),
                           "unigram_entropy": mean_se(np.array([unigram_entropy(r) for r in ids]))}
    if entropy is not None:
        out["decoder_entropy"] = mean_se(entropy)
    if gen is not None:
        out["true_nll"] = mean_se(token_nll(gen, ids))
        out["persistence"] = mean_se(persistence(gen, ids))
        out["block_coherence"] = mean_se(block_coherence(gen, ids))
    return out


def topic_agreement(gen: PlantedGenerator, samples: np.ndarray, sources: np.ndarray,
                    perm: torch.Tensor | None) -> dict[str, float | None]:
    """Fraction of planted blocks whose most likely topic (the true posterior's argmax) in a sample equals that
    of the same block of its source document, and the same rate against another document (``perm``, a
    derangement of the sources; None for one document): the chance level."""
    zs = topic_posteriors(gen, samples).topics.argmax(-1)  # (N, K)
    zd = topic_posteriors(gen, sources).topics.argmax(-1)
    other = None if perm is None else float(np.mean(zs == zd[perm.numpy()]))
    return {"same_source": float(np.mean(zs == zd)), "other_source": other}


def decoding_sources(model: PSFModel, prior: FlowPrior | None, windows: torch.Tensor, n: int, *,
                     temperature: float, top_p: float, prior_steps: int, seed: int, batch: int,
                     gen: PlantedGenerator | None) -> dict[str, Any]:
    """Documents decoded from the clean states of the first ``n`` windows, from ``n`` prior samples and from the
    mean trajectory, each measured (:func:`sample_measures`); ``data``: the same measures of the source windows."""
    dev = next(model.parameters()).device
    src = windows[:n]
    out: dict[str, Any] = {"temperature": temperature, "top_p": top_p,
                           "data": sample_measures(src.numpy(), None, gen)}
    kw = {"temperature": temperature, "top_p": top_p, "batch": batch}
    states, codes = encoder_conditioning(model, src, batch)
    ids, ent = decode(model, states, codes, generator=device_generator(seed, dev), **kw)
    out["clean"] = sample_measures(ids, ent, gen)
    if gen is not None:
        perm = derangements(len(src), 1, torch.Generator().manual_seed(seed))[0] if len(src) > 1 else None
        out["clean"]["topic_agreement"] = topic_agreement(gen, ids, src.numpy(), perm)
    for i, trajectory in enumerate(("prior", "mean"), start=1):
        if prior is None:
            out[trajectory] = {"available": False, "reason": "no prior was trained on this stage's states"}
            continue
        g = device_generator(seed + i, dev)
        parts = [sample_states(model, prior, min(batch, n - j), steps=prior_steps or None, generator=g,
                               trajectory=trajectory)[:2] for j in range(0, n, batch)]
        states = torch.cat([p[0] for p in parts])
        codes = None if parts[0][1] is None else torch.cat([p[1] for p in parts])
        ids, ent = decode(model, states, codes, generator=g, **kw)
        out[trajectory] = {"available": True, **sample_measures(ids, ent, gen)}
    return out


# ---- the command ---------------------------------------------------------------------------------------------

def diagnose(cfg: DiagnoseConfig, resume: str | None = None) -> dict:
    """``forethought psf diagnose``: writes ``<recipe_run>/diagnose.json`` and prints a table."""
    del resume  # nothing here is trained
    cfg.validate()  # also when the config was built in Python rather than loaded
    device = pick_device(cfg.device, "--device")
    run_dir = Path(cfg.recipe_run)
    art = load_recipe(run_dir, cfg.stage, device)
    L = art.cfg.model.seq_len
    windows = eval_windows(art.valid_tokens, cfg.eval_sequences, L)
    if len(windows) < 2:
        raise ForethoughtError(f"the valid split of {run_dir} holds {len(windows)} window(s) of {L} tokens; "
                               "swapping states across documents needs at least 2")
    planted = art.cfg.data.corpus == PLANTED
    gen = build_generator(art.cfg.data.planted) if planted else None
    t0 = time.perf_counter()
    perms = derangements(len(windows), cfg.permutations, torch.Generator().manual_seed(cfg.seed))
    stages = [art.stage]
    if cfg.all_stages:
        stages += [s for s in art.results["stages"] if stage_kind(s) == "model" and s != art.stage]
    shuffle = {}
    for name in stages:
        model = art.model if name == art.stage else load_stage_model(run_dir, art.cfg, art.results, name).to(device)
        shuffle[name] = state_shuffle_cost(model, windows, perms, cfg.batch_size, cfg.n_boot, cfg.seed)
    if art.ar is None:
        ceiling: dict[str, Any] = {"available": False,
                                   "reason": "the run has no AR baseline (train it with baselines: [ar])"}
    else:
        ceiling = context_ceiling(art.ar, windows, art.bos_id, art.model.block_len, cfg.ceiling_cut,
                                  cfg.batch_size, cfg.n_boot, cfg.seed)
    decoding = decoding_sources(art.model, art.prior, windows, min(cfg.samples, len(windows)),
                                temperature=cfg.temperature, top_p=cfg.top_p, prior_steps=cfg.prior_steps,
                                seed=cfg.seed, batch=cfg.batch_size, gen=gen)
    res = {"run": str(run_dir), "stage": art.stage, "corpus": art.cfg.data.corpus, "seq_len": L,
           "eval_sequences": len(windows), "shuffle": shuffle, "ceiling": ceiling, "decoding": decoding,
           "wall_s": time.perf_counter() - t0, "settings": asdict(cfg)}
    if planted:
        res["true_val_nll"] = float(token_nll(gen, windows.numpy()).mean())
    atomic_write_json(run_dir / "diagnose.json", res)
    print(report_table(res))
    return res


def report_table(res: dict) -> str:
    """A short plain-text summary of a diagnose.json."""
    def cell(c: dict | None, key: str = "diff") -> str:
        if c is None:
            return "-"
        lo, hi = c["interval"]
        return f"{c[key]:+.3f} [{lo:+.3f}, {hi:+.3f}]"

    lines = [f"psf diagnose {res['run']}: stage {res['stage']}, {res['corpus']}, {res['eval_sequences']} "
             "validation windows", "",
             "state-shuffle cost, nats/token (states of other documents - own), 95% interval over documents:",
             f"{'stage':<14} {'codes':<21} {'first token':<26} {'rest':<26} {'all':<26}"]
    for stage, r in res["shuffle"].items():
        for mode, m in r["modes"].items():
            lines.append(f"{stage:<14} {mode:<21} " + " ".join(f"{cell(m[g]):<26}" for g in GROUPS))
    c = res["ceiling"]
    lines += ["", "ceiling: AR cross-entropy, context cut at every block boundary - full context:"]
    if c["available"]:
        lines.append(f"{'cut ' + c['cut']:<36} " + " ".join(f"{cell(c[g]):<26}" for g in GROUPS))
        lines.append(f"{'full context (nats/token)':<36} " + " ".join(
            f"{'-' if c[g] is None else format(c[g]['full'], '.3f'):<26}" for g in GROUPS))
    else:
        lines.append(f"absent: {c['reason']}")
    d = res["decoding"]
    keys = [("true_nll", "true NLL"), ("persistence", "persist."), ("block_coherence", "coherence"),
            ("distinct_2", "dist-2"), ("distinct_3", "dist-3"), ("unigram_entropy", "unigram H"),
            ("decoder_entropy", "decoder H")]
    keys = [(k, h) for k, h in keys if k in d["data"] or k == "decoder_entropy"]
    agreement = "  topic agreement" if "topic_agreement" in d["clean"] else ""
    lines += ["", f"decoding (temperature {d['temperature']}, top-p {d['top_p']}), means:",
              f"{'source':<8} {'n':>4} " + " ".join(f"{h:>10}" for _, h in keys) + agreement]
    for src in ("data", "clean", "prior", "mean"):
        r = d[src]
        if r.get("available") is False:
            lines.append(f"{src:<8} absent: {r['reason']}")
            continue
        vals = " ".join(f"{r[k]['mean']:>10.3f}" if k in r else f"{'-':>10}" for k, _ in keys)
        agree = r.get("topic_agreement")
        tail = ""
        if agree:
            other = agree["other_source"]
            tail = f"  {agree['same_source']:.3f}" + ("" if other is None else f" (other document {other:.3f})")
        lines.append(f"{src:<8} {r['n']:>4} {vals}{tail}")
    if "true_val_nll" in res:
        lines.append(f"\nthe true generator's NLL of the measured validation windows: {res['true_val_nll']:.3f}")
    return "\n".join(lines)
