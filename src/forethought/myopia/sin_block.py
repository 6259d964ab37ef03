"""``forethought myopia sin-block``: can one GPT block learn sin(10·x) from a linear embedding of x?

The synthetic pre-caching task needs the first MLP to compute sin(10·x_n). This isolates that step: our GPT with
one layer on sequences of length 1 (attention only sees the position itself), inputs (x, 1) through the linear
embedding, target sin(10·x) at the same position, MSE, fresh x ~ N(0, 1) every step. Predicting zero scores
E[sin²(10·x)] ≈ 0.5. One run per setting (``--model.activation relu`` against ``gelu_new`` is the comparison):
the held-out MSE every ``--train.eval_every`` steps and at the end.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from forethought.core.run import Run
from forethought.core.runtime import runtime_for, step_generator
from forethought.core.trainer import TrainHooks, to_device, train
from forethought.models.gpt import GPT
from forethought.myopia.config import SinBlockConfig  # its home imports no torch; importable from here too


def sample(n: int, frequency: float, g: torch.Generator) -> dict[str, torch.Tensor]:
    """inputs (n, 1, 2) = (x, 1); targets (n, 1) = sin(frequency·x)."""
    x = torch.randn(n, 1, generator=g)  # (n, T=1)
    return {"inputs": torch.stack([x, torch.ones_like(x)], dim=-1), "targets": torch.sin(frequency * x)}


def mse_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
    return F.mse_loss(model(batch["inputs"]).squeeze(-1), batch["targets"]), {}


def run(cfg: SinBlockConfig, resume: str | None = None) -> dict:
    rt = runtime_for(cfg.run)
    torch.manual_seed(cfg.run.seed)
    model = GPT(cfg.model)
    held_out = sample(cfg.eval_samples, cfg.frequency, step_generator(cfg.run.seed, 0, salt=5))  # never trained on

    def batch_fn(step: int) -> dict[str, torch.Tensor]:
        return sample(cfg.train.batch_size, cfg.frequency, step_generator(cfg.run.seed, step))

    @torch.no_grad()
    def eval_fn(m: torch.nn.Module, step: int) -> dict[str, float]:
        m.eval()
        return {"mse": mse_loss(m, to_device(held_out, rt.device))[0].item()}

    out = Run.create(cfg.run.out_dir, cfg.run.name, cfg, is_main=rt.is_main)
    trained = train(model, mse_loss, batch_fn, cfg.train, out, rt, resume=resume, desc=cfg.model.activation,
                    hooks=TrainHooks(eval_fn=eval_fn), model_config=model.checkpoint_record())
    curve = [[int(e["step"]), e["mse"]] for e in trained.get("eval_curve", [])]
    results = {"activation": cfg.model.activation, "final_mse": curve[-1][1],
               "predict_zero_mse": held_out["targets"].pow(2).mean().item(), "curve": curve,
               "train_curve": [[s, loss] for s, loss in trained["curve"]], "steps": cfg.train.steps,
               "batch_size": cfg.train.batch_size, "lr": cfg.train.lr, "eval_samples": cfg.eval_samples,
               "params": sum(p.numel() for p in model.parameters()), "train_wall_s": trained["wall_s"]}
    if rt.is_main:
        out.write_results(results)
        print(f"{cfg.model.activation}: held-out MSE " + " ".join(f"{s}:{m:.4f}" for s, m in curve)
              + f" (predict zero {results['predict_zero_mse']:.4f})")
    return results
