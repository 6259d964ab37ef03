"""The PSF paper preset's training cost per stage: one step of every stage measured on this machine's CPU at
scaled-down widths, and a GPU-hours estimate per stage derived from it (an estimate, not measured on a GPU).

    OMP_NUM_THREADS=1 python -m forethought.psf.paper_cost [--reps 1] [--out FILE.json]

Every stage of ``configs/psf/recipe_paper.yaml`` (``plan_stages``: the model stages at K = 64, the prior, the
longer-blocks stages and their priors, the AR baseline) runs its training step as the recipe does (the model's
loss with the stage's switches, the self-realized rollout, the prior's data encoded from the batch, the AR loss;
backward, AdamW, the EMA update, the stage's activation checkpointing) on random tokens,
at the preset's L and K but the widths, depths, batch sizes and vocabulary of ``SCALED``. Each step's CPU time is the
process time of one thread (``time.process_time``, so other processes on the machine do not count), the median of
``--reps`` steps after one untimed step.

FLOPs per step are analytic (``forethought.eval.cost.analytic_flops``: 2·N·T + 4·n_layer·d·T·C per network
evaluation, N the matmul parameters, the tied head included): a pass with gradients costs 3 evaluations, 4 with
activation checkpointing, one without; the encoder runs over B·L tokens (C = L), the decoder over B·K branches of
K + L/K positions (C = K + L/K); a self-realized step adds the rollout (a no-gradient clean encoding, then n = L/K
KV-cached decoder steps over B·K branches) and the re-encoding of the rollout with gradients; a prior step encodes
its batch without gradients, then trains the prior over B·K states (tests/test_psf_paper.py checks these counts
against ``FlopCounterMode`` on the same step of a tiny model: within 15 %).

The estimate: ``hours = steps × F_paper × r / P / 3600``, with F_paper the analytic FLOPs per step at the preset's
shapes, ``r`` = (the stage's CPU seconds per analytic FLOP) / (the AR baseline's), i.e. how much slower than a
plain transformer's matrix arithmetic the stage runs, assumed the same on a GPU, and ``P`` = 400 TFLOP/s, an
assumed sustained bf16 rate of one H100 for a plain transformer (about 40 % of its 989 TFLOP/s dense peak).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch

from forethought.core.config import load_config
from forethought.core.memory import set_activation_checkpointing
from forethought.core.trainer import ema_update
from forethought.data.tokenizers import KNOWN_VOCAB_SIZES
from forethought.eval.cost import analytic_cached_decode, analytic_flops, matmul_params
from forethought.psf.ar import ar_loss, build_ar
from forethought.psf.build import prior_for
from forethought.psf.config import RecipeConfig, StageFeatures
from forethought.psf.model import PSFModel, realized_summaries
from forethought.psf.recipe import Stage, plan_stages, stage_features, trajectories, trajectory_dim

PRESET = Path(__file__).resolve().parents[1] / "configs" / "psf" / "recipe_paper.yaml"  # package data
GPU_FLOPS = 400e12  # assumed sustained bf16 FLOP/s of one H100 on a plain transformer (~40 % of dense peak)
# The scaled-down shapes the CPU runs (L and the K schedule stay the preset's).
SCALED = ["--model.n_embd=128", "--model.n_head=4", "--model.enc_layers=2", "--model.dec_layers=2",
          "--model.code_dim=16", "--prior.model.n_embd=128", "--prior.model.n_layer=2", "--prior.model.n_head=4",
          "--ar.model.n_embd=128", "--ar.model.n_layer=4", "--ar.model.n_head=4"]
SCALED_BATCH = {"model": 1, "prior": 4, "ar": 1}
SCALED_VOCAB = 4096  # random token ids below this (the FLOP counts use each shape's own vocabulary)


def stage_flops(cfg: RecipeConfig, stage: Stage, batch: int, model: PSFModel, prior_params: int) -> int:
    """Analytic training FLOPs of one step of ``stage`` (module docstring)."""
    m = cfg.model
    L, K = m.seq_len, stage.blocks or m.blocks
    n = L // K
    grad = 4 if stage.train.activation_checkpointing else 3
    enc = analytic_flops(matmul_params(model.encoder), batch * L, m.enc_layers, m.n_embd, L)
    if stage.kind == "ar":
        a = cfg.ar.model
        with torch.device("meta"):
            ar = build_ar(a, model.config.vocab_size, L)
        return grad * analytic_flops(matmul_params(ar), batch * L, a.n_layer, a.n_embd, L)
    if stage.kind == "prior":
        p = cfg.prior.model
        K = model.blocks
        return enc + 3 * analytic_flops(prior_params, batch * K, p.n_layer, p.n_embd, K)
    dec_params = matmul_params(model.decoder)
    dec = analytic_flops(dec_params, batch * K * (K + n), m.dec_layers, m.n_embd, K + n)
    total = grad * (enc + dec)
    if stage_features(stage.name)["self_realized"]:
        rollout = batch * K * analytic_cached_decode(dec_params, m.dec_layers, m.n_embd, K + 1, n - 1)
        total += enc + rollout + grad * enc  # clean encoding, the decode, the re-encoding with gradients
    return total


def run(reps: int) -> dict:
    paper = load_config(RecipeConfig, PRESET)
    scaled = load_config(RecipeConfig, PRESET, SCALED)
    V = KNOWN_VOCAB_SIZES[paper.data.tokenizer]
    torch.manual_seed(0)
    model = PSFModel(replace(scaled.model, vocab_size=SCALED_VOCAB))
    with torch.device("meta"):
        big = PSFModel(replace(paper.model, vocab_size=V))
    g = torch.Generator().manual_seed(0)
    rows = []
    for stage in plan_stages(scaled):
        big_stage = next(s for s in plan_stages(paper) if s.name == stage.name)
        B = SCALED_BATCH[stage.kind]
        tokens = torch.randint(0, SCALED_VOCAB, (B, scaled.model.seq_len), generator=g)
        if stage.kind == "model":
            f = stage_features(stage.name)
            feats = StageFeatures(landing=f["landing"], codes=f["codes"], blocks=stage.blocks)
            model.configure(feats)
            big.configure(feats)
            net: torch.nn.Module = model

            def loss(f: dict = f, tokens: torch.Tensor = tokens) -> torch.Tensor:
                realized = realized_summaries(model, tokens, 0.65, 0.95, g) if f["self_realized"] else None
                return model(tokens, realized=realized, mix_prob=0.5, generator=g)["loss"]
        elif stage.kind == "prior":
            pcfg = scaled.prior.model
            net = prior_for(model, pcfg, trajectory_dim(model, pcfg), model.blocks)
            model.eval()

            def loss(net: torch.nn.Module = net, tokens: torch.Tensor = tokens, pcfg=pcfg) -> torch.Tensor:
                return net.loss(trajectories(model, tokens, model.use_codes, pcfg.code_data))
        else:
            net = build_ar(scaled.ar.model, SCALED_VOCAB, scaled.model.seq_len)

            def loss(net: torch.nn.Module = net, tokens: torch.Tensor = tokens) -> torch.Tensor:
                return ar_loss(net, tokens, 1)
        net.train()
        set_activation_checkpointing(net, stage.train.activation_checkpointing)
        params = [p for p in net.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-4)
        shadow = [p.detach().clone() for p in params]
        times = []
        for i in range(reps + 1):
            t0 = time.process_time()
            opt.zero_grad(set_to_none=True)
            loss().backward()
            opt.step()
            ema_update(shadow, params, 0.9999)
            if i:  # the first step is untimed (allocation, first-call overheads)
                times.append(time.process_time() - t0)
        set_activation_checkpointing(net, False)
        with torch.device("meta"):
            big_prior = prior_for(big, paper.prior.model, trajectory_dim(big, paper.prior.model), big.blocks)
        rows.append({"stage": stage.name, "steps": big_stage.train.steps, "cpu_s_per_step": statistics.median(times),
                     "flops_scaled": stage_flops(scaled, stage, B, model,
                                                 matmul_params(net) if stage.kind == "prior" else 0),
                     "flops_paper": stage_flops(paper, big_stage, big_stage.train.batch_size, big,
                                                matmul_params(big_prior))})
        model.train()
    ar_rate = next(r for r in rows if r["stage"] == "ar")
    ar_rate = ar_rate["cpu_s_per_step"] / ar_rate["flops_scaled"]
    for r in rows:
        r["overhead"] = r["cpu_s_per_step"] / r["flops_scaled"] / ar_rate
        r["gpu_s_per_step"] = r["flops_paper"] * r["overhead"] / GPU_FLOPS
        r["gpu_hours"] = r["steps"] * r["gpu_s_per_step"] / 3600
    return {"gpu_flops_assumed": GPU_FLOPS, "scaled": SCALED, "scaled_batch": SCALED_BATCH,
            "scaled_vocab": SCALED_VOCAB, "reps": reps,
            "threads": torch.get_num_threads(), "stages": rows,
            "total_gpu_hours": sum(r["gpu_hours"] for r in rows)}


def markdown(res: dict) -> str:
    """The table docs/psf.md shows (the precision an estimate warrants)."""
    lines = ["| stage | steps | CPU ms / step (scaled) | GFLOPs / step (scaled) | overhead r | TFLOPs / step "
             "(preset) | GPU s / step (estimate) | GPU hours (estimate) |", "|---|---|---|---|---|---|---|---|"]
    for r in res["stages"]:
        lines.append(f"| `{r['stage']}` | {r['steps']:,} | {r['cpu_s_per_step'] * 1e3:.0f} "
                     f"| {r['flops_scaled'] / 1e9:.0f} | {r['overhead']:.1f} | {r['flops_paper'] / 1e12:.0f} "
                     f"| {r['gpu_s_per_step']:.2f} | {r['gpu_hours']:.1f} |")
    lines.append(f"| total | | | | | | | {res['total_gpu_hours']:.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    torch.set_num_threads(1)
    result = run(args.reps)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(markdown(result))
