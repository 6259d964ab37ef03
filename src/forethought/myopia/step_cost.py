"""``forethought myopia step-cost``: the wall time of one training step (zero_grad, forward, loss, backward, AdamW),
myopic against vanilla.

For each model asked for (our GPT; an HF Llama, SmolLM2-135M by default; a random-init GPT-NeoX of Pythia-14M's
shapes) it builds a vanilla model and a myopic copy with the same weights (``make_myopic(..., mode=
"detach_hidden")``, the one-pass form), each with its own AdamW, and times training steps on the same random-token
batch (next-token cross-entropy). For the GPT it also times the explicit O(T²) form (``implementation=
"reference"``). Steps are interleaved (vanilla, myopic[, reference], then the reverse order, ...) so background
load on a shared machine hits every variant alike. The ratio is the median myopic step time over the median
vanilla one. The naive exact alternative, one backward pass per position with every other position detached,
costs about seq_len vanilla steps; results.json records that estimate beside the measurements.
"""

from __future__ import annotations

import contextlib
import copy
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from forethought.core.env import run_models
from forethought.core.run import Run
from forethought.core.runtime import pick_device
from forethought.models.gpt import GPT
from forethought.myopia.config import StepCostConfig
from forethought.myopia.init_model import SHAPES
from forethought.myopia.lm import logits_of
from forethought.myopia.wrap import make_myopic

__all__ = ["StepCostConfig", "run"]

# SmolLM2-135M(-Instruct)'s config.json: what hf_model smollm2-shape builds with random weights
SMOLLM2_135M_SHAPE = {"vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
                      "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
                      "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
                      "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"},
                      "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}
TINY_LLAMA = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 170, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
              "tie_word_embeddings": False}
# Pythia-14M: its config.json (init_model.SHAPES) with Pythia's own vocabulary; "tiny": 2 layers of width 64
PYTHIA_SHAPES = {"pythia-14m": {**SHAPES["pythia-14m"], "vocab_size": 50304, "bos_token_id": 0, "eos_token_id": 0},
                 "tiny": {**SHAPES["pythia-14m"], "vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2,
                          "intermediate_size": 256, "max_position_embeddings": 512}}
PYTHIA_NAMES = {"pythia-14m": "random init with Pythia-14M's shapes (GPT-NeoX)",
                "tiny": "random init GPT-NeoX, 2 layers of width 64 (pythia_shape tiny)"}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """bf16 autocast of the forward pass and the loss (fp32 weights), or nothing for fp32."""
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def seeded(build: Callable[[], nn.Module], seed: int) -> nn.Module:
    """``build()`` with its weights drawn from ``seed`` alone (the caller's random stream is left as it was)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def random_batch(batch: int, seq_len: int, vocab: int, seed: int, device: torch.device) -> torch.Tensor:
    """(batch, seq_len) uniformly random token ids, from ``seed`` alone."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, seq_len), generator=g).to(device)


class Variant:
    """One model with its own AdamW; :meth:`step` runs one training step on ``batch`` and records its phases."""

    def __init__(self, name: str, model: nn.Module, batch: torch.Tensor, lr: float, device: torch.device,
                 precision: str = "fp32"):
        self.name, self.model, self.batch, self.device, self.precision = name, model, batch, device, precision
        self.opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
        self.times: list[float] = []
        self.phases: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer": []}
        self.losses: list[float] = []

    def step(self, record: bool) -> None:
        x = self.batch  # (B, T)
        _sync(self.device)
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        with autocast(self.device, self.precision):
            logits = logits_of(self.model, x)  # (B, T, V)
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), x[:, 1:].reshape(-1))
        _sync(self.device)
        t1 = time.perf_counter()
        loss.backward()
        _sync(self.device)
        t2 = time.perf_counter()
        self.opt.step()
        _sync(self.device)
        t3 = time.perf_counter()
        self.losses.append(loss.item())
        if record:
            self.times.append(t3 - t0)
            for k, dt in zip(("forward", "backward", "optimizer"), (t1 - t0, t2 - t1, t3 - t2), strict=True):
                self.phases[k].append(dt)

    def median(self) -> float:
        return statistics.median(self.times)

    def fwd_bwd_median(self) -> float:
        """Median over steps of forward + backward (without the optimizer step, which is the same for all)."""
        return statistics.median(f + b for f, b in zip(self.phases["forward"], self.phases["backward"], strict=True))


def run_interleaved(variants: list[Variant], warmup: int, steps: int) -> None:
    """warmup + steps rounds, each one step of every variant; the order is reversed every other round."""
    for r in range(warmup + steps):
        for v in variants if r % 2 == 0 else variants[::-1]:
            v.step(record=r >= warmup)


@contextlib.contextmanager
def count_attention_paths() -> Iterator[dict[str, int]]:
    """Count the calls of the one-pass myopic attention and of the explicit O(T²) form while the block runs
    (which form make_myopic's layers dispatch to)."""
    import forethought.myopia.wrap as wrap

    counts = {"fast": 0, "reference": 0}
    fast, ref = wrap.myopic_attention, wrap.reference_myopic_attention

    def fast_counted(*a: Any, **k: Any) -> Any:
        counts["fast"] += 1
        return fast(*a, **k)

    def ref_counted(*a: Any, **k: Any) -> Any:
        counts["reference"] += 1
        return ref(*a, **k)

    wrap.myopic_attention, wrap.reference_myopic_attention = fast_counted, ref_counted
    try:
        yield counts
    finally:
        wrap.myopic_attention, wrap.reference_myopic_attention = fast, ref


def attention_paths(v: Variant) -> dict[str, int]:
    with torch.no_grad(), count_attention_paths() as counts:
        logits_of(v.model, v.batch[:1])
    return dict(counts)


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # tied weights count once


def summarise(variants: list[Variant]) -> dict[str, Any]:
    """Each variant's medians, raw step times, first loss and ratio to the first (vanilla) variant."""
    base = variants[0].median()
    return {v.name: {"median_s": v.median(), "min_s": min(v.times), "mean_s": statistics.fmean(v.times),
                     "phase_median_s": {k: statistics.median(t) for k, t in v.phases.items()},
                     "fwd_bwd_median_s": v.fwd_bwd_median(), "step_times_s": v.times,
                     "first_step_loss": v.losses[0], "ratio_to_vanilla": v.median() / base}
            for v in variants}


def time_model(cfg: StepCostConfig, device: torch.device, vanilla: nn.Module, batch_size: int, seq_len: int,
               config: dict[str, Any], reference: bool = False) -> dict[str, Any]:
    """Time vanilla against its myopic copy (and the explicit form when ``reference``): one model's entry."""
    vanilla = vanilla.to(device=device, dtype=torch.float32).train()
    vanilla.requires_grad_(True)  # full fine-tuning
    batch = random_batch(batch_size, seq_len, config["vocab_size"], cfg.run.seed, device)
    variants = [Variant("vanilla", vanilla, batch, cfg.lr, device, cfg.run.precision),
                Variant("myopic", make_myopic(copy.deepcopy(vanilla), mode="detach_hidden"), batch, cfg.lr, device,
                        cfg.run.precision)]
    if reference:
        explicit = make_myopic(copy.deepcopy(vanilla), mode="detach_hidden", implementation="reference")
        variants.append(Variant("reference", explicit, batch, cfg.lr, device, cfg.run.precision))
    paths = {v.name: attention_paths(v) for v in variants[1:]}
    run_interleaved(variants, cfg.warmup, cfg.steps)
    base, my = variants[0], variants[1]
    out = {"ratio": my.median() / base.median(), "vanilla_median_s": base.median(), "myopic_median_s": my.median(),
           "fwd_bwd_ratio": my.fwd_bwd_median() / base.fwd_bwd_median(), "steps": cfg.steps,
           "warmup_steps": cfg.warmup, "batch_size": batch_size, "seq_len": seq_len, "params": n_params(vanilla),
           "config": {**config, "precision": cfg.run.precision, "trainable": "all parameters"},
           "optimizer": {"name": "AdamW", "lr": cfg.lr},
           "loss": "next-token cross-entropy on uniformly random token ids",
           "myopia": {"mode": "detach_hidden", "implementation": "fast"}, "attention_calls_per_forward": paths,
           "naive_step_estimate_s": seq_len * base.median(), "variants": summarise(variants)}
    if reference:
        out["reference_median_s"] = variants[2].median()
        out["reference_ratio"] = variants[2].median() / base.median()
    return out


def _hf_config(model: nn.Module, name: str) -> dict[str, Any]:
    c = model.config
    return {"model": name, "model_type": c.model_type, "hidden_size": c.hidden_size,
            "num_hidden_layers": c.num_hidden_layers, "num_attention_heads": c.num_attention_heads,
            "num_key_value_heads": getattr(c, "num_key_value_heads", None),
            "intermediate_size": getattr(c, "intermediate_size", None), "vocab_size": c.vocab_size,
            "tie_word_embeddings": getattr(c, "tie_word_embeddings", None),
            "attn_implementation": getattr(c, "_attn_implementation", None), "dtype": "float32"}


def build_gpt(cfg: StepCostConfig) -> tuple[nn.Module, dict[str, Any]]:
    model = seeded(lambda: GPT(cfg.gpt), cfg.run.seed)
    return model, {"model": "our GPT (random init)", **model.config_dict()}


def build_llama(cfg: StepCostConfig) -> tuple[nn.Module, dict[str, Any]]:
    """The HF Llama: random init for the shapes hf_model names, else the weights it names (fp32)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    if cfg.hf_model in ("smollm2-shape", "tiny-llama"):
        shape = SMOLLM2_135M_SHAPE if cfg.hf_model == "smollm2-shape" else TINY_LLAMA
        model = seeded(lambda: LlamaForCausalLM(LlamaConfig(**shape)), cfg.run.seed)
        name = ("random init with SmolLM2-135M's shapes (smollm2-shape)" if cfg.hf_model == "smollm2-shape"
                else "random init Llama, 2 layers of width 64 (tiny-llama)")
    else:
        from forethought.models.hf import load_causal_lm

        model, _ = load_causal_lm(cfg.hf_model, dtype=torch.float32)
        name = cfg.hf_model
    return model, _hf_config(model, name)


def build_pythia(cfg: StepCostConfig) -> tuple[nn.Module, dict[str, Any]]:
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    model = seeded(lambda: GPTNeoXForCausalLM(GPTNeoXConfig(**PYTHIA_SHAPES[cfg.pythia_shape])), cfg.run.seed)
    return model, _hf_config(model, PYTHIA_NAMES[cfg.pythia_shape])


def _line(name: str, r: dict[str, Any]) -> str:
    s = (f"{name}: vanilla {r['vanilla_median_s'] * 1e3:.1f} ms  myopic {r['myopic_median_s'] * 1e3:.1f} ms  "
         f"ratio {r['ratio']:.3f}")
    if "reference_ratio" in r:
        s += f"  reference {r['reference_median_s'] * 1e3:.1f} ms (ratio {r['reference_ratio']:.3f})"
    return (s + f"  fwd+bwd ratio {r['fwd_bwd_ratio']:.3f}  [{r['steps']} steps, B={r['batch_size']}, "
            f"T={r['seq_len']}, {r['params'] / 1e6:.2f}M params]")


@run_models()  # env.json names the models this run loads, not an earlier run's
def run(cfg: StepCostConfig, resume: str | None = None) -> dict[str, Any]:
    device = pick_device(cfg.run.device, "--run.device")  # a missing accelerator fails before any model builds
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    out = Run.create(cfg.run.out_dir, cfg.run.name, cfg).start()
    builds = {"gpt": (build_gpt, cfg.gpt_batch, cfg.gpt_seq_len, cfg.reference),
              "smollm2": (build_llama, cfg.hf_batch, cfg.hf_seq_len, False),
              "pythia": (build_pythia, cfg.pythia_batch, cfg.pythia_seq_len, False)}
    measured: dict[str, Any] = {}
    for name in cfg.models:
        build, batch, seq_len, reference = builds[name]
        model, config = build(cfg)
        measured[name] = time_model(cfg, device, model, batch, seq_len, config, reference)
        print(_line(name, measured[name]), flush=True)
    results = {
        "device": str(device), "precision": cfg.run.precision, "torch_threads": torch.get_num_threads(),
        "interleaving": "one step per variant per round (vanilla, myopic[, reference]), order reversed every other "
                        "round; same batch for every variant; each variant has its own AdamW",
        "ratio_definition": "median myopic step time / median vanilla step time (step = zero_grad + forward + loss "
                            "+ backward + AdamW step)",
        "naive_estimate": {
            "explanation": "The naive exact alternative computes each position's loss gradient with a separate "
                           "backward pass (every other position's state detached), i.e. one backward per "
                           "position: about L = seq_len times the vanilla step cost, versus the measured ratio of "
                           "the one-pass form.",
            **{k: {"factor_vs_vanilla": r["seq_len"], "estimated_step_s": r["naive_step_estimate_s"]}
               for k, r in measured.items()}},
        **measured}
    out.write_results(results)
    return results
