"""``forethought myopia probe``: Future-Lens-style probes of pre-cached future tokens.

The pre-caching analysis of Wu et al. 2024, "Do language models plan for future tokens?", with linear probes in
the style of Future Lens (Pal et al. 2023).

From the residual stream at layer l and position t, predict token t+k (k = 1..N): a d×d linear map, fitted by
ridge regression, takes h_l[t] to the final-layer state (the LM head's input) at position t+k−1, and the
model's own frozen LM head decodes it. Fitting in closed form on states, never on the vocabulary, keeps a 49k
vocabulary cheap. Accuracy = top-1 agreement with the true token t+k on held-out windows. Comparing vanilla and
myopic models shows how much future information the states carry beyond what the current step needs.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from forethought.core.env import run_models
from forethought.core.errors import ForethoughtError
from forethought.core.io import atomic_write_text
from forethought.core.plots import line_plot
from forethought.core.run import Run
from forethought.core.runtime import runtime_for
from forethought.models.gpt import GPT
from forethought.myopia.config import ProbeConfig  # its home imports no torch; importable from here too


def lm_head(model: torch.nn.Module) -> torch.nn.Module:
    """The output projection of our GPT or of an HF model (the probes decode through it, frozen)."""
    return model.head if isinstance(model, GPT) else model.get_output_embeddings()


@torch.no_grad()
def states(model: torch.nn.Module, ids: torch.Tensor, batch: int = 32) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Residual stream per layer (L+1 tensors (N, T, d)) and the LM head's input (N, T, d)."""
    head = lm_head(model)
    captured: list[torch.Tensor] = []
    handle = head.register_forward_pre_hook(lambda m, args: captured.append(args[0].detach().float().cpu()))
    layers: list[list[torch.Tensor]] = []
    dev = next(model.parameters()).device
    try:
        for i in range(0, len(ids), batch):
            x = ids[i:i + batch].to(dev)
            if isinstance(model, GPT):
                _, hidden = model(x, output_hidden_states=True)
            else:
                hidden = model(input_ids=x, output_hidden_states=True, use_cache=False).hidden_states
            layers.append([h.float().cpu() for h in hidden])
    finally:
        handle.remove()
    per_layer = [torch.cat([b[layer] for b in layers]) for layer in range(len(layers[0]))]
    return per_layer, torch.cat(captured)


def fit_ridge(X: torch.Tensor, Y: torch.Tensor, ridge: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Closed-form ridge with intercept in float64, the one solve every myopia probe uses: returns (W (d, d'),
    b (d',)) so that ``X @ W + b`` predicts Y. The penalty is ``ridge`` times the mean diagonal of the centred
    Gram matrix, so it does not depend on the features' scale or the number of rows; the intercept is not penalised."""
    X, Y = X.double(), Y.double()
    mu, ymu = X.mean(0), Y.mean(0)
    Xc = X - mu
    gram = Xc.T @ Xc
    lam = ridge * gram.diagonal().mean().clamp_min(1e-12)
    W = torch.linalg.solve(gram + lam * torch.eye(gram.shape[0], dtype=gram.dtype), Xc.T @ (Y - ymu))
    return W, ymu - mu @ W


@torch.no_grad()
def future_lens_accuracy(model: torch.nn.Module, fit_ids: torch.Tensor, eval_ids: torch.Tensor,
                         layers: list[int], k_max: int, ridge: float) -> dict[str, list[float]]:
    """{f"layer {l}": [acc k=1, ..., k=k_max]}: top-1 accuracy of decoding token t+k from layer l at t."""
    head = lm_head(model)
    fit_h, fit_final = states(model, fit_ids)
    ev_h, _ = states(model, eval_ids)
    T = fit_ids.shape[1]
    if any(layer < 0 or layer >= len(fit_h) for layer in layers):
        raise ForethoughtError(f"probe: layers must be in 0..{len(fit_h) - 1}, got {layers}")
    out: dict[str, list[float]] = {}
    for layer in layers:
        accs = []
        for k in range(1, k_max + 1):
            n = T - k  # positions t = 0..T-k-1 have a token t+k
            X = fit_h[layer][:, :n].reshape(-1, fit_h[layer].shape[-1])
            Y = fit_final[:, k - 1:k - 1 + n].reshape(-1, fit_final.shape[-1])
            W, b = fit_ridge(X, Y, ridge)
            Xe = ev_h[layer][:, :n].reshape(-1, X.shape[-1]).double()
            pred_state = (Xe @ W + b).float().to(head.weight.device)
            logits = head(pred_state)  # frozen LM head
            target = eval_ids[:, k:k + n].reshape(-1).to(logits.device)
            accs.append((logits.argmax(-1) == target).float().mean().item())
        out[f"layer {layer}"] = accs
    return out


@run_models()  # env.json names the models this run loads, not an earlier run's
def run(cfg: ProbeConfig, resume: str | None = None) -> dict:
    from forethought.data.corpora import eval_windows, random_windows
    from forethought.myopia.lm import load_tokens, load_variant

    rt = runtime_for(cfg.run)
    t0 = time.perf_counter()
    results: dict = {"lm_run": str(Path(cfg.lm_run)), "k_max": cfg.k_max, "variants": {}}
    for variant in cfg.variants:
        model, lm_cfg = load_variant(cfg.lm_run, variant, rt.device)
        # windows of the token streams (a passage run's sequences, concatenated)
        train_tokens, valid_tokens = (t.reshape(-1) for t in load_tokens(lm_cfg))
        L = lm_cfg.data.seq_len
        fit_ids = random_windows(train_tokens, cfg.fit_sequences, L, torch.Generator().manual_seed(cfg.run.seed))
        eval_ids = eval_windows(valid_tokens, cfg.eval_sequences, L)
        n_layers = (lm_cfg.gpt.n_layer if lm_cfg.base == "gpt" else model.config.num_hidden_layers) + 1
        layers = cfg.layers or list(range(n_layers))
        results["variants"][variant] = future_lens_accuracy(model, fit_ids, eval_ids, layers, cfg.k_max, cfg.ridge)
    results["wall_s"] = time.perf_counter() - t0
    parent = Run.create(cfg.run.out_dir, cfg.run.name, cfg, is_main=rt.is_main)  # every variant loaded and probed
    if rt.is_main:
        parent.write_results(results)
        _report(cfg, results, parent)
    return results


def _report(cfg: ProbeConfig, results: dict, run: Run) -> None:
    ks = list(range(1, cfg.k_max + 1))
    lines = ["# Myopia: future-token probes (Future Lens)", "",
             f"Top-1 accuracy of token t+k decoded from layer l at position t ({results['lm_run']}).", "",
             "| variant | layer | " + " | ".join(f"k={k}" for k in ks) + " |", "|---" * (len(ks) + 2) + "|"]
    series = {}
    for variant, table in results["variants"].items():
        for layer, accs in table.items():
            lines.append(f"| {variant} | {layer.split()[-1]} | " + " | ".join(f"{a:.3f}" for a in accs) + " |")
        layer_ids = [int(x.split()[-1]) for x in table]
        for ki, k in enumerate(ks):
            series[f"{variant} k={k}"] = (layer_ids, [table[f"layer {i}"][ki] for i in layer_ids])
    line_plot(series, run.path("future_lens.png"), title="future-token probe accuracy", xlabel="layer",
              ylabel="top-1 accuracy")
    lines += ["", "![probe accuracy](future_lens.png)", ""]
    atomic_write_text(run.path("report.md"), "\n".join(lines))
    print("\n".join(lines[:-3]))
