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
   (b) is not, the prior is at fault; if (b) matches (c), the decoder ignores what the prior gives it; with a
   state-only prior (recipe ``prior.state_only_variant``) also (d) ``prior_state_only``: its states, zero codes.
   On the planted corpus every sample is judged exactly (:mod:`forethought.data.planted`): NLL per token under
   the true generator, topic persistence, block coherence, and for (a) how often a block's most likely topic is that of
   the source document's same block (beside the same rate against another document, the chance level). On a
   text corpus there is no judge here, and the decoder's own cross-entropy of its samples says nothing, so the
   measures are those of the ids alone: distinct-2 / distinct-3 (distinct n-grams / n-grams, per sample) and
   unigram entropy, with the mean entropy of the decoder's predictive distribution (temperature 1, no nucleus)
   at every written token. These are computed on the planted corpus too. With codes, (a) is also decoded with
   zero codes (``clean_zero_codes``): the topic agreement the codes add.
4. **The codes** (:func:`code_diagnostics`, stages with codes): what zeroing the codes costs the teacher-forced
   decoder (nats/token, per group, block and position), the KL split into a part that carries no information
   (the mean code) and the rest, active units, and on the planted corpus held-out topic probes that estimate
   I(code; block topic) and I(code; block topic | state) from the posterior means (measure information, not
   raw KL: a KL that free bits do not charge can be drift).

Every measure uses the first ``eval_sequences`` validation windows and seeded generators. The result is
``<run>/diagnose.json`` (written once, atomically, after everything is measured) and a short table on stdout.
The functions take a model and windows and return numbers; only :func:`diagnose` reads and writes files.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from forethought.core.errors import ForethoughtError
from forethought.core.io import atomic_write_json
from forethought.core.runtime import mix_seed, pick_device
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
from forethought.psf.build import stage_kind
from forethought.psf.config import DiagnoseConfig
from forethought.psf.generate import load_recipe, load_stage_model, sample_states
from forethought.psf.model import PSFModel, generate_blocks
from forethought.psf.prior import FlowPrior
from forethought.psf.sampling import device_generator

GROUPS = ("first", "rest", "all")  # the first token of every block, the other tokens, every token


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
def encoder_conditioning(model: PSFModel, windows: torch.Tensor, batch: int
                         ) -> tuple[torch.Tensor, torch.Tensor | None]:
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
                     gen: PlantedGenerator | None, state_only_prior: FlowPrior | None = None) -> dict[str, Any]:
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
    perm = derangements(len(src), 1, torch.Generator().manual_seed(seed))[0] if len(src) > 1 else None
    if gen is not None:
        out["clean"]["topic_agreement"] = topic_agreement(gen, ids, src.numpy(), perm)
    if codes is not None:  # the same states with zero codes: what the codes add to the clean decode
        ids, ent = decode(model, states, torch.zeros_like(codes), generator=device_generator(seed, dev), **kw)
        out["clean_zero_codes"] = sample_measures(ids, ent, gen)
        if gen is not None:
            out["clean_zero_codes"]["topic_agreement"] = topic_agreement(gen, ids, src.numpy(), perm)
    sources = [("prior", prior, "prior"), ("mean", prior, "mean")]
    if state_only_prior is not None:  # the paper's state-only variant: the same decoder, zero codes
        sources.append(("prior_state_only", state_only_prior, "prior"))
    for name, p, trajectory in sources:
        if p is None:
            out[name] = {"available": False, "reason": "no prior was trained on this stage's states"}
            continue
        g = device_generator(mix_seed("psf-diagnose-states", seed, name), dev)
        parts = [sample_states(model, p, min(batch, n - j), steps=prior_steps or None, generator=g,
                               trajectory=trajectory)[:2] for j in range(0, n, batch)]
        states = torch.cat([q[0] for q in parts])
        codes = None if parts[0][1] is None else torch.cat([q[1] for q in parts])
        ids, ent = decode(model, states, codes, generator=g, **kw)
        out[name] = {"available": True, **sample_measures(ids, ent, gen)}
    return out


# ---- 4. the codes: what they carry (issue 31) ---------------------------------------------------------------

@torch.no_grad()
def code_posteriors(model: PSFModel, windows: torch.Tensor, batch: int
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """States (N, K, S), posterior means and log-variances (N, K, D) of real windows, in evaluation mode."""
    model.eval()
    dev = next(model.parameters()).device
    states, mus, logvars = [], [], []
    for i in range(0, len(windows), batch):
        h, feats = model.encode(windows[i:i + batch].to(dev))
        mu, logvar = model.posterior(feats)
        states.append(model.states_from(h).cpu())
        mus.append(mu.cpu())
        logvars.append(logvar.cpu())
    return torch.cat(states), torch.cat(mus), torch.cat(logvars)


def code_usage(mu: torch.Tensor, logvar: torch.Tensor, block_len: int, threshold: float = 0.01) -> dict[str, Any]:
    """How much of the codes' KL could carry information. (N, K, D) posterior means and log-variances ->
    per dimension (pooled over blocks): the KL to N(0, I) (nats per block) split exactly into
    ``mean_shift`` = |E_N[mu_k]|^2 / 2 (the same for every document: no information), ``spread`` = Var_N[mu_k] / 2
    (what varies across documents: the only part through which a mean can say anything) and ``sigma`` =
    E[sigma^2 - 1 - log sigma^2] / 2; and the active units (Burda et al. 2016): dimensions whose posterior mean
    varies across documents by more than ``threshold`` (variance), the statistics taken per block index."""
    mu, logvar = mu.double(), logvar.double()
    var_k = mu.var(0, unbiased=False)  # (K, D) across documents, per block index
    mean_k = mu.mean(0)  # (K, D)
    shift = 0.5 * mean_k.pow(2).mean(0)  # (D,) averaged over blocks
    spread = 0.5 * var_k.mean(0)
    sigma = 0.5 * (logvar.exp() - 1.0 - logvar).mean((0, 1))
    kl = shift + spread + sigma  # (D,) = the mean KL per block and dimension
    active = var_k.mean(0) > threshold
    per_token = float(kl.sum()) / block_len
    return {"kl_per_token": per_token, "kl_per_block": float(kl.sum()),
            "kl_parts_per_token": {"mean_shift": float(shift.sum()) / block_len,
                                   "spread": float(spread.sum()) / block_len,
                                   "sigma": float(sigma.sum()) / block_len},
            "active_units": int(active.sum()), "dims": int(mu.shape[-1]), "active_threshold": threshold,
            "per_dim": {"kl": kl.tolist(), "mean_shift": shift.tolist(), "spread": spread.tolist(),
                        "sigma": sigma.tolist(), "mean_variance": var_k.mean(0).tolist()}}


PROBE_L2 = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)  # the probe's L2 penalties, one chosen by cross-validation


def fit_probe(a: torch.Tensor, target: torch.Tensor, weight_decay: float, iters: int = 200
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Multinomial logistic regression on (n, F) standardised float64 features and (n, M) soft labels (L-BFGS,
    an L2 penalty on the weights): weights (F, M) and biases (M,)."""
    M = target.shape[1]
    w = torch.zeros(a.shape[1], M, dtype=torch.float64, requires_grad=True)
    c = torch.zeros(M, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w, c], max_iter=iters, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = -(target * torch.log_softmax(a @ w + c, -1)).sum(-1).mean() + weight_decay * w.pow(2).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    return w.detach(), c.detach()


def probe_ce(x_train: torch.Tensor, p_train: torch.Tensor, x_test: torch.Tensor, p_test: torch.Tensor
             ) -> tuple[float, float]:
    """A held-out probe: features standardised with the training rows' statistics, the L2 penalty chosen from
    ``PROBE_L2`` by two-fold cross-validation on the training rows (the rows are in document order, so the folds
    split documents), refitted on all of them; returns the held-out cross-entropy (nats, against the soft
    labels) and accuracy (argmax against argmax). Cross-validating the penalty keeps a probe on noise near zero
    information rather than below it (an overfitted probe scores worse than the index alone)."""
    mean, sd = x_train.mean(0), x_train.std(0, unbiased=False).clamp_min(1e-8)
    a, b = ((x_train - mean) / sd).double(), ((x_test - mean) / sd).double()
    pa, pb = p_train.double(), p_test.double()

    def ce(w: torch.Tensor, c: torch.Tensor, x: torch.Tensor, p: torch.Tensor) -> float:
        return float(-(p * torch.log_softmax(x @ w + c, -1)).sum(-1).mean())

    h = len(a) // 2
    folds = [(slice(0, h), slice(h, None)), (slice(h, None), slice(0, h))]
    cv = {lam: sum(ce(*fit_probe(a[f], pa[f], lam), a[v], pa[v]) for f, v in folds) for lam in PROBE_L2}
    w, c = fit_probe(a, pa, min(cv, key=cv.get))
    logq = torch.log_softmax(b @ w + c, -1)
    return ce(w, c, b, pb), float((logq.argmax(-1) == pb.argmax(-1)).double().mean())


def topic_information(states: torch.Tensor, mu: torch.Tensor, topics: np.ndarray,
                      sampled: torch.Tensor | None = None) -> dict[str, Any]:
    """Held-out topic probes on the planted corpus: how much each block's code tells about the block's topic,
    beyond what its predictive state already does. ``topics`` (N, K, M): the exact posterior of every block's
    topic given its document (the soft labels). The first half of the documents fits each probe, the second half
    scores it. Every probe sees the block index (one-hot); with cross-entropies CE (nats) of the probes on the
    index alone, + the state, + the code, + both, the estimates are ``I(code; topic) ~ CE(index) - CE(code)`` and
    ``I(code; topic | state) ~ CE(state) - CE(state + code)``, each a held-out (variational) lower bound up to
    the probe's fit. ``label_entropy``: the soft labels' own mean entropy, the lowest CE any probe can reach.

    Two codes are probed: ``sampled`` (N, K, D), a draw of the posterior (what passes the noisy channel to the
    decoder; the headline ``information_code*``), and the posterior mean ``mu`` (``*_mean``: what the encoder
    writes before the noise). The mean alone overstates: the probe standardises its features, so a mean of
    1e-3 whose variation is buried under unit noise still names the topic (seen on a run with KL 0.000)."""
    N, K, _ = mu.shape
    half = N // 2
    index = torch.eye(K, dtype=torch.float64).expand(N, K, K)
    p = torch.as_tensor(topics, dtype=torch.float64)  # (N, K, M)
    s = states.double()
    feats = {"index": index, "state": torch.cat([index, s], -1),
             "code_mean": torch.cat([index, mu.double()], -1),
             "state_code_mean": torch.cat([index, s, mu.double()], -1)}
    if sampled is not None:
        feats.update(code=torch.cat([index, sampled.double()], -1),
                     state_code=torch.cat([index, s, sampled.double()], -1))
    ce, acc = {}, {}
    for name, x in feats.items():
        ce[name], acc[name] = probe_ce(x[:half].reshape(half * K, -1), p[:half].reshape(half * K, -1),
                                       x[half:].reshape((N - half) * K, -1), p[half:].reshape((N - half) * K, -1))
    label_h = float(-(p[half:] * torch.log(p[half:].clamp_min(1e-300))).sum(-1).mean())
    out = {"train_documents": half, "test_documents": N - half,
           "probe": "multinomial logistic regression, L2 by 2-fold cross-validation",
           "ce": ce, "accuracy": acc, "label_entropy": label_h, "information_state": ce["index"] - ce["state"],
           "information_code_mean": ce["index"] - ce["code_mean"],
           "information_code_mean_given_state": ce["state"] - ce["state_code_mean"]}
    if sampled is not None:
        out.update(information_code=ce["index"] - ce["code"],
                   information_code_given_state=ce["state"] - ce["state_code"])
    return out


def code_diagnostics(model: PSFModel, windows: torch.Tensor, batch: int, n_boot: int, seed: int,
                     gen: PlantedGenerator | None) -> dict[str, Any]:
    """What the codes of a codes stage carry: the cost of zeroing them (teacher-forced nats/token, posterior-mean
    codes -> zero codes, with the clean states; per group, per block and per position within a block, paired
    bootstrap over documents), the KL and its parts and active units (:func:`code_usage`), and on the planted
    corpus, when the model's blocks are the corpus's blocks, the topic probes (:func:`topic_information`)."""
    if not model.use_codes:
        return {"available": False, "reason": "this stage uses no codes"}
    states, mu, logvar = code_posteriors(model, windows, batch)
    dev = next(model.parameters()).device
    kept = decoder_nll(model, windows, states.to(dev), mu.to(dev), batch)
    zeroed = decoder_nll(model, windows, states.to(dev), torch.zeros_like(mu).to(dev), batch)
    n = model.block_len
    cost = compare(kept, zeroed, n, ("posterior_mean", "zeroed"), n_boot, seed)
    cost["diff_per_position"] = (zeroed - kept).double().reshape(len(windows), -1, n).mean((0, 1)).tolist()
    out: dict[str, Any] = {"available": True, "zeroing_cost": cost, "usage": code_usage(mu, logvar, n)}
    if gen is None:
        out["topics"] = {"available": False, "reason": "not the planted corpus (no topics to probe)"}
    elif model.blocks != gen.blocks or len(windows) < 4:
        out["topics"] = {"available": False, "reason": f"the model's {model.blocks} blocks are not the corpus's "
                         f"{gen.blocks} topic blocks" if model.blocks != gen.blocks else "fewer than 4 documents"}
    else:
        eps = torch.randn(mu.shape, generator=torch.Generator().manual_seed(seed), dtype=mu.dtype)
        sampled = mu + (0.5 * logvar).exp() * eps  # one posterior draw per block: what the decoder is sent
        out["topics"] = {"available": True,
                         **topic_information(states, mu, topic_posteriors(gen, windows.numpy()).topics, sampled)}
    return out


# ---- the command ---------------------------------------------------------------------------------------------

def first_token_ce(shuffle: dict[str, Any], vocab: int) -> dict[str, float | None]:
    """A block's first token, where a code can tell the most, from a stage's :func:`state_shuffle_cost` (clean
    states, teacher forced, nats): its cross-entropy ``with_codes`` (posterior means; None for a stage without
    codes) and ``without_codes`` (zero codes, or a stage that has none: the input of the state-only
    configuration, comparable across runs with and without codes), beside a ``uniform`` guess, log V."""
    modes = shuffle["modes"]
    with_codes = modes["posterior_mean"]["first"]["true"] if "posterior_mean" in modes else None
    without = (modes["zeroed"] if "zeroed" in modes else modes["none"])["first"]["true"]
    return {"with_codes": with_codes, "without_codes": without, "uniform": math.log(vocab)}


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
        model = art.model if name == art.stage else load_stage_model(run_dir, art.results, name).to(device)
        shuffle[name] = state_shuffle_cost(model, windows, perms, cfg.batch_size, cfg.n_boot, cfg.seed)
    if art.ar is None:
        ceiling: dict[str, Any] = {"available": False,
                                   "reason": "the run has no AR baseline (train it with baselines: [ar])"}
    else:
        ceiling = context_ceiling(art.ar, windows, art.bos_id, art.model.block_len, cfg.ceiling_cut,
                                  cfg.batch_size, cfg.n_boot, cfg.seed)
    decoding = decoding_sources(art.model, art.prior, windows, min(cfg.samples, len(windows)),
                                temperature=cfg.temperature, top_p=cfg.top_p, prior_steps=cfg.prior_steps,
                                seed=cfg.seed, batch=cfg.batch_size, gen=gen, state_only_prior=art.state_only_prior)
    codes = code_diagnostics(art.model, windows, cfg.batch_size, cfg.n_boot, cfg.seed, gen)
    res = {"run": str(run_dir), "stage": art.stage, "corpus": art.cfg.data.corpus, "seq_len": L,
           "eval_sequences": len(windows), "shuffle": shuffle, "ceiling": ceiling, "decoding": decoding,
           "codes": codes, "first_token_ce": first_token_ce(shuffle[art.stage], art.model.config.vocab_size),
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
    f = res["first_token_ce"]
    lines.append(f"a block's first token, clean states, nats: {f['without_codes']:.3f} without codes"
                 + ("" if f["with_codes"] is None
                    else f" (zero codes), {f['with_codes']:.3f} with posterior-mean codes")
                 + f"; a uniform guess {f['uniform']:.3f}")
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
              f"{'source':<16} {'n':>4} " + " ".join(f"{h:>10}" for _, h in keys) + agreement]
    for src in ("data", "clean", "clean_zero_codes", "prior", "mean", "prior_state_only"):
        if src not in d:
            continue
        r = d[src]
        if r.get("available") is False:
            lines.append(f"{src:<16} absent: {r['reason']}")
            continue
        vals = " ".join(f"{r[k]['mean']:>10.3f}" if k in r else f"{'-':>10}" for k, _ in keys)
        agree = r.get("topic_agreement")
        tail = ""
        if agree:
            other = agree["other_source"]
            tail = f"  {agree['same_source']:.3f}" + ("" if other is None else f" (other document {other:.3f})")
        lines.append(f"{src:<16} {r['n']:>4} {vals}{tail}")
    c = res.get("codes", {"available": False, "reason": "not measured"})
    lines += ["", "codes:"]
    if not c["available"]:
        lines.append(f"absent: {c['reason']}")
    else:
        z, u = c["zeroing_cost"], c["usage"]
        lines.append("zeroing cost, nats/token (zero codes - posterior mean): " +
                     ", ".join(f"{g} {cell(z[g])}" for g in GROUPS if z[g] is not None))
        lines.append("  per position in a block: " + " ".join(f"{x:+.3f}" for x in z["diff_per_position"]))
        parts = u["kl_parts_per_token"]
        lines.append(f"KL {u['kl_per_token']:.3f} nats/token = mean shift {parts['mean_shift']:.3f} (no information)"
                     f" + spread of the means {parts['spread']:.3f} + sigma {parts['sigma']:.3f}; active units "
                     f"{u['active_units']}/{u['dims']}")
        t = c["topics"]
        if t["available"]:
            lines.append(f"topic probes (held-out, nats): I(code; topic) ~ {t['information_code']:.3f}, "
                         f"I(code; topic | state) ~ {t['information_code_given_state']:.3f} (posterior draws; "
                         f"posterior means: {t['information_code_mean']:.3f}, "
                         f"{t['information_code_mean_given_state']:.3f}), I(state; topic) ~ "
                         f"{t['information_state']:.3f}")
            a = t["accuracy"]
            lines.append(f"  topic accuracy: index {a['index']:.3f}, state {a['state']:.3f}, code {a['code']:.3f}, "
                         f"state + code {a['state_code']:.3f}, code mean {a['code_mean']:.3f}")
        else:
            lines.append(f"topic probes absent: {t['reason']}")
    if "true_val_nll" in res:
        lines.append(f"\nthe true generator's NLL of the measured validation windows: {res['true_val_nll']:.3f}")
    return "\n".join(lines)
