"""Benchmark: wall time of one training step (forward + backward + AdamW), myopic vs vanilla.

For our GPT (GPT-2 small-ish: 6 layers, d=384, 6 heads, vocab 50257), for the real SmolLM2-135M (full
fine-tuning, float32) and for a Pythia-shaped GPT-NeoX (random init, Pythia-14M's config: parallel residual,
rotary on a quarter of each head; the paper's scaling family), it builds a vanilla model and a myopic copy with identical weights (``make_myopic(...,
mode="detach_hidden")``, the exact one-pass form), each with its own AdamW, and times training steps on the same
random-token batch (LM cross-entropy). For the GPT it also times the explicit O(T^2) form
(``implementation="reference"``). Steps are INTERLEAVED (vanilla, myopic, [reference], vanilla, ...; the order is
reversed every other round) so background load on a shared machine hits every variant alike. The ratio is the
median myopic step time over the median vanilla step time. Results go to
``benchmarks/results/myopia_step_cost.json``.

    python benchmarks/myopia_step_cost.py [--steps 20] [--warmup 3] [--threads N] [--device cpu]
    python benchmarks/myopia_step_cost.py --quick --out /tmp/x.json   # tiny models, seconds (smoke test)
    python benchmarks/myopia_step_cost.py --models smollm2 --device cuda --precision bf16 \
        --hf-batch 16 --hf-seq-len 512 --out /tmp/gpu.json               # what benchmarks/gpu_check.py runs

``--models`` picks the benchmarks (default both). ``--precision bf16`` runs the forward pass and the loss under
bf16 autocast with fp32 weights and AdamW (what ``--run.precision bf16`` does for a fully trained model).
``--hf-model smollm2-shape`` times a random-init Llama with SmolLM2-135M's shapes (its config.json: 30 layers,
d 576, 9 heads / 3 KV heads, MLP 1536, vocab 49152, tied embeddings): a step costs the same with any weights, and
it needs no model files (the GPU machine has no copy of the GGUF).

The naive exact alternative to the one-pass form (one backward pass per position, each with every other position
detached) costs about L = seq_len times a vanilla step; the JSON records that estimate next to the measurements.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("gpt", "smollm2", "pythia")
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "myopia_step_cost.json"


# ---------------------------------------------------------------- timing


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Variant:
    """One model + its own AdamW; ``step()`` runs one timed training step and records its phases."""

    def __init__(self, name: str, model: nn.Module, logits_fn: Callable[[nn.Module, torch.Tensor], torch.Tensor],
                 batch: torch.Tensor, lr: float, device: torch.device, precision: str = "fp32"):
        self.name, self.model, self.logits_fn, self.batch, self.device = name, model, logits_fn, batch, device
        self.precision = precision
        self.opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
        self.times: list[float] = []
        self.phases: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer": []}
        self.losses: list[float] = []

    def step(self, record: bool) -> None:
        x = self.batch
        _sync(self.device)
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        with autocast(self.device, self.precision):
            logits = self.logits_fn(self.model, x)  # (B, T, V)
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
            for k, dt in zip(("forward", "backward", "optimizer"), (t1 - t0, t2 - t1, t3 - t2)):
                self.phases[k].append(dt)


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """bf16 autocast of the forward pass (fp32 weights), or nothing for fp32."""
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def run_interleaved(variants: list[Variant], warmup: int, steps: int) -> None:
    """warmup + steps rounds; each round runs one step of every variant, order reversed every other round."""
    for r in range(warmup + steps):
        order = variants if r % 2 == 0 else variants[::-1]
        for v in order:
            v.step(record=r >= warmup)


@contextlib.contextmanager
def count_attention_paths() -> Iterator[dict[str, int]]:
    """Count which myopic attention form make_myopic's layers dispatch to (fast one-pass vs explicit O(T^2))."""
    import forethought.myopia.wrap as wrap

    counts = {"fast": 0, "reference": 0}
    fast, ref = wrap.myopic_attention, wrap.reference_myopic_attention

    def fast_counted(*a, **k):
        counts["fast"] += 1
        return fast(*a, **k)

    def ref_counted(*a, **k):
        counts["reference"] += 1
        return ref(*a, **k)

    wrap.myopic_attention, wrap.reference_myopic_attention = fast_counted, ref_counted
    try:
        yield counts
    finally:
        wrap.myopic_attention, wrap.reference_myopic_attention = fast, ref


def attention_paths(v: Variant) -> dict[str, int]:
    with torch.no_grad(), count_attention_paths() as counts:
        v.logits_fn(v.model, v.batch[:1])
    return dict(counts)


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def summarise(variants: list[Variant], base: Variant) -> dict:
    """Medians, ratios to ``base`` and raw step times for every variant."""
    out: dict = {}
    for v in variants:
        out[v.name] = {
            "median_s": median(v.times),
            "min_s": min(v.times),
            "mean_s": statistics.fmean(v.times),
            "phase_median_s": {k: median(t) for k, t in v.phases.items()},
            "fwd_bwd_median_s": _fwd_bwd(v),
            "step_times_s": v.times,
            "first_step_loss": v.losses[0],
            "ratio_to_vanilla": median(v.times) / median(base.times),
        }
    return out


def _fwd_bwd(v: Variant) -> float:
    """Median over steps of forward + backward time (no optimizer step)."""
    return median([f + b for f, b in zip(v.phases["forward"], v.phases["backward"])])


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # parameters() yields tied weights once


def random_batch(batch: int, seq_len: int, vocab: int, seed: int, device: torch.device) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, seq_len), generator=g).to(device)


# ---------------------------------------------------------------- the two models


def bench_gpt(args: argparse.Namespace, device: torch.device) -> dict:
    from forethought.models.gpt import GPT, GPTConfig
    from forethought.myopia.wrap import make_myopic

    cfg = GPTConfig(vocab_size=args.gpt_vocab, n_positions=max(1024, args.gpt_seq_len), n_embd=args.gpt_embd,
                    n_layer=args.gpt_layers, n_head=args.gpt_heads)
    torch.manual_seed(args.seed)
    vanilla = GPT(cfg).to(device).train()
    myopic = make_myopic(copy.deepcopy(vanilla), mode="detach_hidden")
    batch = random_batch(args.gpt_batch, args.gpt_seq_len, cfg.vocab_size, args.seed, device)

    def logits(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return m(x)

    variants = [Variant("vanilla", vanilla, logits, batch, args.lr, device, args.precision),
                Variant("myopic", myopic, logits, batch, args.lr, device, args.precision)]
    if not args.no_reference:
        reference = make_myopic(copy.deepcopy(vanilla), mode="detach_hidden", implementation="reference")
        variants.append(Variant("reference", reference, logits, batch, args.lr, device, args.precision))
    paths = {v.name: attention_paths(v) for v in variants[1:]}
    run_interleaved(variants, args.warmup, args.steps)
    res = _result(variants, args, args.gpt_batch, args.gpt_seq_len, n_params(vanilla), vanilla.config_dict(), paths)
    if not args.no_reference:
        res["reference_median_s"] = median(variants[2].times)
        res["reference_ratio"] = res["reference_median_s"] / res["vanilla_median_s"]
    return res


def bench_hf(args: argparse.Namespace, device: torch.device) -> dict:
    from forethought.models.hf import load_causal_lm
    from forethought.testing import tiny_llama

    if args.quick:
        vanilla = tiny_llama(vocab_size=256, hidden_size=64, layers=2, heads=4, kv_heads=2, seed=args.seed)
        name = "tiny_llama (random init; --quick)"
    elif args.hf_model == SHAPE_ONLY:
        vanilla = smollm2_shaped(args.seed)
        name = "random init with SmolLM2-135M's shapes (smollm2-shape)"
    else:
        vanilla, _ = load_causal_lm(args.hf_model, dtype=torch.float32)
        name = args.hf_model
    return _bench_hf_model(args, device, vanilla, name, args.hf_batch, args.hf_seq_len)


# Pythia-14M's config.json (EleutherAI/pythia-14m): GPT-NeoX, parallel residual, rotary on a quarter of each head
PYTHIA_14M_SHAPE = {"vocab_size": 50304, "hidden_size": 128, "num_hidden_layers": 6, "num_attention_heads": 4,
                    "intermediate_size": 512, "max_position_embeddings": 2048, "use_parallel_residual": True,
                    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
                    "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 0}


def bench_pythia(args: argparse.Namespace, device: torch.device) -> dict:
    """A random-init GPT-NeoX with Pythia-14M's shapes (the paper's scaling family; no model files needed)."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    from forethought.testing import tiny_gpt_neox

    if args.quick:
        vanilla = tiny_gpt_neox(vocab_size=256, hidden_size=64, layers=2, heads=4, seed=args.seed)
        name = "tiny_gpt_neox (random init; --quick)"
    else:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(args.seed)
            vanilla = GPTNeoXForCausalLM(GPTNeoXConfig(**PYTHIA_14M_SHAPE))
        name = "random init with Pythia-14M's shapes (GPT-NeoX)"
    return _bench_hf_model(args, device, vanilla, name, args.pythia_batch, args.pythia_seq_len)


def _bench_hf_model(args: argparse.Namespace, device: torch.device, vanilla: nn.Module, name: str, batch_size: int,
                    seq_len: int) -> dict:
    from forethought.myopia.wrap import make_myopic

    vanilla = vanilla.to(device=device, dtype=torch.float32).train()
    vanilla.requires_grad_(True)  # full fine-tuning
    myopic = make_myopic(copy.deepcopy(vanilla), mode="detach_hidden")
    c = vanilla.config
    batch = random_batch(batch_size, seq_len, c.vocab_size, args.seed, device)

    def logits(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return m(input_ids=x, use_cache=False).logits

    variants = [Variant("vanilla", vanilla, logits, batch, args.lr, device, args.precision),
                Variant("myopic", myopic, logits, batch, args.lr, device, args.precision)]
    paths = {"myopic": attention_paths(variants[1])}
    run_interleaved(variants, args.warmup, args.steps)
    config = {"model": name, "model_type": c.model_type, "hidden_size": c.hidden_size,
              "num_hidden_layers": c.num_hidden_layers, "num_attention_heads": c.num_attention_heads,
              "num_key_value_heads": getattr(c, "num_key_value_heads", None),
              "intermediate_size": getattr(c, "intermediate_size", None), "vocab_size": c.vocab_size,
              "tie_word_embeddings": getattr(c, "tie_word_embeddings", None),
              "attn_implementation": getattr(c, "_attn_implementation", None), "dtype": "float32",
              "precision": args.precision, "trainable": "all parameters"}
    return _result(variants, args, batch_size, seq_len, n_params(vanilla), config, paths)


SHAPE_ONLY = "smollm2-shape"
# SmolLM2-135M(-Instruct)'s config.json: what --hf-model smollm2-shape builds with random weights
SMOLLM2_135M_SHAPE = {"vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
                      "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
                      "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
                      "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"},
                      "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}


def smollm2_shaped(seed: int) -> nn.Module:
    """A random-init LlamaForCausalLM with SmolLM2-135M's shapes (no model files needed)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LlamaForCausalLM(LlamaConfig(**SMOLLM2_135M_SHAPE))


def _result(variants: list[Variant], args: argparse.Namespace, batch: int, seq_len: int, params: int,
            config: dict, paths: dict) -> dict:
    base, my = variants[0], variants[1]
    return {
        "ratio": median(my.times) / median(base.times),
        "vanilla_median_s": median(base.times),
        "myopic_median_s": median(my.times),
        "fwd_bwd_ratio": _fwd_bwd(my) / _fwd_bwd(base),  # the same ratio without the (identical) AdamW step
        "steps": len(base.times),
        "warmup_steps": args.warmup,
        "batch_size": batch,
        "seq_len": seq_len,
        "params": params,
        "config": config,
        "optimizer": {"name": "AdamW", "lr": args.lr},
        "loss": "next-token cross-entropy on uniformly random token ids",
        "myopia": {"mode": "detach_hidden", "implementation": "fast"},
        "attention_calls_per_forward": paths,
        "naive_step_estimate_s": seq_len * median(base.times),
        "variants": summarise(variants, base),
    }


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="tiny GPT and tiny random Llama (instead of SmolLM2), 3 warmup + 3 timed steps")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output JSON path")
    ap.add_argument("--steps", type=int, default=None, help="timed steps per variant (default 20; --quick 3)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed warmup steps per variant (default 3)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads (default: torch's own choice; --quick 1, since multi-threaded tiny steps "
                         "on a busy machine are dominated by thread contention)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS), help="which benchmarks to run")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                    help="bf16: autocast forward and loss, fp32 weights and AdamW")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--gpt-layers", type=int, default=None, help="default 6 (--quick 2)")
    ap.add_argument("--gpt-embd", type=int, default=None, help="default 384 (--quick 64)")
    ap.add_argument("--gpt-heads", type=int, default=None, help="default 6 (--quick 4)")
    ap.add_argument("--gpt-vocab", type=int, default=None, help="default 50257 (--quick 256)")
    ap.add_argument("--gpt-seq-len", type=int, default=None, help="default 256 (--quick 32)")
    ap.add_argument("--gpt-batch", type=int, default=None, help="default 8 (--quick 2)")
    ap.add_argument("--no-reference", action="store_true", help="skip the explicit O(T^2) form for the GPT")
    ap.add_argument("--hf-model", default="smollm2-135m",
                    help=f"HF model for the second benchmark ('{SHAPE_ONLY}': random init, SmolLM2-135M's shapes)")
    ap.add_argument("--hf-seq-len", type=int, default=None, help="default 256 (--quick 32)")
    ap.add_argument("--hf-batch", type=int, default=None, help="default 4 (--quick 2)")
    ap.add_argument("--pythia-seq-len", type=int, default=None, help="default 256 (--quick 32)")
    ap.add_argument("--pythia-batch", type=int, default=None, help="default 8 (--quick 2)")
    args = ap.parse_args(argv)
    full = {"threads": 0, "steps": 20, "warmup": 3, "gpt_layers": 6, "gpt_embd": 384, "gpt_heads": 6,
            "gpt_vocab": 50257, "gpt_seq_len": 256, "gpt_batch": 8, "hf_seq_len": 256, "hf_batch": 4,
            "pythia_seq_len": 256, "pythia_batch": 8}
    quick = {"threads": 1, "steps": 3, "warmup": 3, "gpt_layers": 2, "gpt_embd": 64, "gpt_heads": 4,
             "gpt_vocab": 256, "gpt_seq_len": 32, "gpt_batch": 2, "hf_seq_len": 32, "hf_batch": 2,
             "pythia_seq_len": 32, "pythia_batch": 2}
    for k, v in (quick if args.quick else full).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.steps < 1 or args.warmup < 0:
        ap.error("--steps must be >= 1 and --warmup >= 0")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error(f"--device {args.device}: CUDA is not available on this machine")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    from forethought.core.io import atomic_write_json
    from forethought.core.run import environment

    t0 = time.time()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    env = environment()
    measured: dict[str, dict] = {}
    if "gpt" in args.models:
        measured["gpt"] = bench_gpt(args, device)
        print(_line("gpt", measured["gpt"]), flush=True)
    if "smollm2" in args.models:
        measured["smollm2"] = bench_hf(args, device)
        print(_line("smollm2" if not args.quick else "smollm2 (tiny_llama)", measured["smollm2"]), flush=True)
    if "pythia" in args.models:
        measured["pythia"] = bench_pythia(args, device)
        print(_line("pythia" if not args.quick else "pythia (tiny_gpt_neox)", measured["pythia"]), flush=True)
    result = {
        "command": " ".join(["python", "benchmarks/myopia_step_cost.py", *(sys.argv[1:] if argv is None else argv)]),
        "quick": args.quick,
        "wall_s": time.time() - t0,
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "precision": args.precision,
        "interleaving": "one step per variant per round (vanilla, myopic[, reference]), order reversed every "
                        "other round; same batch for every variant; each variant has its own AdamW",
        "ratio_definition": "median myopic step time / median vanilla step time (step = zero_grad + forward + "
                            "loss + backward + AdamW step)",
        "naive_estimate": {
            "explanation": "The naive exact alternative computes each position's loss gradient with a separate "
                           "backward pass (every other position's state detached), i.e. one backward per "
                           "position: about L = seq_len times the vanilla step cost, versus the measured ratio "
                           "of the one-pass form.",
            **{k: {"factor_vs_vanilla": r["seq_len"], "estimated_step_s": r["naive_step_estimate_s"]}
               for k, r in measured.items()},
        },
        **measured,
        "machine": env,
    }
    if args.out.is_file() and not args.quick:  # keep the models this invocation did not measure
        import json

        old = json.loads(args.out.read_text())
        kept = [m for m in MODELS if m not in measured and m in old]
        for m in kept:
            result[m] = old[m]
            result["naive_estimate"][m] = old.get("naive_estimate", {}).get(m)
        if kept:
            result["kept_from_earlier_runs"] = {m: old.get("command") for m in kept}
    atomic_write_json(args.out, result)
    naive = ", ".join(f"{k} ~{r['seq_len']}x" for k, r in measured.items())
    print(f"threads={result['torch_threads']} wall={result['wall_s']:.1f}s naive {naive} vanilla; wrote {args.out}")
    return result


def _line(name: str, r: dict) -> str:
    s = (f"{name}: vanilla {r['vanilla_median_s'] * 1e3:.1f} ms  myopic {r['myopic_median_s'] * 1e3:.1f} ms  "
         f"ratio {r['ratio']:.3f}")
    if "reference_ratio" in r:
        s += f"  reference {r['reference_median_s'] * 1e3:.1f} ms (ratio {r['reference_ratio']:.3f})"
    s += f"  fwd+bwd ratio {r['fwd_bwd_ratio']:.3f}"
    return s + f"  [{r['steps']} steps, B={r['batch_size']}, T={r['seq_len']}, {r['params'] / 1e6:.2f}M params]"


if __name__ == "__main__":
    main()
