"""``forethought presets memory``: the expected training memory of each paper preset on one GPU, and whether it
fits the card (80 GB by default). The scaling guide's table and the memory comments in the paper presets come
from it.

Every preset is read with the project's config loader, and each model it trains (each distinct memory setting of
the 14 PredGen presets ``train_paper_<task>``, each stage of the PSF recipe, each variant of ``myopia lm``) is built
as its command builds it, but on PyTorch's meta device: shapes and dtypes, no memory, nothing downloaded
(Llama-2-7B from its published shapes: hidden 4096, 32 layers, 32 heads, MLP 11008, vocabulary 32000; GPT-2's
vocabulary is 50,257, T5's 32,100). Two numbers are added up:

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

"fits" = the total is at most ``usable`` (0.9) of the card's ``card_gib`` (80 GiB for an 80 GB card): 72 GiB, the
rest left for what is not counted. Sizes are in GiB (2^30 bytes), as the trainer prints them.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forethought.cli import CONFIG_DIR
from forethought.core.config import field, positive, within
from forethought.core.errors import ForethoughtError
from forethought.core.run import Run, RunConfig

if TYPE_CHECKING:
    import torch

    from forethought.predgen.config import PredGenConfig

# This module imports no torch at import time (each preset's part imports what it builds): the CLI loads and
# checks PresetMemoryConfig, and prints --help, before the heavy libraries load.

GPT2_VOCAB = 50257
LLAMA2_7B = {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 4096,
             "tie_word_embeddings": False}
KNOWN_BASES = {"meta-llama/Llama-2-7b-hf": LLAMA2_7B}
LOGIT_BYTES = 2 + 4 + 4  # 16-bit logits, fp32 log-probabilities kept by cross-entropy, their gradient
# PredGen's longest written answer: a two-decimal score (" 4.25": Llama-2 writes a space and each character as a
# token) and EOS; a label word or answer1..answer5 is shorter
ANSWER_TOKENS = 6
HEAD_OUTPUTS = 5


@dataclass
class PresetMemoryConfig:
    """``presets memory``: the card the paper presets must fit, and how much of it the estimate may fill."""

    run: RunConfig = field(RunConfig(name="preset-memory"), "run folder (results.json)")
    card_gib: float = field(80.0, "the GPU's memory in GiB (an 80 GB card: 80)")
    usable: float = field(0.9, "the share of the card a preset's estimate may fill: the rest is left for what it "
                          "does not count (CUDA context, allocator slack, buffers inside kernels)")

    def validate(self) -> None:
        positive(self, "card_gib", "usable")
        within(self, 0, 1, "usable")


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
    cost: Callable[[int, bool], tuple[int, int, int]]  # (micro, checkpointing) -> (activations, logits, other)


def row(setting: Costed, fits_bytes: int) -> dict[str, Any]:
    """One model's estimate (weights, gradients, AdamW, autocast copies) plus its activations and logits, as the
    preset configures it (micro-batch, checkpointing) and plain (no accumulation, no checkpointing)."""
    from forethought.core.memory import estimate_training_memory

    est = estimate_training_memory(setting.model, setting.precision, setting.trainable)

    def total(accum: int, ckpt: bool) -> dict[str, Any]:
        micro = setting.batch // accum
        a, lg, other = setting.cost(micro, ckpt)
        t = est["total_bytes"] + a + lg + other
        return {"grad_accum": accum, "micro_batch": micro, "activation_checkpointing": ckpt, "activations_bytes": a,
                "logits_bytes": lg, "other_bytes": other, "total_bytes": t, "fits": t <= fits_bytes}

    return {"preset": setting.preset, "part": setting.part, "precision": setting.precision,
            "batch_size": setting.batch, "tokens_per_row": setting.tokens_per_row, "estimate": est,
            "as_configured": total(setting.grad_accum, setting.checkpointing), "plain": total(1, False)}


def config_path(system: str, name: str) -> Path:
    return CONFIG_DIR / system / name


def predgen_settings() -> Iterator[Costed]:
    """The PredGen paper presets (configs/predgen/train_paper_<task>.yaml, one per dataset): a row per distinct
    memory setting (base, adapter, head, precision, batch, accumulation, checkpointing, prompt cap) naming the
    tasks that share it, so every preset is estimated and no estimate is repeated."""
    from forethought.cli import preset_family
    from forethought.core.config import load_config
    from forethought.predgen.config import PredGenConfig

    groups: dict[str, list[tuple[str, PredGenConfig]]] = {}
    for task in preset_family("predgen", "train", "paper"):
        path = config_path("predgen", f"train_paper_{task}.yaml")
        cfg = load_config(PredGenConfig, path)
        if cfg.base not in KNOWN_BASES:
            raise ForethoughtError(f"{path.name}: base {cfg.base} has no known shapes here (known: "
                                   f"{', '.join(KNOWN_BASES)})")
        t = cfg.train
        key = repr((cfg.method, cfg.base, cfg.base_dtype, cfg.adapter, cfg.head, cfg.run.precision, t.batch_size,
                    t.grad_accum, t.activation_checkpointing, cfg.prompt.max_prompt_tokens))
        groups.setdefault(key, []).append((task, cfg))
    for members in groups.values():
        yield predgen_costed([task for task, _ in members], members[0][1])


def predgen_costed(tasks: list[str], cfg: PredGenConfig) -> Costed:
    """One memory setting of the PredGen paper presets, shared by ``tasks``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from forethought.core.precision import base_dtype
    from forethought.predgen.model import PredGenModel, apply_adapter, build_head
    from forethought.predgen.registry import method_named

    shapes = KNOWN_BASES[cfg.base]
    full = cfg.adapter.method == "full"
    dtype = base_dtype(cfg.base_dtype, cfg.run.precision, trains_base=full)
    with torch.device("meta"):
        lm = LlamaForCausalLM(LlamaConfig(**shapes)).to(dtype)
        lm = apply_adapter(lm, cfg.adapter, cfg.train.steps)
        pooling = method_named(cfg.method).pooling(cfg.head.pooling)
        # the most outputs of any paper task (ARC: up to 5 choices); a head is a few MB beside the 7B base
        head = build_head(cfg.method, shapes["hidden_size"], HEAD_OUTPUTS, pooling, cfg.head.hidden, None)
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

    return Costed("predgen/train_paper_<task>", f"{', '.join(tasks)}: {cfg.method} on {cfg.base.split('/')[-1]} "
                  f"+ {cfg.adapter.method} r={cfg.adapter.r}", model,
                  [p for p in model.parameters() if p.requires_grad], cfg.run.precision, cfg.train.batch_size,
                  cfg.train.grad_accum, cfg.train.activation_checkpointing,
                  f"<= {row_tokens} (prompt cap {cfg.prompt.max_prompt_tokens} + answer)", cost)


def psf_settings() -> Iterator[Costed]:
    import torch

    from forethought.core.config import load_config
    from forethought.data.tokenizers import KNOWN_VOCAB_SIZES
    from forethought.psf.ar import build_ar
    from forethought.psf.build import configure
    from forethought.psf.model import PSFModel
    from forethought.psf.prior import FlowPrior
    from forethought.psf.recipe import RecipeConfig, plan_stages, stage_features, trajectory_dim

    cfg = load_config(RecipeConfig, config_path("psf", "recipe_paper.yaml"))
    if cfg.data.tokenizer not in KNOWN_VOCAB_SIZES:
        raise ForethoughtError(f"recipe_paper.yaml: tokenizer {cfg.data.tokenizer}: only the vocabularies of "
                               f"{', '.join(KNOWN_VOCAB_SIZES)} are known here")
    V, L, prec = KNOWN_VOCAB_SIZES[cfg.data.tokenizer], cfg.model.seq_len, cfg.run.precision
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
    import torch

    from forethought.core.config import load_config
    from forethought.models.gpt import GPT
    from forethought.myopia.config import LMConfig

    cfg = load_config(LMConfig, config_path("myopia", "lm_paper.yaml"))
    if cfg.base != "gpt" or cfg.data.tokenizer != "gpt2":
        raise ForethoughtError("lm_paper.yaml: only our GPT with the gpt2 tokenizer is known here")
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
    import torch

    from forethought.core.config import load_config
    from forethought.models.gpt import GPT
    from forethought.myopia.config import SyntheticConfig

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


SETTINGS = (predgen_settings, psf_settings, myopia_lm_settings, myopia_synthetic_settings)


def run(cfg: PresetMemoryConfig, resume: str | None = None) -> dict[str, Any]:
    from forethought.experiments.scaling import GIB, memory_rows  # the experiments package loads numpy

    # peft calls a transformers property that transformers 5 deprecates (the CLI silences it the same way)
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    fits_bytes = int(cfg.usable * cfg.card_gib * GIB)
    rows = [row(s, fits_bytes) for settings in SETTINGS for s in settings()]
    per_preset: dict[str, dict[str, Any]] = {}
    for r in rows:
        p = per_preset.setdefault(r["preset"], {"parts": 0, "largest_total_gib": 0.0, "largest_plain_gib": 0.0})
        p["parts"] += 1
        p["largest_total_gib"] = max(p["largest_total_gib"], r["as_configured"]["total_bytes"] / GIB)
        p["largest_plain_gib"] = max(p["largest_plain_gib"], r["plain"]["total_bytes"] / GIB)
    results = {"card_gib": cfg.card_gib, "fits_if_total_at_most_gib": fits_bytes / GIB, "rows": rows,
               "per_preset": per_preset,
               "largest_total_gib": max(p["largest_total_gib"] for p in per_preset.values()),
               "all_fit": all(r["as_configured"]["fits"] for r in rows)}
    Run.create(cfg.run.out_dir, cfg.run.name, cfg).write_results(results)
    table = memory_rows(rows)
    header = list(next(iter(next(iter(table.values())).values())))
    print("| preset | model / stage | " + " | ".join(header) + " |")
    print("|" + "---|" * (len(header) + 2))
    for preset, parts in table.items():
        for part, cells in parts.items():
            print(f"| {preset} | {part} | " + " | ".join(str(cells[h]) for h in header) + " |")
    print(f"fits: at most {fits_bytes / GIB:.0f} GiB ({cfg.usable:g} of {cfg.card_gib:g} GiB); largest as configured "
          f"{results['largest_total_gib']:.1f} GiB")
    return results
