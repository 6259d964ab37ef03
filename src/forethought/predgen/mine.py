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

``--words K`` adds the NPMI of input words against the written answer: our precise form of what the paper calls
token-level mutual information (the paper: the predicted answer token "positive" is associated with input words
such as "funny" 0.47 and "pretty" 0.34 on SST-2); see :func:`word_association` for the definition.
``--representations []`` runs it alone, without MINE.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from forethought.core.env import run_models
from forethought.core.errors import ForethoughtError
from forethought.core.io import atomic_write_json
from forethought.core.plots import bar_plot
from forethought.core.runtime import mix_seed
from forethought.predgen.config import REPRESENTATIONS, MineConfig  # their home imports no torch
from forethought.predgen.decoding import constrained_greedy, prompt_pass
from forethought.predgen.methods import Encoder, batches
from forethought.predgen.metrics import mean_std
from forethought.predgen.model import check_layer, read_meta
from forethought.predgen.saved import load_saved, model_folder, saved_examples
from forethought.predgen.tasks import Example

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
        gg = torch.Generator().manual_seed(mix_seed("mine-marginal", seed))
        marg = torch.cat([T(z, y[torch.randperm(len(y), generator=gg)]) for _ in range(shuffles)])
        return float(dv_bound(T(z, y), marg))

    return {"fit": bound(zf, yf), "eval": bound(ze, ye)}


def label_entropy(y: list[int]) -> float:
    """Empirical H(Y) in nats."""
    counts = Counter(y)
    n = len(y)
    return -sum(c / n * math.log(c / n) for c in counts.values())


# ----------------------------------------------------------------------------------------------------------
# NPMI of input words against the written answer (pure)
# ----------------------------------------------------------------------------------------------------------

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")  # letters/digits, inner apostrophes kept ("don't"; SST-2's "'s" -> "s")


def example_words(ex: Example) -> set[str]:
    """The distinct case-folded words of an example's text fields (the template's fixed words are not input)."""
    return {w for text in ex.fields.values() for w in _WORD.findall(text.casefold())}


def npmi(n_wy: int, n_w: int, n_y: int, n: int) -> float:
    """Normalised pointwise mutual information of two events from counts over n examples (Bouma 2009):
    ``log(p(w,y) / (p(w) p(y))) / -log p(w,y)``, in [-1, 1]; -1 when they never occur together, 0 when
    independent, 1 when each occurs exactly when the other does. When p(w,y) = 1 (both in every example) it is 0:
    nothing varies, so nothing is associated."""
    if n_wy == 0:
        return -1.0
    if n_wy == n:
        return 0.0
    p_wy = n_wy / n
    return math.log(p_wy / ((n_w / n) * (n_y / n))) / -math.log(p_wy)


def word_association(words: list[set[str]], answers: list[int], labels: list[str], top: int,
                     min_count: int, asked: tuple[str, ...] = ()) -> dict[str, Any]:
    """Which input words the model's answers are associated with: the NPMI of input words against the written
    answer, our precise form of the token-level analysis of PredGen's paper.

    The paper describes it only as token-level mutual information between the predicted answer token
    ("positive" on SST-2) and input words ("funny" 0.47, "pretty" 0.34). Here, precisely: over N examples x_i,
    with W(x_i) the set of words of the input (``example_words``) and ŷ_i the answer the model writes for x_i
    (its constrained-greedy label word, what the Generator predicts), for each answer y and word w

        n_w = #{i : w in W(x_i)},  n_y = #{i : ŷ_i = y},  n_wy = #{i : w in W(x_i) and ŷ_i = y}
        score(w, y) = NPMI(w, y) = log(p(w,y) / (p(w) p(y))) / -log p(w,y),  p(.) = n(.) / N

    (the pointwise mutual information of the events "w is in the input" and "the model answers y", normalised to
    [-1, 1] so words of different frequency compare). Words in fewer than ``min_count`` examples are left out:
    a word seen once gets a high score by chance. Per answer, the ``top`` words by score (ties: more examples
    together, then alphabetical), each with its counts; and every word in ``asked`` (case-folded; any count).
    ``words[i]`` and ``answers[i]`` (a class index into ``labels``) describe example i."""
    if len(words) != len(answers):
        raise ValueError(f"{len(words)} word sets for {len(answers)} answers")
    n = len(answers)
    n_w = Counter(w for ws in words for w in ws)
    n_y = Counter(answers)
    n_wy = Counter((w, y) for ws, y in zip(words, answers, strict=True) for w in ws)
    kept = sorted(w for w, c in n_w.items() if c >= min_count)

    def row(w: str, y: int) -> dict[str, Any]:
        score = npmi(n_wy[w, y], n_w[w], n_y[y], n) if n_w[w] and n_y[y] else None  # None: w or y never occurs
        return {"word": w, "npmi": score, "with_answer": n_wy[w, y], "examples": n_w[w]}

    out: dict[str, Any] = {}
    for y, label in enumerate(labels):
        rows = [row(w, y) for w in kept] if n_y[y] else []
        rows.sort(key=lambda r: (-r["npmi"], -r["with_answer"], r["word"]))
        out[label] = {"answered": n_y[y], "top": rows[:top]}
        if asked:
            out[label]["asked"] = [row(w.casefold(), y) for w in asked]
    return out


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


@torch.no_grad()
def written_answers(model: Any, enc: Encoder, items: list[dict[str, Any]], layer: int, batch_size: int,
                    device: torch.device) -> list[int]:
    """The class index of the answer the model writes for each item (constrained greedy, as ``predgen eval``
    decodes the Generator)."""
    model.eval()
    out: list[int] = []
    for chunk in batches(items, batch_size):
        b = enc.collate([{k: i[k] for k in ("prompt", "trie") if k in i} for i in chunk])
        tries = enc.tries(b)
        d = constrained_greedy(model.lm, tries, b["prompt_ids"].to(device), b["prompt_mask"].to(device), layer,
                               enc.pad_id)
        rows = tries if isinstance(tries, list) else [tries] * len(chunk)
        out.extend(int(t.values[c]) for t, c in zip(rows, d.choice, strict=True))
    return out


@run_models()  # env.json names the models this run loads, not an earlier run's
def run_mine(cfg: MineConfig, resume: str | None = None) -> dict[str, Any]:
    bad = sorted(set(cfg.representations) - set(REPRESENTATIONS))
    if bad:
        raise ForethoughtError(f"unknown representation(s) {bad}; choose from {', '.join(REPRESENTATIONS)}")
    if cfg.words < 0 or cfg.word_min_count < 1:
        raise ForethoughtError(f"words must be >= 0 and word_min_count >= 1, got {cfg.words} and "
                               f"{cfg.word_min_count}")
    if not cfg.representations and not cfg.words:
        raise ForethoughtError("nothing to do: give representations for MINE, or --words K for the NPMI of "
                               "input words against the written answer")
    if cfg.split not in ("train", "eval"):
        raise ForethoughtError(f"split must be train or eval, got '{cfg.split}'")
    if cfg.representations and not cfg.seeds:
        raise ForethoughtError("seeds: give at least one seed")
    if cfg.words and read_meta(model_folder(cfg.model))["task_spec"].get("task_type") != "classification":
        raise ForethoughtError("--words (NPMI of input words against the written answer) needs a classification task: "
                               "it associates input words with the answer the model writes")
    # the answer-token states and the written answers need the constrained decoder, also for a Predictor
    decode = True if "tokens" in cfg.representations or cfg.words else None
    saved = load_saved(cfg.model, cfg.device, decode=decode)
    model, enc, meta, dev = saved.model, saved.enc, saved.meta, saved.device
    layer = meta["layer"] if cfg.layer is None else check_layer(cfg.layer, model.lm)
    examples = saved_examples(saved, cfg.split, cfg.max_examples)
    items = enc.encode(examples)
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
    if cfg.words:
        answers = written_answers(model, enc, items, layer, cfg.feature_batch_size, dev)
        labels = list(enc.spec.labels)
        results["word_association"] = {
            "definition": "NPMI(w, y) = log(p(w,y) / (p(w) p(y))) / -log p(w,y) over the examples, w: a word of "
                          "the input, y: the answer the model writes (constrained greedy); see "
                          "forethought.predgen.mine.word_association",
            "min_count": cfg.word_min_count,
            "answers_match_targets": sum(a == i["target"] for a, i in zip(answers, items, strict=True)) / len(items),
            "per_answer": word_association([example_words(ex) for ex in examples], answers, labels, cfg.words,
                                           cfg.word_min_count, tuple(cfg.word_list))}
    out = Path(cfg.out) if cfg.out else saved.folder.parent / "mine.json"
    atomic_write_json(out, results)
    if results["estimates"]:
        bars = {k: (v["heldout"]["mean"], v["heldout"]["std"]) for k, v in results["estimates"].items()}
        bar_plot(bars, out.with_suffix(".png"), title=f"MINE I(Y;Z), held-out half ({meta['method']})",
                 ylabel="nats", hline=results["H_Y"], hline_label="H(Y)" if results["H_Y"] is not None else "")
    for rep, v in results["estimates"].items():
        print(f"{rep:12s} held-out {v['heldout']['mean']:.4f} ± {v['heldout']['std']:.4f} nats "
              f"(fit half {v['fit_half']['mean']:.4f})")
    if results["H_Y"] is not None and results["estimates"]:
        print(f"H(Y) = {results['H_Y']:.4f} nats")
    for label, v in results.get("word_association", {}).get("per_answer", {}).items():
        top = ", ".join(f"{r['word']} {r['npmi']:.2f}" for r in v["top"])
        print(f"answer {label!r} ({v['answered']} examples): {top or '(no word in enough examples)'}")
        for r in v.get("asked", []):
            score = "undefined" if r["npmi"] is None else f"{r['npmi']:.2f}"
            print(f"  {r['word']}: {score} ({r['with_answer']} of its {r['examples']} examples)")
    print(f"wrote {out}")
    return results
