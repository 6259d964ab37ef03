"""Expected training memory of each paper preset on one GPU, and whether it fits an 80 GB card. README's table
("Scaling up") and the memory comments in the paper presets come from this script.

    python benchmarks/preset_memory.py      # prints the table, writes benchmarks/results/preset_memory.json

Every preset is read with the project's config loader, and each model it trains (each stage of the PSF recipe,
each variant of ``myopia lm``) is built as its command builds it, but on PyTorch's meta device: shapes and dtypes,
no memory, nothing downloaded (Llama-2-7B from its published shapes: hidden 4096, 32 layers, 32 heads, MLP
11008, vocabulary 32000; GPT-2's vocabulary is 50,257). Two numbers are added up:

* **the project's own estimate**, ``forethought.core.memory.estimate_training_memory`` (the line every training
  prints before it starts): weights, gradients and AdamW states of the trainable parameters, and the 16-bit
  copies of fp32 matrices that autocast keeps, at the preset's precision;
* **a rough activation estimate** (a formula, not a measurement): what autograd keeps for the backward pass of
  one micro-batch (batch_size / grad_accum rows), plus the logits of the scored positions.

The formula, per token and transformer block, in bytes, under bf16 / fp16 autocast (fp32: every 2 becomes 4):
4 for each of the two norms' inputs (norms run in fp32), and 2 for each 16-bit input of a matmul or of
attention: the normed input (shared by q, k, v), q, k and v, the attention output, the normed MLP input, and the
MLP's hidden activations (2 x width for GELU / ReLU: before and after the nonlinearity; 3 x width for SwiGLU:
gate, up and their product). Attention is fused (FlashAttention / memory-efficient SDPA on a GPU: no T x T
scores are kept). LoRA with dropout keeps each adapted matrix's input again (a new tensor after dropout) and a
1-byte mask. With activation checkpointing a block keeps only its input (the residual stream: 4 bytes in mixed
precision over fp32 weights, 2 over a 16-bit base) and one block's activations exist at a time, during its
recomputation. Logits: 2 (16-bit) + 4 (the fp32 log-probabilities cross-entropy keeps) + 4 (their gradient)
bytes per vocabulary entry of each scored position. Not counted: the CUDA context and allocator slack (1-3 GB),
buffers inside a kernel, and memory that passes without gradients (PredGen's roll-outs, PSF's self-realized
decoding, the evaluation).

"fits" = the total is at most 72 GiB: 90 % of an 80 GB card's 80 GiB, the rest left for what is not counted.
Sizes are in GiB (2^30 bytes), as the trainer prints them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "preset_memory.json"
GIB = 2**30
CARD_BYTES = 80 * GIB
FITS_BYTES = int(0.9 * CARD_BYTES)
GPT2_VOCAB = 50257
LLAMA2_7B = {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 4096,
             "tie_word_embeddings": False}
KNOWN_BASES = {"meta-llama/Llama-2-7b-hf": LLAMA2_7B}
LOGIT_BYTES = 2 + 4 + 4  # 16-bit logits, fp32 log-probabilities kept by cross-entropy, their gradient
ANSWER_TOKENS = 4  # PredGen's answer: " yes" / " no" and EOS, rounded up


@dataclass(frozen=True)
class Stack:
    """A stack of transformer blocks: what the activation formula needs."""

    layers: int
    hidden: int
    kv: int  # width of k and v (hidden, or less with grouped-query attention)
    mlp: int
    gated: bool  # SwiGLU (3 MLP matrices) rather than GELU / ReLU (2)


def block_bytes(s: Stack, act: int, lora_dropout_inputs: int = 0) -> int:
    """Bytes one block keeps for its backward pass, per token (the module docstring's formula). ``act``: bytes of a
    16-bit (2) or fp32 (4) activation; ``lora_dropout_inputs``: elements per token of the adapted matrices' inputs
    that LoRA's dropout copies."""
    norms = 2 * s.hidden * 4
    attention = s.hidden + (s.hidden + 2 * s.kv) + s.hidden  # normed input, q k v, attention output
    mlp = s.hidden + (3 if s.gated else 2) * s.mlp  # normed input, hidden activations
    return norms + act * (attention + mlp) + lora_dropout_inputs * (act + 1)


def stack_bytes(s: Stack, tokens: int, act: int, resid: int, checkpointing: bool, lora_dropout_inputs: int = 0) -> int:
    full = block_bytes(s, act, lora_dropout_inputs)
    if checkpointing:  # every block's input, and one block recomputed at a time
        return s.layers * tokens * resid * s.hidden + tokens * full
    return s.layers * tokens * full


def act_bytes(precision: str) -> int:
    return 4 if precision == "fp32" else 2


@dataclass
class Costed:
    """A model, its trainable parameters and a function giving (activations, logits, other) per micro-batch."""

    preset: str
    part: str
    model: torch.nn.Module
    trainable: list[torch.nn.Parameter]
    precision: str
    batch: int
    grad_accum: int
    checkpointing: bool
    tokens_per_row: str
    cost: Any  # (micro, checkpointing) -> (activations, logits, other)


def row(setting: Costed) -> dict[str, Any]:
    from forethought.core.memory import estimate_training_memory

    est = estimate_training_memory(setting.model, setting.precision, setting.trainable)

    def total(accum: int, ckpt: bool) -> dict[str, Any]:
        micro = setting.batch // accum
        a, lg, other = setting.cost(micro, ckpt)
        t = est["total_bytes"] + a + lg + other
        return {"grad_accum": accum, "micro_batch": micro, "activation_checkpointing": ckpt, "activations_bytes": a,
                "logits_bytes": lg, "other_bytes": other, "total_bytes": t, "fits_80gb": t <= FITS_BYTES}

    return {"preset": setting.preset, "part": setting.part, "precision": setting.precision,
            "batch_size": setting.batch, "tokens_per_row": setting.tokens_per_row, "estimate": est,
            "as_configured": total(setting.grad_accum, setting.checkpointing), "plain": total(1, False)}


def config_path(system: str, name: str) -> Path:
    from forethought.cli import CONFIG_DIR

    return CONFIG_DIR / system / name


def predgen_settings() -> Iterator[Costed]:
    from transformers import LlamaConfig, LlamaForCausalLM

    from forethought.core.config import load_config
    from forethought.core.errors import ForethoughtError
    from forethought.core.precision import base_dtype
    from forethought.predgen.config import PredGenConfig
    from forethought.predgen.model import PredGenModel, apply_adapter, build_head
    from forethought.predgen.registry import method_named

    path = config_path("predgen", "train_paper.yaml")
    cfg = load_config(PredGenConfig, path)
    if cfg.base not in KNOWN_BASES:
        raise ForethoughtError(f"{path.name}: base {cfg.base} has no known shapes here (known: "
                               f"{', '.join(KNOWN_BASES)})")
    shapes = KNOWN_BASES[cfg.base]
    full = cfg.adapter.method == "full"
    dtype = base_dtype(cfg.base_dtype, cfg.run.precision, trains_base=full)
    with torch.device("meta"):
        lm = LlamaForCausalLM(LlamaConfig(**shapes)).to(dtype)
        lm = apply_adapter(lm, cfg.adapter, cfg.train.steps)
        pooling = method_named(cfg.method).pooling(cfg.head.pooling)
        head = build_head(cfg.method, shapes["hidden_size"], 2, pooling, cfg.head.hidden, None)  # BoolQ: 2 classes
    model = PredGenModel(lm, head)
    h, m, L = shapes["hidden_size"], shapes["intermediate_size"], shapes["num_hidden_layers"]
    kv = h * shapes["num_key_value_heads"] // shapes["num_attention_heads"]
    stack = Stack(L, h, kv, m, gated=True)
    act = act_bytes(cfg.run.precision)
    resid = torch.finfo(dtype).bits // 8 if not full else 4
    # all-linear LoRA with dropout: q, k, v, o, gate, up read width h, down reads width m
    lora = (6 * h + m) if cfg.adapter.method != "full" and cfg.adapter.dropout > 0 else 0
    row_tokens = cfg.prompt.max_prompt_tokens + ANSWER_TOKENS  # the prompt cap: an upper bound

    def cost(micro: int, ckpt: bool) -> tuple[int, int, int]:
        tokens = micro * row_tokens
        acts = stack_bytes(stack, tokens, act, resid, ckpt, lora)
        # the prompt pass scores its last position; the continuations (mixed and roll-out rows) the answer
        logits = micro * (1 + 2 * ANSWER_TOKENS) * shapes["vocab_size"] * LOGIT_BYTES
        # the prompt's KV cache, read with gradient by the continuations, outlives the checkpointed blocks
        kv_cache = 2 * L * tokens * kv * act if ckpt else 0
        return acts, logits, kv_cache

    yield Costed("predgen/train_paper", f"{cfg.method} on {cfg.base.split('/')[-1]} + {cfg.adapter.method} "
                 f"r={cfg.adapter.r}", model, [p for p in model.parameters() if p.requires_grad], cfg.run.precision,
                 cfg.train.batch_size, cfg.train.grad_accum, cfg.train.activation_checkpointing,
                 f"<= {row_tokens} (prompt cap {cfg.prompt.max_prompt_tokens} + answer)", cost)


def psf_settings() -> Iterator[Costed]:
    from forethought.core.config import load_config
    from forethought.psf.ar import build_ar
    from forethought.psf.generate import configure
    from forethought.psf.model import PSFModel
    from forethought.psf.prior import FlowPrior
    from forethought.psf.recipe import RecipeConfig, plan_stages, stage_features, trajectory_dim

    cfg = load_config(RecipeConfig, config_path("psf", "recipe_paper.yaml"))
    if cfg.data.tokenizer != "gpt2":
        raise SystemExit(f"recipe_paper.yaml: tokenizer {cfg.data.tokenizer}: only gpt2's vocabulary is known here")
    V, L, prec = GPT2_VOCAB, cfg.model.seq_len, cfg.run.precision
    act = act_bytes(prec)
    d = cfg.model.n_embd
    enc = Stack(cfg.model.enc_layers, d, d, 4 * d, gated=False)
    dec = Stack(cfg.model.dec_layers, d, d, 4 * d, gated=False)
    with torch.device("meta"):
        model = PSFModel(replace(cfg.model, vocab_size=V))
    for stage in plan_stages(cfg):
        t = stage.train
        if stage.kind == "model":
            feats = stage_features(stage.name)
            configure(model, feats, stage.blocks)
            K = stage.blocks

            def cost(micro: int, ckpt: bool, K: int = K, again: bool = feats["self_realized"]) -> tuple[int, int, int]:
                # encoder over the window (twice from self_realized on: the roll-out is re-encoded with
                # gradient), decoder over K branches of [K memory slots | query | L/K - 1 tokens]
                e = stack_bytes(enc, micro * L, act, 4, ckpt) * (2 if again else 1)
                return e + stack_bytes(dec, micro * K * (K + L // K), act, 4, ckpt), micro * L * V * LOGIT_BYTES, 0

            yield Costed("psf/recipe_paper", f"{stage.name} (K={K})", model,
                         [p for p in model.parameters() if p.requires_grad], prec, t.batch_size, t.grad_accum,
                         t.activation_checkpointing, f"{L} (encoder), {K} x {K + L // K} (decoder)", cost)
        elif stage.kind == "prior":
            pcfg = cfg.prior.model
            with torch.device("meta"):
                prior = FlowPrior(pcfg, trajectory_dim(model, pcfg), model.blocks)
            stack = Stack(pcfg.n_layer, pcfg.n_embd, pcfg.n_embd, 4 * pcfg.n_embd, gated=False)

            def cost(micro: int, ckpt: bool, stack: Stack = stack, K: int = model.blocks) -> tuple[int, int, int]:
                return stack_bytes(stack, micro * K, act, 4, ckpt), 0, 0

            yield Costed("psf/recipe_paper", f"{stage.name} (K={model.blocks})", prior, list(prior.parameters()),
                         prec, t.batch_size, t.grad_accum, t.activation_checkpointing, f"{model.blocks} states", cost)
        else:
            with torch.device("meta"):
                ar = build_ar(cfg.ar.model, V, L)
            stack = Stack(cfg.ar.model.n_layer, cfg.ar.model.n_embd, cfg.ar.model.n_embd, 4 * cfg.ar.model.n_embd,
                          gated=False)

            def cost(micro: int, ckpt: bool, stack: Stack = stack) -> tuple[int, int, int]:
                return stack_bytes(stack, micro * L, act, 4, ckpt), micro * L * V * LOGIT_BYTES, 0

            yield Costed("psf/recipe_paper", "ar (baseline)", ar, list(ar.parameters()), prec, t.batch_size,
                         t.grad_accum, t.activation_checkpointing, f"{L}", cost)


def myopia_lm_settings() -> Iterator[Costed]:
    from forethought.core.config import load_config
    from forethought.models.gpt import GPT
    from forethought.myopia.lm import LMConfig

    cfg = load_config(LMConfig, config_path("myopia", "lm_paper.yaml"))
    if cfg.base != "gpt" or cfg.data.tokenizer != "gpt2":
        raise SystemExit("lm_paper.yaml: only our GPT with the gpt2 tokenizer is known here")
    g = replace(cfg.gpt, vocab_size=GPT2_VOCAB)
    with torch.device("meta"):
        model = GPT(g)
    act, T = act_bytes(cfg.run.precision), cfg.data.seq_len
    stack = Stack(g.n_layer, g.n_embd, g.n_embd, 4 * g.n_embd, gated=False)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    for variant in cfg.variants:
        def cost(micro: int, ckpt: bool, variant: str = variant) -> tuple[int, int, int]:
            tokens = micro * T
            acts = stack_bytes(stack, tokens, act, 4, ckpt)
            if variant in ("detach_hidden", "local"):  # K and V again, from the detached (or frozen) states
                acts += stack.layers * tokens * 2 * stack.kv * act
            # local: the frozen vanilla model's weights and its per-layer states, which the K/V read
            other = weights + stack.layers * tokens * stack.hidden * 4 if variant == "local" else 0
            return acts, tokens * GPT2_VOCAB * LOGIT_BYTES, other

        yield Costed("myopia/lm_paper", variant, model, list(model.parameters()), cfg.run.precision,
                     cfg.train.batch_size, cfg.train.grad_accum, cfg.train.activation_checkpointing, f"{T}", cost)


def myopia_synthetic_settings() -> Iterator[Costed]:
    from forethought.core.config import load_config
    from forethought.models.gpt import GPT
    from forethought.myopia.synthetic import SyntheticConfig

    cfg = load_config(SyntheticConfig, config_path("myopia", "synthetic_paper.yaml"))
    with torch.device("meta"):
        model = GPT(cfg.model)
    act, T = act_bytes(cfg.run.precision), cfg.task.seq_len
    stack = Stack(cfg.model.n_layer, cfg.model.n_embd, cfg.model.n_embd, 4 * cfg.model.n_embd, gated=False)

    def cost(micro: int, ckpt: bool) -> tuple[int, int, int]:  # a regression head: no logits
        extra = stack.layers * micro * T * 2 * stack.kv * act  # the myopic mode's K/V from detached states
        return stack_bytes(stack, micro * T, act, 4, ckpt) + extra, 0, 0

    yield Costed("myopia/synthetic_paper", ", ".join(cfg.modes), model, list(model.parameters()), cfg.run.precision,
                 cfg.train.batch_size, cfg.train.grad_accum, cfg.train.activation_checkpointing, f"{T}", cost)


def millions(n: int) -> str:
    return f"{n / 1e6:,.0f}M" if n >= 1e7 else f"{n / 1e6:.2f}M"


def gib(n: float) -> str:
    x = n / GIB
    return f"{x:.1f}" if x >= 0.1 or x == 0 else f"{x:.3f}"


def table(rows: list[dict[str, Any]]) -> list[str]:
    out = [("| preset | model / stage | parameters (trainable) | precision | rows x accumulation | checkpointing | "
            "weights + grads + AdamW + autocast copies (GiB) | activations + logits (GiB, rough) | total (GiB) | "
            "fits 80 GB | without accumulation or checkpointing (GiB) |"),
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        e, c, p = r["estimate"], r["as_configured"], r["plain"]
        out.append(
            f"| {r['preset']} | {r['part']} | {millions(e['parameters'])} ({millions(e['trainable_parameters'])}) | "
            f"{r['precision']} | {c['micro_batch']} x {c['grad_accum']} | "
            f"{'yes' if c['activation_checkpointing'] else 'no'} | "
            f"{gib(e['total_bytes'])} | {gib(c['activations_bytes'] + c['logits_bytes'] + c['other_bytes'])} | "
            f"{gib(c['total_bytes'])} | {'yes' if c['fits_80gb'] else '**no**'} | {gib(p['total_bytes'])}"
            f"{'' if p['fits_80gb'] else ' (does not fit)'} |")
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output JSON")
    args = ap.parse_args(argv)
    # peft calls a transformers property that transformers 5 deprecates (the CLI silences it the same way)
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    t0 = time.perf_counter()
    rows = [row(s) for gen in (predgen_settings, psf_settings, myopia_lm_settings, myopia_synthetic_settings)
            for s in gen()]
    lines = table(rows)
    print("\n".join(lines))
    result = {"command": " ".join(["python", "benchmarks/preset_memory.py", *(sys.argv[1:] if argv is None else argv)]),
              "card_bytes": CARD_BYTES, "fits_if_total_at_most_bytes": FITS_BYTES,
              "method": __doc__.split("\n\n", 2)[2].strip(), "rows": rows, "table": lines,
              "wall_s": time.perf_counter() - t0}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
