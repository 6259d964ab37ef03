"""Why the synthetic task does not learn with GPT-2's init or a final LayerNorm: one change at a time.

Trains the vanilla model of ``configs/myopia/synthetic_small.yaml`` at p = 1 under each of the four
combinations of ``model.init`` (gpt2 | torch) and ``model.final_norm`` (true | false) — same seed, data, budget
and optimiser — and every ``--every`` steps measures, on fixed held-out data:

- the normalised loss (predict-zero ≈ 1.25);
- the gradient reaching the first block's MLP input weights (``h.0.mlp.c_fc.weight``) over ``--grad-batches``
  fixed batches: the norm of their mean (signal) and the spread of the per-batch gradients around it (noise) —
  AdamW divides out the gradient's scale, so what decides progress is this signal-to-noise ratio;
- what the head reads: the share of the head input's RMS that the blocks wrote (``rms(h_L − h_0) / rms(h_L)``,
  h_0 = input + position embeddings), before the final norm;
- a ridge probe's R² for sin(10·x_n) from the first block's output (lag 0: the feature the later positions
  need, pre-computed at n).

Writes ``benchmarks/results/myopia_synthetic_why.json`` and ``myopia_synthetic_why.png``.

    python benchmarks/myopia_synthetic_why.py [--steps 1000] [--every 125] [--jobs 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results"
SETTINGS = [("gpt2", True), ("gpt2", False), ("torch", True), ("torch", False)]


def _name(init: str, final_norm: bool) -> str:
    return f"init={init},final_norm={str(final_norm).lower()}"


def diagnose(model, task, grad_batches: list[dict], probe_data: dict) -> dict[str, float]:
    """The measurements listed in the module docstring, at the model's current weights."""
    import torch
    import torch.nn.functional as F

    from forethought.myopia.probe import fit_ridge
    from forethought.myopia.synthetic import normalised_loss

    loss = normalised_loss(model, task, 1.0, 1024, seed=11)[0]
    model.train()
    w = model.h[0].mlp.c_fc.weight
    grads = []
    for b in grad_batches:
        out = model(b["inputs"]).squeeze(-1)
        (g,) = torch.autograd.grad(F.huber_loss(out, b["targets"], delta=1.0), w)
        grads.append(g.flatten().double())
    G = torch.stack(grads)  # (K, params)
    mean = G.mean(0)
    noise = (G - mean).pow(2).sum(1).mean().sqrt()  # RMS distance of one batch's gradient from the mean
    with torch.no_grad():
        _, hidden = model(probe_data["inputs"], output_hidden_states=True)
        h0, h1, hl = hidden[0], hidden[1], hidden[-1]  # (B, T, C)
        block_share = ((hl - h0).pow(2).mean().sqrt() / hl.pow(2).mean().sqrt()).item()
        n = h1.shape[0] // 2
        X, y = h1.double(), torch.sin(task.frequency * probe_data["x"]).double()  # (B, T, C), (B, T)
        W, b0 = fit_ridge(X[:n].reshape(-1, X.shape[-1]), y[:n].reshape(-1, 1), 1e-2)
        pred = X[n:].reshape(-1, X.shape[-1]) @ W + b0
        target = y[n:].reshape(-1, 1)
        r2 = 1 - ((pred - target) ** 2).sum().item() / ((target - target.mean()) ** 2).sum().item()
    return {"normalised_loss": loss, "grad_signal": mean.norm().item(), "grad_noise": noise.item(),
            "grad_snr": (mean.norm() / noise).item(), "block_share": block_share, "probe_r2_lag0_layer1": r2}


def one_setting(init: str, final_norm: bool, steps: int, every: int, grad_batches: int, seed: int) -> dict:
    """Train one setting in this (single-threaded) process with the package's trainer and diagnostics."""
    import torch

    torch.set_num_threads(1)
    from forethought.cli import resolve_config_path
    from forethought.core.config import load_config
    from forethought.core.run import Run
    from forethought.core.runtime import compute_init, step_generator
    from forethought.core.trainer import TrainHooks, train
    from forethought.models.gpt import GPT
    from forethought.myopia.synthetic import SyntheticConfig, huber_loss, sample_task

    cfg = load_config(SyntheticConfig, resolve_config_path("myopia", "synthetic", "small"),
                      [f"--train.steps={steps}", f"--train.eval_every={every}", f"--run.seed={seed}"])
    cfg.model = dataclasses.replace(cfg.model, init=init, final_norm=final_norm)
    rt = compute_init("cpu", seed)
    torch.manual_seed(seed)
    model = GPT(cfg.model)
    fixed = [sample_task(cfg.task, 1.0, cfg.train.batch_size, step_generator(seed, i, salt=100))
             for i in range(grad_batches)]
    probe_data = sample_task(cfg.task, 1.0, 256, step_generator(seed, 0, salt=200))
    rows = [{"step": 0, **diagnose(model, cfg.task, fixed, probe_data)}]

    def batch_fn(step: int) -> dict:
        return sample_task(cfg.task, 1.0, cfg.train.batch_size, step_generator(seed, step))

    def eval_fn(m, step: int) -> dict[str, float]:
        rows.append({"step": step, **diagnose(m, cfg.task, fixed, probe_data)})
        return {"normalised_loss": rows[-1]["normalised_loss"]}

    t0 = time.perf_counter()
    run = Run.create(ROOT / "runs" / "bench-myopia-synthetic-why", _name(init, final_norm))
    out = train(model, huber_loss, batch_fn, cfg.train, run, rt, resume=None, desc=_name(init, final_norm),
                hooks=TrainHooks(eval_fn=eval_fn))
    return {"rows": rows, "train_wall_s": out["wall_s"], "wall_s": time.perf_counter() - t0,
            "model": dataclasses.asdict(cfg.model), "train": dataclasses.asdict(cfg.train)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--every", type=int, default=125)
    ap.add_argument("--grad-batches", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2, help="settings trained at once, one thread each")
    ap.add_argument("--out", default=str(OUT / "myopia_synthetic_why.json"))
    args = ap.parse_args()
    os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    import shutil

    shutil.rmtree(ROOT / "runs" / "bench-myopia-synthetic-why", ignore_errors=True)  # minutes: rerun whole
    t0 = time.time()
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = {_name(i, f): pool.submit(one_setting, i, f, args.steps, args.every, args.grad_batches, args.seed)
                   for i, f in SETTINGS}
        settings = {k: fut.result() for k, fut in futures.items()}
    res = {"command": " ".join(["python", *sys.argv]), "wall_s": time.time() - t0,
           "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "threads_per_run": 1,
                       "parallel_runs": args.jobs},
           "what": __doc__.split("\n\n")[1], "seed": args.seed, "settings": settings}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    _plot(res, out.with_suffix(".png"))
    for k, v in settings.items():
        last = v["rows"][-1]
        print(k, {m: round(x, 4) for m, x in last.items()})


def _plot(res: dict, path: Path) -> None:
    from forethought.core.plots import pyplot, save_figure

    plt = pyplot()
    metrics = ["normalised_loss", "grad_snr", "block_share", "probe_r2_lag0_layer1"]
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.4))
    for ax, m in zip(axes, metrics):
        for name, v in res["settings"].items():
            ax.plot([r["step"] for r in v["rows"]], [r[m] for r in v["rows"]], label=name, marker=".")
        ax.set_title(m)
        ax.set_xlabel("step")
    axes[0].legend(fontsize=7)
    save_figure(fig, path)


if __name__ == "__main__":
    main()
