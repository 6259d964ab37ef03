"""The synthetic pre-caching task of Wu et al. 2024, "Do language models plan for future tokens?", and
``forethought myopia synthetic``.

x_n ~ N(0, 1), z_n ~ Bernoulli(p); the model sees (x_n, z_n) through a linear embedding only and must output
y_n = z_n · Σ_{i=shift}^{shift+window−1} f(frequency · x_{n−i}) + (1 − z_n) · x_n   (a term before the first
position is 0, as the reference code pads; ``task.history f0`` makes the missing inputs x = 0 instead). With the
defaults (f = sin, frequency 10, shift 1, window 10) this is the paper's task: a model that computes sin(10·x) at
step n for later use (pre-caching) wins; a myopic model cannot be trained to.

Normalised loss = mean Huber loss (δ = 1) over all positions / p, on fresh sequences. Two reference levels are
reported beside it, on the same sequences: predict-zero, and COPY (output x_n where z = 0 and zero where z = 1,
what a model reaches without computing any of the sum: breadcrumbs are read against it).
Per-layer ridge probes (R²) of f(frequency · x_{n−lag}) show the pre-cached features, and a probe of the whole
sum (the paper probes it at layer 2); both on sequences drawn at the model's own p.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F

from forethought.core.io import atomic_write_text
from forethought.core.plots import heatmaps, line_plot
from forethought.core.run import Run
from forethought.core.runtime import mix_seed, runtime_for, step_generator
from forethought.core.trainer import TrainHooks, train
from forethought.models.gpt import GPT
from forethought.myopia.config import (  # noqa: F401  (their home imports no torch; importable from here too)
    ProbeSettings,
    SyntheticConfig,
    SyntheticMode,
    TaskConfig,
)
from forethought.myopia.probe import fit_ridge
from forethought.myopia.wrap import make_myopic

FUNCTIONS = {"sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh, "square": torch.square}


def sample_task(task: TaskConfig, p: float, batch: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    """inputs (B, T, 2) = (x, z); targets (B, T); x (B, T)."""
    T = task.seq_len
    x = torch.randn(batch, T, generator=g)
    z = (torch.rand(batch, T, generator=g) < p).float()
    feats = FUNCTIONS[task.function](task.frequency * x)  # (B, T)
    off = task.shift + task.window - 1
    # a term before the first position: 0 (history "zero"), or f(0) for a missing input x = 0 (history "f0")
    pad = FUNCTIONS[task.function](torch.zeros(())).item() if task.history == "f0" else 0.0
    padded = F.pad(feats, (off, 0), value=pad)  # lag i of position n sits at padded index n − i + off
    past = sum(padded[:, off - i: off - i + T] for i in range(task.shift, task.shift + task.window))
    y = z * past + (1 - z) * x
    return {"inputs": torch.stack([x, z], dim=-1), "targets": y, "x": x}


def huber_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
    out = model(batch["inputs"]).squeeze(-1)  # (B, T)
    return F.huber_loss(out, batch["targets"], delta=1.0), {}


def eval_batches(task: TaskConfig, p: float, n: int, seed: int, chunk: int = 1024) -> Iterator[dict[str, torch.Tensor]]:
    """The ``n`` evaluation sequences of ``seed`` in chunks: the same ones for a model and for the levels."""
    for i in range(0, n, chunk):
        yield sample_task(task, p, min(chunk, n - i), step_generator(seed, i, salt=7))


def copy_prediction(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """COPY: x_n where z_n = 0 and zero where z_n = 1 (none of the sum computed). (B, T)"""
    return (1 - batch["inputs"][..., 1]) * batch["x"]


@torch.no_grad()
def normalised_loss(model: torch.nn.Module | Callable[[dict], torch.Tensor], task: TaskConfig, p: float, n: int,
                    seed: int, chunk: int = 1024) -> tuple[float, list[float]]:
    """Mean Huber loss / p on the ``n`` evaluation sequences of ``seed``, overall and per position, of a model or
    of a fixed predictor (a batch -> (B, T) outputs, e.g. :func:`copy_prediction`)."""
    if isinstance(model, torch.nn.Module):
        model.eval()
        dev = next(model.parameters()).device
        net = model

        def model(b: dict) -> torch.Tensor:
            return net(b["inputs"].to(dev)).squeeze(-1).cpu()
    total = torch.zeros(task.seq_len, dtype=torch.float64)
    done = 0
    for b in eval_batches(task, p, n, seed, chunk):
        out = model(b)
        total += F.huber_loss(out, b["targets"], delta=1.0, reduction="none").double().sum(0)
        done += out.shape[0]
    per_pos = (total / done / p).tolist()
    return float(sum(per_pos) / len(per_pos)), per_pos


@torch.no_grad()
def probe_r2(model: GPT, task: TaskConfig, settings: ProbeSettings, seed: int, p: float = 1.0) -> list[list[float]]:
    """R² of ridge probes predicting f(freq·x_{n−lag}) from each layer's residual stream (embedding = layer 0).
    Returns [layer][lag]. Sequences are drawn at ``p`` (the model's own training p)."""
    return probes(model, task, settings, seed, p)[0]


@torch.no_grad()
def probes(model: GPT, task: TaskConfig, settings: ProbeSettings, seed: int,
           p: float = 1.0) -> tuple[list[list[float]], list[float]]:
    """Ridge-probe R² from each layer's residual stream (embedding = layer 0), on sequences drawn at ``p``:
    ([layer][lag] for f(freq·x_{n−lag}), lag 0..max_lag; [layer] for the target's whole sum
    Σ_{i=shift}^{shift+window−1} f(freq·x_{n−i}), which the paper probes at the last layer). Positions
    n >= max(max_lag, shift + window − 1), so every lag has a real input."""
    model.eval()
    dev = next(model.parameters()).device
    lo = max(settings.max_lag, task.shift + task.window - 1)
    f = FUNCTIONS[task.function]

    def collect(n: int, salt: int) -> tuple[list[torch.Tensor], torch.Tensor]:
        b = sample_task(task, p, n, step_generator(seed, 0, salt=salt))
        _, hidden = model(b["inputs"].to(dev), output_hidden_states=True)
        feats = [h[:, lo:].reshape(-1, h.shape[-1]).double().cpu() for h in hidden]
        fx = f(task.frequency * b["x"].double())  # (B, T)
        lagged = [fx[:, lo - lag: task.seq_len - lag].reshape(-1) for lag in range(lo + 1)]
        window = torch.stack(lagged[task.shift: task.shift + task.window], dim=1).sum(1)
        return feats, torch.stack([*lagged[:settings.max_lag + 1], window], dim=1)  # (N, lags + 1)

    tr_f, tr_y = collect(settings.train_sequences, 11)
    te_f, te_y = collect(settings.test_sequences, 13)
    r2, r2_sum = [], []
    for X, Xt in zip(tr_f, te_f, strict=True):
        W, b = fit_ridge(X, tr_y, settings.ridge)
        pred = Xt @ W + b
        ss_res = ((te_y - pred) ** 2).sum(0)
        ss_tot = ((te_y - te_y.mean(0)) ** 2).sum(0)
        row = (1 - ss_res / ss_tot).tolist()
        r2.append(row[:-1])
        r2_sum.append(row[-1])
    return r2, r2_sum


def modes_at(cfg: SyntheticConfig, p: float) -> list[str]:
    """The modes trained at ``p``: vanilla at every p, the others at ``myopic_p_values`` (default: every p)."""
    return [m for m in cfg.modes if m == "vanilla" or cfg.myopic_p_values is None or p in cfg.myopic_p_values]


def eval_seed(cfg: SyntheticConfig) -> int:
    """The seed of the final evaluation's sequences (the models' loss and the levels)."""
    return cfg.eval_seed if cfg.eval_seed is not None else mix_seed("synthetic-eval", cfg.run.seed)


def train_one(cfg: SyntheticConfig, p: float, mode: str, parent: Run, rt, resume: str | None) -> dict:
    run = parent.sub(f"p={p:g}/{mode}")
    torch.manual_seed(cfg.run.seed)
    model = GPT(cfg.model)
    if mode != "vanilla":
        dial = mode in ("detach_hidden", "detach_kv")  # the horizon and beta apply to these
        make_myopic(model, mode=mode, horizon=cfg.myopia.horizon if dial else 0,
                    beta=cfg.myopia.beta if dial else 0.0)

    def batch_fn(step: int) -> dict[str, torch.Tensor]:
        return sample_task(cfg.task, p, cfg.train.batch_size, step_generator(cfg.run.seed, step))

    def eval_fn(model: torch.nn.Module, step: int) -> dict[str, float]:
        # its own seed: these sequences are neither training batches nor the final evaluation's
        return {"normalised_loss": normalised_loss(model, cfg.task, p, cfg.curve_sequences,
                                                   mix_seed("synthetic-curve", cfg.run.seed))[0]}

    t0 = time.perf_counter()
    out = train(model, huber_loss, batch_fn, cfg.train, run, rt, resume=resume, desc=f"p={p:g} {mode}",
                hooks=TrainHooks(eval_fn=eval_fn), model_config=model.checkpoint_record())
    loss, per_pos = normalised_loss(model, cfg.task, p, cfg.eval_sequences, eval_seed(cfg))
    # on the model's own p
    r2, r2_sum = probes(model, cfg.task, cfg.probe, mix_seed("synthetic-probe", cfg.run.seed), p)
    res = {"normalised_loss": loss, "per_position": per_pos, "probe_r2": r2, "probe_sum_r2": r2_sum,
           "probe_p": p,
           "curve": [[step, train_loss / p] for step, train_loss in out["curve"]],
           "eval_curve": out.get("eval_curve", []),
           "train_wall_s": out["wall_s"], "steps": cfg.train.steps, "world_size": out["world_size"],
           "wall_s": time.perf_counter() - t0}
    run.write_results(res)
    return res


def predict_zero_loss(task: TaskConfig, p: float, n: int = 4096, seed: int = 123) -> float:
    b = sample_task(task, p, n, step_generator(seed, 0, salt=3))
    return F.huber_loss(torch.zeros_like(b["targets"]), b["targets"], delta=1.0).item() / p


def run(cfg: SyntheticConfig, resume: str | None = None) -> dict:
    rt = runtime_for(cfg.run)
    parent = Run.create(cfg.run.out_dir, cfg.run.name, cfg, is_main=rt.is_main)
    t0 = time.perf_counter()
    results: dict = {"task": vars(cfg.task).copy(), "steps": cfg.train.steps, "batch_size": cfg.train.batch_size,
                     "myopia_horizon": cfg.myopia.horizon, "myopia_beta": cfg.myopia.beta,
                     "lr": cfg.train.lr, "eval_sequences": cfg.eval_sequences, "eval_seed": eval_seed(cfg)}
    for p in cfg.p_values:
        # COPY (x_n where z = 0, zero where z = 1) on the models' own evaluation sequences: a myopic model reaches it
        # without pre-caching, so breadcrumbs are read against it, not against predict-zero. Its expectation is the
        # same at every p (predict-zero at p = 1), but at small p few positions ask the sum, so it is measured on
        # the very sequences the models are scored on.
        row = {"predict_zero": predict_zero_loss(cfg.task, p),
               "copy_level": normalised_loss(copy_prediction, cfg.task, p, cfg.eval_sequences, eval_seed(cfg))[0]}
        for mode in modes_at(cfg, p):
            row[mode] = train_one(cfg, p, mode, parent, rt, resume)
        results[f"p={p:g}"] = row
    results["wall_s"] = time.perf_counter() - t0
    if rt.is_main:
        _report(cfg, results, parent)
        parent.write_results(results)
    return results


def _report(cfg: SyntheticConfig, results: dict, run: Run) -> None:
    lines = ["# Myopia: synthetic pre-caching task", "",
             f"{cfg.train.steps} steps × batch {cfg.train.batch_size}, lr {cfg.train.lr}; "
             f"normalised loss on {cfg.eval_sequences} fresh sequences, beside two levels: predict zero, and copy "
             "(x_n where z = 0, zero where z = 1; on the same sequences).", "",
             "| p | " + "".join(f"{m} | " for m in cfg.modes) + "copy | predict zero |",
             "|---" * (len(cfg.modes) + 3) + "|"]
    for p in cfg.p_values:
        row = results[f"p={p:g}"]
        lines.append(f"| {p:g} | " + "".join(f"{row[m]['normalised_loss']:.3f} | " if m in row else "– | "
                                             for m in cfg.modes)
                     + f"{row['copy_level']:.3f} | {row['predict_zero']:.3f} |")
    if not cfg.modes:  # the levels only
        atomic_write_text(run.path("report.md"), "\n".join(lines))
        print("\n".join(lines))
        return
    p0, first = f"p={cfg.p_values[0]:g}", modes_at(cfg, cfg.p_values[0])  # the probes: at the first p
    lags = list(range(cfg.probe.max_lag + 1))
    lines += ["", f"Best-layer probe R² of {cfg.task.function}({cfg.task.frequency:g}·x_(n−lag)) at {p0}:", "",
              "| model | " + " | ".join(f"lag {i}" for i in lags[:6]) + " |", "|---" * 7 + "|"]
    for m in first:
        r2 = results[p0][m]["probe_r2"]
        best = [max(layer[i] for layer in r2) for i in lags]
        lines.append(f"| {m} | " + " | ".join(f"{b:.2f}" for b in best[:6]) + " |")
    lines += ["", f"Probe R² of the whole sum, per layer (0 = embedding), at {p0}: "
              + "; ".join(f"{m} " + " / ".join(f"{x:.2f}" for x in results[p0][m]["probe_sum_r2"])
                          for m in first)]
    heatmaps({m: results[p0][m]["probe_r2"] for m in first}, run.path("probe_r2.png"),
             title=f"ridge probe R² ({p0})", xlabel="lag", ylabel="layer (0 = embedding)")
    curves = {f"{m} p={p:g}": tuple(zip(*results[f"p={p:g}"][m]["curve"], strict=True)) for p in cfg.p_values
              for m in modes_at(cfg, p) if results[f"p={p:g}"][m]["curve"]}
    for p in cfg.p_values:  # the COPY level as a flat line across the steps
        level = results[f"p={p:g}"]["copy_level"]
        curves[f"copy p={p:g}"] = ((0, cfg.train.steps), (level, level))
    line_plot(curves, run.path("loss_curves.png"), title="training loss / p (copy level flat)", xlabel="step",
              ylabel="Huber / p")
    lines += ["", "![probe R²](probe_r2.png)", "", "![loss curves](loss_curves.png)", ""]
    atomic_write_text(run.path("report.md"), "\n".join(lines))
    print("\n".join(lines[:8 + len(cfg.p_values)]))

