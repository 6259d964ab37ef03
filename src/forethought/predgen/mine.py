"""``forethought predgen mine``: how much does a representation Z of a trained model know about the target Y?

MINE (Belghazi et al. 2018): a statistics network T(z, y) maximises the Donsker-Varadhan lower bound
``I(Y; Z) >= E_joint[T] - log E_marginal[e^T]``; the gradient of the log term uses a moving average of
``E[e^T]`` in its denominator (the paper's bias correction). With a few thousand examples and d >= 576 the
network overfits, so it is fitted on one half of the examples and the bound is evaluated on the other half;
H(Y) — an upper bound on I(Y; Z) for classes — is shown beside it. Representations of one checkpoint:

* ``pooled_last`` / ``pooled_mean``: the prompt's states pooled (what a Predictor head reads);
* ``tokens``: the states that predicted the m constrained-greedy answer tokens, concatenated (what PredGen's
  task adapter reads; zero-padded when answers differ in length).

Within one model the data-processing inequality says I(Y; Z) >= I(Y; pool(Z)); comparing different models is
an empirical question.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from forethought.core.config import field
from forethought.core.errors import ForethoughtError
from forethought.core.io import atomic_write_json
from forethought.core.plots import bar_plot
from forethought.predgen.decoding import constrained_greedy, prompt_pass
from forethought.predgen.methods import Encoder, batches
from forethought.predgen.metrics import mean_std
from forethought.predgen.model import check_layer
from forethought.predgen.saved import load_saved, saved_examples

REPRESENTATIONS = ("pooled_last", "pooled_mean", "tokens")


@dataclass
class MineConfig:
    model: str = field("", "a trained run folder (or its model/ folder)")
    split: str = field("eval", "examples to estimate on: eval | train, exactly as the model's run drew them (split "
                       "into fit / evaluation halves)")
    layer: int | None = field(None, "hidden-state layer whose states are Z (default: the layer the model reads; "
                              "0 = the embeddings, -1 = the last layer)")
    max_examples: int = field(1000, "at most this many examples (a seeded subset; 0 = all)")
    representations: list[str] = field(list(REPRESENTATIONS), "pooled_last, pooled_mean, tokens")
    seeds: list[int] = field([0, 1, 2], "one half/half split and statistics-network init per seed")
    steps: int = field(600, "statistics-network training steps")
    batch_size: int = field(128, "examples per MINE step")
    lr: float = field(1e-4, "Adam learning rate")
    hidden: int = field(256, "statistics-network width")
    ema: float = field(0.01, "moving-average rate of E[e^T] (bias-corrected gradient)")
    feature_batch_size: int = field(16, "examples per forward pass when extracting states")
    device: str = field("auto", "auto | cpu | cuda")
    out: str = field("", "results JSON ('' = <run>/mine.json; the plot goes beside it)")


# ----------------------------------------------------------------------------------------------------------
# The estimator (pure)
# ----------------------------------------------------------------------------------------------------------


def _encode_y(y: torch.Tensor, n_classes: int) -> torch.Tensor:
    if n_classes > 1:
        return torch.nn.functional.one_hot(y.long(), n_classes).float()
    return ((y - y.mean()) / y.std().clamp_min(1e-8)).float()[:, None]


def dv_bound(t_joint: torch.Tensor, t_marginal: torch.Tensor) -> torch.Tensor:
    """Donsker-Varadhan: mean(T_joint) - log mean(exp(T_marginal)), in nats."""
    return t_joint.mean() - (torch.logsumexp(t_marginal, 0) - math.log(t_marginal.numel()))


def mine_estimate(z_fit: torch.Tensor, y_fit: torch.Tensor, z_eval: torch.Tensor, y_eval: torch.Tensor,
                  n_classes: int, *, steps: int = 600, batch_size: int = 128, lr: float = 1e-4, hidden: int = 256,
                  ema: float = 0.01, seed: int = 0, shuffles: int = 20) -> dict[str, float]:
    """Fit T on (z_fit, y_fit), return the DV bound on the fit half and on the held-out half (nats).

    z: (N, d) float; y: (N,) class indices (n_classes > 1) or numbers (n_classes = 1). Features are
    standardised with the fit half's statistics. The marginal pairs z with y shuffled (``shuffles`` times)."""
    g = torch.Generator().manual_seed(seed)
    mu, sd = z_fit.mean(0), z_fit.std(0).clamp_min(1e-6)
    zf, ze = (z_fit - mu) / sd, (z_eval - mu) / sd
    yf, ye = _encode_y(y_fit, n_classes), _encode_y(y_eval, n_classes)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = nn.Sequential(nn.Linear(zf.shape[1] + yf.shape[1], hidden), nn.ELU(), nn.Linear(hidden, hidden),
                            nn.ELU(), nn.Linear(hidden, 1))
    opt = torch.optim.Adam(net.parameters(), lr=lr)

    def T(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return net(torch.cat([z, y], dim=1))[:, 0]

    n = zf.shape[0]
    ma = None
    for _ in range(steps):
        idx = torch.randint(n, (min(batch_size, n),), generator=g)
        perm = idx[torch.randperm(len(idx), generator=g)]
        tj, tm = T(zf[idx], yf[idx]), T(zf[idx], yf[perm])
        et = tm.exp().mean()
        ma = et.detach() if ma is None else (1 - ema) * ma + ema * et.detach()
        loss = -(tj.mean() - et / ma)  # gradient of log E[e^T] ≈ ∇E[e^T] / moving average
        opt.zero_grad()
        loss.backward()
        opt.step()

    @torch.no_grad()
    def bound(z: torch.Tensor, y: torch.Tensor) -> float:
        gg = torch.Generator().manual_seed(seed + 1)
        marg = torch.cat([T(z, y[torch.randperm(len(y), generator=gg)]) for _ in range(shuffles)])
        return float(dv_bound(T(z, y), marg))

    return {"fit": bound(zf, yf), "eval": bound(ze, ye)}


def label_entropy(y: list[int]) -> float:
    """Empirical H(Y) in nats."""
    counts = Counter(y)
    n = len(y)
    return -sum(c / n * math.log(c / n) for c in counts.values())


# ----------------------------------------------------------------------------------------------------------
# Features and the command
# ----------------------------------------------------------------------------------------------------------


@torch.no_grad()
def extract(model: Any, enc: Encoder, items: list[dict[str, Any]], layer: int, wanted: list[str],
            batch_size: int, device: torch.device) -> dict[str, torch.Tensor]:
    """(N, d) pooled features and (N, m_max·d) answer-token features of every item."""
    model.eval()
    out: dict[str, list[torch.Tensor]] = {k: [] for k in wanted}
    depth = 0  # the answer features' width: the deepest answer
    if "tokens" in out:
        depth = max(i["trie"].depth for i in items) if enc.text_answers else enc.trie.depth
    for chunk in batches(items, batch_size):
        b = enc.collate([{k: i[k] for k in ("prompt", "trie") if k in i} for i in chunk])
        ids, mask = b["prompt_ids"].to(device), b["prompt_mask"].to(device)
        pp = prompt_pass(model.lm, ids, mask, layer)
        if "pooled_last" in out:
            out["pooled_last"].append(pp.states[:, -1].float().cpu())
        if "pooled_mean" in out:
            w = mask.unsqueeze(-1).float()
            out["pooled_mean"].append(((pp.states.float() * w).sum(1) / w.sum(1)).cpu())
        if "tokens" in out:
            d = constrained_greedy(model.lm, enc.tries(b), ids, mask, layer, enc.pad_id, prompt=pp)
            z = (d.states.float() * d.mask.unsqueeze(-1)).cpu()  # (B, m, d)
            z = torch.nn.functional.pad(z, (0, 0, 0, depth - z.shape[1]))
            out["tokens"].append(z.flatten(1))
    return {k: torch.cat(v) for k, v in out.items()}


def run_mine(cfg: MineConfig, resume: str | None = None) -> dict[str, Any]:
    bad = sorted(set(cfg.representations) - set(REPRESENTATIONS))
    if bad or not cfg.representations:
        raise ForethoughtError(f"unknown representation(s) {bad}; choose from {', '.join(REPRESENTATIONS)}")
    if cfg.split not in ("train", "eval"):
        raise ForethoughtError(f"split must be train or eval, got '{cfg.split}'")
    if not cfg.seeds:
        raise ForethoughtError("seeds: give at least one seed")
    # the answer-token states need the constrained decoder, also for a Predictor's checkpoint
    saved = load_saved(cfg.model, cfg.device, decode=True if "tokens" in cfg.representations else None)
    model, enc, meta, dev = saved.model, saved.enc, saved.meta, saved.device
    layer = meta["layer"] if cfg.layer is None else check_layer(cfg.layer, model.lm)
    items = enc.encode(saved_examples(saved, cfg.split, cfg.max_examples))
    if len(items) < 8:
        raise ForethoughtError(f"MINE needs at least 8 examples, the {cfg.split} split has {len(items)}")
    feats = extract(model, enc, items, layer, list(cfg.representations), cfg.feature_batch_size, dev)
    y = torch.tensor([i["target"] for i in items], dtype=torch.float64)
    n_classes = enc.n_out
    results: dict[str, Any] = {"method": meta["method"], "task": meta["task_spec"]["name"], "split": cfg.split,
                               "split_checked": "data" in meta, "layer": layer, "examples": len(items),
                               "units": "nats", "estimates": {}}
    results["H_Y"] = label_entropy([int(v) for v in y.tolist()]) if n_classes > 1 else None
    for rep, z in feats.items():
        fit_vals, eval_vals = [], []
        for seed in cfg.seeds:
            perm = torch.randperm(len(items), generator=torch.Generator().manual_seed(seed))
            a, b = perm[: len(items) // 2], perm[len(items) // 2:]
            r = mine_estimate(z[a], y[a], z[b], y[b], n_classes, steps=cfg.steps, batch_size=cfg.batch_size,
                              lr=cfg.lr, hidden=cfg.hidden, ema=cfg.ema, seed=seed)
            fit_vals.append(r["fit"])
            eval_vals.append(r["eval"])
        results["estimates"][rep] = {"dim": int(z.shape[1]), "heldout": mean_std(eval_vals),
                                     "fit_half": mean_std(fit_vals)}
    out = Path(cfg.out) if cfg.out else saved.folder.parent / "mine.json"
    atomic_write_json(out, results)
    bars = {k: (v["heldout"]["mean"], v["heldout"]["std"]) for k, v in results["estimates"].items()}
    bar_plot(bars, out.with_suffix(".png"), title=f"MINE I(Y;Z), held-out half ({meta['method']})",
             ylabel="nats", hline=results["H_Y"], hline_label="H(Y)" if results["H_Y"] is not None else "")
    for rep, v in results["estimates"].items():
        print(f"{rep:12s} held-out {v['heldout']['mean']:.4f} ± {v['heldout']['std']:.4f} nats "
              f"(fit half {v['fit_half']['mean']:.4f})")
    if results["H_Y"] is not None:
        print(f"H(Y) = {results['H_Y']:.4f} nats")
    print(f"wrote {out}")
    return results
