"""``forethought myopia synthetic-why``: why a setting of the synthetic task's model does or does not learn.

Trains the vanilla model of the synthetic task at p = 1 (``myopia synthetic``'s model, data stream and optimiser:
the same seed trains the same model) and, before training and every ``--train.eval_every`` steps, measures on
fixed held-out data:

- the normalised loss (predict-zero ≈ 1.26);
- the gradient reaching the first block's MLP input weights (``h.0.mlp.c_fc.weight``) on ``--grad_batches`` fixed
  batches: the norm of their mean (signal) and the RMS distance of one batch's gradient from that mean (noise).
  AdamW divides out the gradient's scale, so what decides progress is their ratio (``grad_snr``);
- what the head reads: the share of the head input's RMS that the blocks wrote, ``rms(h_L − h_0) / rms(h_L)``
  (h_0 = input + position embeddings; before any final norm);
- a ridge probe's R² for sin(10·x_n) from the first block's output (lag 0: the feature later positions need,
  computed at n).

One run is one setting (e.g. ``--model.init gpt2 --model.final_norm true``); a spec crosses them.
"""

from __future__ import annotations

import torch

from forethought.core.run import Run
from forethought.core.runtime import mix_seed, runtime_for, step_generator
from forethought.core.trainer import TrainHooks, to_device, train
from forethought.models.gpt import GPT
from forethought.myopia.config import ProbeSettings, SyntheticWhyConfig  # torch-free home; importable from here
from forethought.myopia.gradients import mean_gradient
from forethought.myopia.synthetic import huber_loss, normalised_loss, predict_zero_loss, probes, sample_task

WEIGHT = "h.0.mlp.c_fc.weight"  # the first MLP's input weights: where sin(10·x) must start


def gradient_snr(model: torch.nn.Module, batches: list[dict[str, torch.Tensor]]) -> dict[str, float]:
    """Signal (norm of the mean gradient of :data:`WEIGHT` over ``batches``), noise (RMS distance of one batch's
    gradient from that mean) and their ratio (``batches``: at least two)."""
    G = torch.stack([mean_gradient(model, huber_loss, [b], [WEIGHT])[WEIGHT].flatten() for b in batches])  # (K, P)
    mean = G.mean(0)
    signal = mean.norm()
    noise = (G - mean).pow(2).sum(1).mean().sqrt()
    return {"grad_signal": signal.item(), "grad_noise": noise.item(), "grad_snr": (signal / noise).item()}


@torch.no_grad()
def block_share(model: GPT, inputs: torch.Tensor) -> float:
    """rms(h_L − h_0) / rms(h_L): how much of what the head reads the blocks wrote."""
    _, hidden = model(inputs, output_hidden_states=True)
    h0, hl = hidden[0], hidden[-1]  # (B, T, C) each
    return ((hl - h0).pow(2).mean().sqrt() / hl.pow(2).mean().sqrt()).item()


def diagnose(model: GPT, cfg: SyntheticWhyConfig, batches: list[dict[str, torch.Tensor]],
             probe_inputs: torch.Tensor) -> dict[str, float]:
    """The measurements listed in the module docstring, at the model's current weights (left in eval mode)."""
    seed = cfg.run.seed
    loss = normalised_loss(model, cfg.task, 1.0, cfg.eval_sequences, mix_seed("synthetic-why-eval", seed))[0]
    half = cfg.probe_sequences // 2
    settings = ProbeSettings(max_lag=0, train_sequences=half, test_sequences=cfg.probe_sequences - half,
                             ridge=cfg.ridge)
    r2 = probes(model, cfg.task, settings, mix_seed("synthetic-why-probe", seed), p=1.0)[0]  # [layer][lag]
    return {"normalised_loss": loss, **gradient_snr(model, batches), "block_share": block_share(model, probe_inputs),
            "probe_r2_lag0_layer1": r2[1][0]}


def run(cfg: SyntheticWhyConfig, resume: str | None = None) -> dict:
    rt = runtime_for(cfg.run)
    seed = cfg.run.seed
    torch.manual_seed(seed)
    model = GPT(cfg.model)
    # fixed data, drawn apart from the training stream (salted)
    fixed = [to_device(sample_task(cfg.task, 1.0, cfg.train.batch_size, step_generator(seed, i, salt=100)), rt.device)
             for i in range(cfg.grad_batches)]
    probe_inputs = sample_task(cfg.task, 1.0, cfg.probe_sequences, step_generator(seed, 0, salt=200))["inputs"]

    def batch_fn(step: int) -> dict[str, torch.Tensor]:
        return sample_task(cfg.task, 1.0, cfg.train.batch_size, step_generator(seed, step))

    def eval_fn(m: torch.nn.Module, step: int) -> dict[str, float]:
        return diagnose(m, cfg, fixed, probe_inputs.to(rt.device))

    out = Run.create(cfg.run.out_dir, cfg.run.name, cfg, is_main=rt.is_main)
    start = {"step": 0, **diagnose(model.to(rt.device), cfg, fixed, probe_inputs.to(rt.device))}  # the init
    desc = f"init={cfg.model.init} final_norm={str(cfg.model.final_norm).lower()}"
    trained = train(model, huber_loss, batch_fn, cfg.train, out, rt, resume=resume, desc=desc,
                    hooks=TrainHooks(eval_fn=eval_fn), model_config=model.checkpoint_record())
    rows = [start, *trained.get("eval_curve", [])]
    last = rows[-1]
    results = {"init": cfg.model.init, "final_norm": cfg.model.final_norm,
               "predict_zero": predict_zero_loss(cfg.task, 1.0), "steps": cfg.train.steps,
               "batch_size": cfg.train.batch_size, "first": rows[0],
               "middle": min(rows, key=lambda r: abs(r["step"] - last["step"] / 2)), "last": last, "rows": rows,
               "train_curve": [[s, loss] for s, loss in trained["curve"]], "train_wall_s": trained["wall_s"]}
    if rt.is_main:
        out.write_results(results)
        print(f"{desc}: " + ", ".join(f"{k} {v:.4g}" for k, v in last.items() if k != "step")
              + f" after {last['step']} steps")
    return results
