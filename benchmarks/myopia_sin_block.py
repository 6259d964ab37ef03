"""Benchmark: can one GPT block learn sin(10·x) from a linear embedding of x, with GELU vs ReLU?

The synthetic pre-caching task needs the first MLP to compute sin(10·x_n). This isolates that step: our GPT with
one layer on sequences of length 1 (attention only sees the position itself), inputs (x, 1) through the linear
embedding, target sin(10·x) at the same position, MSE, AdamW, 4,096 fresh samples per step. Predicting zero
scores 0.5. Results go to ``benchmarks/results/myopia_sin_block.json``.

    python benchmarks/myopia_sin_block.py [--steps 1000] [--lr 1e-3]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from forethought.core.io import atomic_write_json
from forethought.models.gpt import GPT, GPTConfig

ROOT = Path(__file__).resolve().parents[1]

OUT = ROOT / "benchmarks" / "results" / "myopia_sin_block.json"


def fit(activation: str, steps: int, lr: float, batch: int, seed: int) -> list[tuple[int, float]]:
    """Train one block on sin(10x); returns [(step, mean MSE over the last 100 steps)]."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(n_positions=1, n_embd=128, n_layer=1, n_head=2, input_dim=2, output_dim=1,
                          activation=activation))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, betas=(0.9, 0.95))
    g = torch.Generator().manual_seed(seed)
    curve, window = [], []
    for step in range(1, steps + 1):
        for group in opt.param_groups:
            group["lr"] = lr * min(1.0, step / 100)  # short linear warm-up
        x = torch.randn(batch, 1, generator=g)  # (B, T=1)
        out = model(torch.stack([x, torch.ones_like(x)], dim=-1)).squeeze(-1)  # (B, 1)
        loss = F.mse_loss(out, torch.sin(10 * x))
        opt.zero_grad()
        loss.backward()
        opt.step()
        window.append(loss.item())
        if step % 100 == 0:
            curve.append((step, sum(window) / len(window)))
            window = []
    return curve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t0 = time.time()
    res: dict = {"command": " ".join(["python", *sys.argv]),
                 "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                             "torch_threads": torch.get_num_threads()},
                 "setup": "our GPT, 1 layer, d 128, 2 heads, length-1 sequences, target sin(10x), MSE "
                          "(predict zero = 0.5)", "steps": args.steps, "lr": args.lr, "batch": args.batch}
    for act in ("relu", "gelu_new"):
        curve = fit(act, args.steps, args.lr, args.batch, args.seed)
        res[act] = {"final_mse": curve[-1][1], "curve": curve}
        print(f"{act}: " + " ".join(f"{s}:{m:.4f}" for s, m in curve), flush=True)
    res["wall_s"] = time.time() - t0
    atomic_write_json(OUT, res)


if __name__ == "__main__":
    main()
