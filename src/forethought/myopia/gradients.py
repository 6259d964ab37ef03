"""``forethought myopia gradients``: the pre-caching gradient, measured per layer during vanilla training.

The vanilla gradient g of the mean loss Σ_t L_t splits into what each loss sends to its own position's
computation and what it sends to earlier positions' states (through the keys and values later queries read).
Myopic training (``detach_hidden``) keeps exactly the first part, g_m, so g − g_m is the part of the gradient
that shapes earlier positions for later losses: the training signal for pre-caching (Wu et al. 2024, "Do
language models plan for future tokens?"; no number in the paper measures it). Our myopic attention is exact
in one pass, so g_m costs one more backward pass on the same batch.

Every ``--train.eval_every`` steps of vanilla training, on the same fixed batches (neither training nor
evaluation data), this reports per parameter group (the input embedding, each layer, the head) and overall:
``rel_diff`` = ‖g − g_m‖ / ‖g‖ and ``cos`` = cos(g, g_m), with the held-out loss beside them. Two experiments:
the synthetic task (pre-caching is the only way to solve it) and language modelling (``myopia lm``'s data and
models: our GPT from scratch or an HF causal LM).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from forethought.core.env import run_models
from forethought.core.errors import ForethoughtError
from forethought.core.io import atomic_write_text
from forethought.core.plots import pyplot, save_figure
from forethought.core.run import Run
from forethought.core.runtime import mix_seed, runtime_for, step_generator, unwrap
from forethought.core.trainer import TrainHooks, to_device, train
from forethought.data.corpora import eval_windows, random_windows
from forethought.models.gpt import GPT
from forethought.myopia import lm, synthetic
from forethought.myopia.config import GradientsConfig  # its home imports no torch; importable from here too
from forethought.myopia.wrap import make_myopic, myopia_mode

LossFn = Callable[[torch.nn.Module, Any], tuple[torch.Tensor, dict]]
_LAYER = re.compile(r"(?:^|\.)(?:h|layers|blocks|layer)\.(\d+)\.")


# ---------------------------------------------------------------- pure parts


def parameter_groups(model: torch.nn.Module) -> dict[str, list[str]]:
    """Trainable parameter names by group, in model order: ``embed`` (before the first layer), ``layer<i>``,
    ``head`` (after the last layer: final norm, output head)."""
    groups: dict[str, list[str]] = {}
    seen_layer = False
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        m = _LAYER.search(name)
        if m:
            seen_layer = True
            key = f"layer{int(m.group(1))}"
        else:
            key = "head" if seen_layer else "embed"
        groups.setdefault(key, []).append(name)
    return groups


def mean_gradient(model: torch.nn.Module, loss_fn: LossFn, batches: Sequence[Any],
                  names: Sequence[str]) -> dict[str, torch.Tensor]:
    """The gradient of the loss averaged over ``batches`` for the named parameters (``.grad`` untouched)."""
    params = dict(model.named_parameters())
    sel = [params[n] for n in names]
    total = [torch.zeros_like(p, dtype=torch.float64) for p in sel]
    for batch in batches:
        loss, _ = loss_fn(model, batch)
        grads = torch.autograd.grad(loss, sel, allow_unused=True)
        for t, g in zip(total, grads, strict=True):
            if g is not None:
                t += g.double()
    return {n: t / len(batches) for n, t in zip(names, total, strict=True)}


def split_gradient(model: torch.nn.Module, loss_fn: LossFn, batches: Sequence[Any], names: Sequence[str],
                   mode: str = "detach_hidden") -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(g, g_m): the vanilla gradient and the myopic one (``mode``) of the same model on the same batches, in
    eval mode (no dropout noise between the two). The model is vanilla again afterwards."""
    inner = unwrap(model)
    if myopia_mode(inner) != "vanilla":
        raise ForethoughtError("split_gradient needs a vanilla model (its myopic gradient is computed here)")
    was_training = inner.training
    inner.eval()
    try:
        g = mean_gradient(model, loss_fn, batches, names)
        make_myopic(inner, mode=mode)
        g_m = mean_gradient(model, loss_fn, batches, names)
    finally:
        make_myopic(inner, mode="vanilla")
        inner.train(was_training)
    return g, g_m


def compare(g: dict[str, torch.Tensor], g_m: dict[str, torch.Tensor],
            groups: dict[str, list[str]]) -> dict[str, float]:
    """Per group and ``all``: rel_diff = ‖g − g_m‖/‖g‖, cos = cos(g, g_m), and both norms."""
    out: dict[str, float] = {}
    for key, names in {**groups, "all": [n for ns in groups.values() for n in ns]}.items():
        a = torch.cat([g[n].reshape(-1) for n in names])
        b = torch.cat([g_m[n].reshape(-1) for n in names])
        na, nb = a.norm().item(), b.norm().item()
        out[f"{key}/rel_diff"] = (a - b).norm().item() / na if na > 0 else 0.0
        out[f"{key}/cos"] = (a @ b).item() / (na * nb) if na > 0 and nb > 0 else 0.0
        out[f"{key}/g_norm"] = na
        out[f"{key}/g_myopic_norm"] = nb
    return out


# ---------------------------------------------------------------- the command


def _lm_config(cfg: GradientsConfig) -> lm.LMConfig:
    gpt = copy.deepcopy(cfg.model)
    gpt.input_dim, gpt.output_dim = 0, 0  # token ids in, LM logits out
    return lm.LMConfig(run=cfg.run, base=cfg.base, base_dtype=cfg.base_dtype, gpt=gpt, lora_r=cfg.lora_r,
                       lora_alpha=cfg.lora_alpha, variants=["vanilla"], data=cfg.data, train=cfg.train)


def _synthetic(cfg: GradientsConfig) -> tuple[torch.nn.Module, LossFn, Callable, list, Callable]:
    mcfg = copy.deepcopy(cfg.model)
    mcfg.input_dim, mcfg.output_dim = 2, 1
    torch.manual_seed(cfg.run.seed)
    model = GPT(mcfg)

    def batch_fn(step: int) -> dict[str, torch.Tensor]:
        return synthetic.sample_task(cfg.task, cfg.p, cfg.train.batch_size, step_generator(cfg.run.seed, step))

    fixed = [synthetic.sample_task(cfg.task, cfg.p, cfg.train.batch_size, step_generator(cfg.run.seed, i, salt=17))
             for i in range(cfg.measure_batches)]

    def held_out(m: torch.nn.Module) -> dict[str, float]:
        return {"normalised_loss": synthetic.normalised_loss(m, cfg.task, cfg.p, cfg.eval_sequences,
                                                             mix_seed("synthetic-curve", cfg.run.seed))[0]}

    return model, synthetic.huber_loss, batch_fn, fixed, held_out


def _language(cfg: GradientsConfig) -> tuple[torch.nn.Module, LossFn, Callable, list, Callable]:
    lcfg = _lm_config(cfg)
    train_tokens, valid_tokens, vocab = lm.load_data(lcfg)
    train_tokens, valid_tokens = train_tokens.reshape(-1), valid_tokens.reshape(-1)  # passages: concatenated
    model = lm.build_model(lcfg, vocab)
    L = cfg.data.seq_len + 1
    windows = eval_windows(valid_tokens, cfg.eval_sequences, L)

    def batch_fn(step: int) -> torch.Tensor:
        return random_windows(train_tokens, cfg.train.batch_size, L, step_generator(cfg.run.seed, step))

    fixed = [random_windows(train_tokens, cfg.train.batch_size, L, step_generator(cfg.run.seed, i, salt=17))
             for i in range(cfg.measure_batches)]

    def held_out(m: torch.nn.Module) -> dict[str, float]:
        return {"val_loss": float(np.mean(lm.per_position_loss(m, windows)))}

    return model, lm.lm_loss, batch_fn, fixed, held_out


@run_models()  # env.json names the models this run loads, not an earlier run's
def run(cfg: GradientsConfig, resume: str | None = None) -> dict:
    rt = runtime_for(cfg.run)
    model, loss_fn, batch_fn, fixed, held_out = (_synthetic if cfg.experiment == "synthetic" else _language)(cfg)
    groups = parameter_groups(model)
    names = [n for ns in groups.values() for n in ns]
    parent = Run.create(cfg.run.out_dir, cfg.run.name, cfg, is_main=rt.is_main)  # after every input is checked

    def eval_fn(m: torch.nn.Module, step: int) -> dict[str, float]:
        batches = [to_device(b, rt.device) for b in fixed]
        g, g_m = split_gradient(m, loss_fn, batches, names, cfg.mode)
        return {**compare(g, g_m, groups), **held_out(m)}

    out = train(model, loss_fn, batch_fn, cfg.train, parent, rt, resume=resume, desc=f"{cfg.experiment} vanilla",
                hooks=TrainHooks(eval_fn=eval_fn),
                model_config=model.checkpoint_record() if isinstance(model, GPT) else None)
    results = {"experiment": cfg.experiment, "mode": cfg.mode, "steps": cfg.train.steps,
               "batch_size": cfg.train.batch_size, "measure_batches": cfg.measure_batches,
               "groups": {k: len(v) for k, v in groups.items()},
               "params": {k: sum(dict(model.named_parameters())[n].numel() for n in v) for k, v in groups.items()},
               "measurements": out.get("eval_curve", []), "curve": out["curve"], "train_wall_s": out["wall_s"]}
    if rt.is_main:
        parent.write_results(results)
        plot_measurements(results["measurements"], list(groups), parent.path("gradients.png"),
                          title=f"{cfg.experiment}: vanilla training")
        _report(results, parent)
    return results


def plot_measurements(rows: list[dict], groups: list[str], path, title: str = "") -> None:
    """Three panels over training steps: rel_diff and cos per group, and the held-out loss."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    steps = [r["step"] for r in rows]
    for key in [*groups, "all"]:
        style = {"color": "k", "lw": 2} if key == "all" else {}
        axes[0].plot(steps, [r[f"{key}/rel_diff"] for r in rows], label=key, **style)
        axes[1].plot(steps, [r[f"{key}/cos"] for r in rows], label=key, **style)
    loss_key = next((k for k in ("normalised_loss", "val_loss") if rows and k in rows[0]), None)
    if loss_key:
        axes[2].plot(steps, [r[loss_key] for r in rows], color="C3")
    axes[0].set(title="‖g − g_myopic‖ / ‖g‖", xlabel="step")
    axes[1].set(title="cos(g, g_myopic)", xlabel="step")
    axes[2].set(title=f"held-out {loss_key or 'loss'}", xlabel="step")
    axes[0].legend(fontsize=8)
    for a in axes:
        a.grid(alpha=0.3)
    fig.suptitle(title)
    save_figure(fig, path)


def _report(results: dict, run: Run) -> None:
    rows = results["measurements"]
    keys = [*results["groups"], "all"]
    lines = ["# Myopia: the pre-caching gradient", "",
             f"{results['experiment']}, {results['steps']} vanilla steps × batch {results['batch_size']}; "
             f"g vs the {results['mode']} gradient g_m on {results['measure_batches']} fixed batches.", "",
             "‖g − g_m‖/‖g‖ per group:", "", "| step | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    lines += [f"| {r['step']} | " + " | ".join(f"{r[f'{k}/rel_diff']:.3f}" for k in keys) + " |" for r in rows]
    lines += ["", "![gradients](gradients.png)", ""]
    atomic_write_text(run.path("report.md"), "\n".join(lines))
    print("\n".join(lines[:-3]))
