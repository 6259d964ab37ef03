"""GPU-hours of the PredGen paper presets: an estimate scaled from one CPU measurement, not measured on a GPU.

    python -m forethought.predgen.paper_cost [--cpu_step_s 12.2] [--out FILE.json]

The measurement (docs/predgen.md, "The paper presets"): one PredGen training step of SmolLM2-135M + LoRA r 16,
batch 16, OpenBookQA with text answers took ``cpu_step_s`` CPU-seconds on one thread, and a 576 × 576 by
576 × 4,096 fp32 matmul ran at ``CPU_FLOPS`` per CPU-second, so the step is worth at most
``cpu_step_s × CPU_FLOPS`` FLOP. A preset's step scales that by the base's parameters over SmolLM2's, by its batch
over 16 and by 4/3 with activation checkpointing (one more forward pass), and runs at ``GPU_FLOPS`` (an assumed
40 % of one H100's dense bf16 peak). It assumes the measured run's tokens per row (short prompts); evaluation is
not counted. Pass a new measurement with ``--cpu_step_s``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from forethought.core.config import load_config
from forethought.core.io import atomic_write_json
from forethought.predgen.config import PredGenConfig

CPU_STEP_S = 12.2  # CPU-seconds per PredGen step, SmolLM2-135M + LoRA r 16, batch 16 (measured, one thread)
CPU_FLOPS = 98e9  # fp32 matmul FLOP per CPU-second on the machine that measured CPU_STEP_S
CPU_PARAMS = 1.35e8  # SmolLM2-135M
CPU_BATCH = 16
GPU_FLOPS = 0.4 * 989e12  # assumed sustained bf16 rate of one H100
# published parameter counts of the paper's bases
BASE_PARAMS = {"meta-llama/Llama-2-7b-hf": 6.74e9, "meta-llama/Llama-2-13b-hf": 13.02e9,
               "meta-llama/Meta-Llama-3-8B": 8.03e9}
GRID_RUNS_PER_TASK = 9  # 3 methods × 3 seeds, every method counted at PredGen's step cost
PRESETS = Path(__file__).resolve().parents[1] / "configs" / "predgen"  # package data: train_paper_<task>.yaml


def step_seconds(params: float, batch: int, checkpointing: bool, cpu_step_s: float = CPU_STEP_S) -> float:
    """Estimated GPU seconds of one training step of a base with ``params`` parameters at ``batch`` rows."""
    flop = cpu_step_s * CPU_FLOPS * (params / CPU_PARAMS) * (batch / CPU_BATCH) * (4 / 3 if checkpointing else 1)
    return flop / GPU_FLOPS


def preset_hours(cfg: PredGenConfig, base: str | None = None, cpu_step_s: float = CPU_STEP_S) -> float:
    """Estimated H100-hours of one run of a paper preset (on ``base``, default the preset's)."""
    params = BASE_PARAMS[base or cfg.base]
    t = cfg.train
    return t.steps * step_seconds(params, t.batch_size, t.activation_checkpointing, cpu_step_s) / 3600


def estimate(cpu_step_s: float = CPU_STEP_S) -> dict[str, Any]:
    """Per task: steps, batch and hours per run on Llama-2-7B; per base: the grid's total."""
    tasks = {}
    for path in sorted(PRESETS.glob("train_paper_*.yaml")):
        cfg = load_config(PredGenConfig, path)
        tasks[cfg.task.name] = {"steps": cfg.train.steps, "batch": cfg.train.batch_size,
                                "hours_per_run": {b: preset_hours(cfg, b, cpu_step_s) for b in BASE_PARAMS}}
    grid = {b: GRID_RUNS_PER_TASK * sum(t["hours_per_run"][b] for t in tasks.values()) for b in BASE_PARAMS}
    return {"cpu_step_s": cpu_step_s, "cpu_flops": CPU_FLOPS, "gpu_flops": GPU_FLOPS, "base_params": BASE_PARAMS,
            "tasks": tasks, "grid_hours": grid,
            "note": "an estimate scaled from one CPU measurement, not measured on a GPU; evaluation not counted"}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m forethought.predgen.paper_cost", description=__doc__.split("\n")[0])
    ap.add_argument("--cpu_step_s", type=float, default=CPU_STEP_S, help="CPU-seconds of the measured step")
    ap.add_argument("--out", default="", help="also write the estimate as JSON here")
    args = ap.parse_args(argv)
    if not args.cpu_step_s > 0:
        ap.error(f"--cpu_step_s must be a positive number of seconds, got {args.cpu_step_s}")
    est = estimate(args.cpu_step_s)
    for task, t in est["tasks"].items():
        hours = ", ".join(f"{b.split('/')[-1]} {h:.2f}" for b, h in t["hours_per_run"].items())
        print(f"{task:>14}: {t['steps']:>5} steps × {t['batch']:>2} rows; H100-hours per run: {hours}")
    print("grid (14 tasks × 3 methods × 3 seeds): "
          + ", ".join(f"{b.split('/')[-1]} {h:.0f}" for b, h in est["grid_hours"].items()) + " H100-hours")
    if args.out:
        atomic_write_json(Path(args.out), est)


if __name__ == "__main__":
    main()
