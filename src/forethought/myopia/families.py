"""``forethought myopia families``: make_myopic on every supported model family (our GPT and HF Llama, Mistral,
Qwen2 with a sliding window, Qwen3, Gemma, Gemma 2 with soft-capping, GPT-2, GPT-NeoX / Pythia, Phi, OPT).

On a tiny random-init float64 model of each family (2 sequences of ``exact_tokens`` tokens):

* ``forward_max_abs_diff``: myopic against vanilla logits (myopia changes the gradient, not the forward pass);
* ``earlier_state_grad_max_abs``: the largest gradient any position's loss sends into an earlier position's layer
  input (exactly 0 when myopic);
* ``param_grad_max_rel_diff``: the one-pass parameter gradients against the slow per-position form
  (:func:`forethought.myopia.wrap.per_position_gradient`: one backward per position, every attention layer reading
  earlier positions as constants), max |difference| / max |gradient|;

and on a small float32 model of the family the median myopic / vanilla training-step time (interleaved steps,
AdamW: :mod:`forethought.myopia.step_cost`'s timing).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from forethought.core.run import Run
from forethought.core.runtime import mix_seed, pick_device
from forethought.models.gpt import GPT
from forethought.models.gpt_config import GPTConfig
from forethought.myopia.config import FamiliesConfig
from forethought.myopia.step_cost import Variant, n_params, random_batch, run_interleaved, seeded
from forethought.myopia.wrap import make_myopic, per_position_gradient

__all__ = ["FamiliesConfig", "run"]

HEADS, KV_HEADS, POSITIONS = 4, 2, 512
# what sets a family's model apart here, beside its attention class
WHAT = {"gpt": "our GPT", "qwen2": "sliding window 3", "qwen3": "q/k norms", "gemma2": "soft-capping 2.0, sliding "
        "window 4", "gpt_neox": "Pythia's architecture: parallel residual, rotary on a quarter of each head",
        "phi": "partial rotary, q/k LayerNorms", "opt": "learned positions, pre-scaled queries"}
NOTE = ("differences above 1e-12 are HF's own float32 steps inside a float64 model: Gemma 2's eager attention takes "
        "its softmax in float32, and the RMSNorms of Gemma / Qwen3 (and Llama) normalise in float32, so sums over "
        "positions round differently in the one-pass and per-position forms")


def builder(family: str, hidden: int, layers: int, vocab: int) -> Callable[[], nn.Module]:
    """A function building a random-init model of ``family`` (call it under :func:`seeded`): 4 heads (2 KV heads
    where the family has them), no dropout."""
    if family == "gpt":
        return lambda: GPT(GPTConfig(vocab_size=vocab, n_positions=POSITIONS, n_embd=hidden, n_layer=layers,
                                     n_head=HEADS))
    import transformers as tf

    common = dict(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=HEADS,
                  max_position_embeddings=POSITIONS)
    gqa = dict(num_key_value_heads=KV_HEADS, intermediate_size=2 * hidden)
    head = dict(head_dim=hidden // HEADS)
    configs: dict[str, Callable[[], tuple[type, Any]]] = {
        "llama": lambda: (tf.LlamaForCausalLM, tf.LlamaConfig(**common, num_key_value_heads=KV_HEADS,
                                                              intermediate_size=hidden * 8 // 3,
                                                              tie_word_embeddings=False)),
        "mistral": lambda: (tf.MistralForCausalLM, tf.MistralConfig(**common, **gqa, sliding_window=None)),
        "qwen2": lambda: (tf.Qwen2ForCausalLM, tf.Qwen2Config(**common, **gqa, use_sliding_window=True,
                                                              sliding_window=3, max_window_layers=0)),
        "qwen3": lambda: (tf.Qwen3ForCausalLM, tf.Qwen3Config(**common, **gqa, **head)),
        "gemma": lambda: (tf.GemmaForCausalLM, tf.GemmaConfig(**common, **gqa, **head)),
        "gemma2": lambda: (tf.Gemma2ForCausalLM, tf.Gemma2Config(**common, **gqa, **head, attn_logit_softcapping=2.0,
                                                                 sliding_window=4)),
        "gpt2": lambda: (tf.GPT2LMHeadModel, tf.GPT2Config(vocab_size=vocab, n_positions=POSITIONS, n_embd=hidden,
                                                           n_layer=layers, n_head=HEADS, resid_pdrop=0.0,
                                                           embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None,
                                                           eos_token_id=None)),
        "gpt_neox": lambda: (tf.GPTNeoXForCausalLM, tf.GPTNeoXConfig(
            **common, intermediate_size=4 * hidden, use_parallel_residual=True, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25})),
        "phi": lambda: (tf.PhiForCausalLM, tf.PhiConfig(**common, intermediate_size=4 * hidden, qk_layernorm=True)),
        "opt": lambda: (tf.OPTForCausalLM, tf.OPTConfig(
            vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=HEADS,
            ffn_dim=4 * hidden, word_embed_proj_dim=hidden, max_position_embeddings=POSITIONS, dropout=0.0,
            attention_dropout=0.0)),
    }

    def build() -> nn.Module:
        model_cls, config = configs[family]()
        return model_cls(config)

    return build


def _forward(model: nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(B, T) ids -> logits (B, T, V) and every layer's input states, each (B, T, C)."""
    if isinstance(model, GPT):
        return model(ids, output_hidden_states=True)
    out = model(input_ids=ids, output_hidden_states=True, use_cache=False)
    return out.logits, list(out.hidden_states)


def per_position_loss(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """(T − 1,) next-token cross-entropy at each position, summed over the batch."""
    v = logits.shape[-1]
    ce = F.cross_entropy(logits[:, :-1].reshape(-1, v), ids[:, 1:].reshape(-1), reduction="none")
    return ce.view(ids.shape[0], -1).sum(0)


def exactness(build: Callable[[], nn.Module], ids: torch.Tensor) -> dict[str, Any]:
    """The one-pass myopic form of a float64 copy of ``build()`` against vanilla and the per-position form."""
    T = ids.shape[1]
    vanilla = build().double().eval()
    myopic = make_myopic(copy.deepcopy(vanilla), mode="detach_hidden")
    want = _forward(vanilla, ids)[0]
    logits, hidden = _forward(myopic, ids)
    fwd = (logits - want).abs().max().item()
    losses = per_position_loss(logits, ids)
    leak = 0.0
    for t in range(1, T - 1):  # position t's loss against every layer's input at positions < t
        grads = torch.autograd.grad(losses[t], hidden[:-1], retain_graph=True)
        leak = max(leak, max(g[:, :t].abs().max().item() for g in grads))
    params = list(vanilla.parameters())
    slow = per_position_gradient(vanilla, lambda: per_position_loss(_forward(vanilla, ids)[0], ids), params, T - 1)
    one = torch.autograd.grad(losses.sum(), list(myopic.parameters()), allow_unused=True)
    scale = max(a.abs().max().item() for a in slow)
    diff = max(((b if b is not None else torch.zeros_like(a)) - a).abs().max().item()
               for a, b in zip(slow, one, strict=True))
    return {"forward_max_abs_diff": fwd, "earlier_state_grad_max_abs": leak, "param_grad_max_rel_diff": diff / scale,
            "attention_implementation": getattr(getattr(vanilla, "config", None), "_attn_implementation", None)}


def step_cost(cfg: FamiliesConfig, build: Callable[[], nn.Module], device: torch.device) -> dict[str, Any]:
    """Median myopic / vanilla training-step time of a float32 copy of ``build()`` (interleaved steps)."""
    vanilla = build().float().to(device).train()
    batch = random_batch(cfg.batch, cfg.seq_len, cfg.vocab, cfg.run.seed, device)
    variants = [Variant("vanilla", vanilla, batch, cfg.lr, device, cfg.run.precision),
                Variant("myopic", make_myopic(copy.deepcopy(vanilla), mode="detach_hidden"), batch, cfg.lr, device,
                        cfg.run.precision)]
    run_interleaved(variants, cfg.warmup, cfg.steps)
    base, my = variants
    return {"vanilla_median_s": base.median(), "myopic_median_s": my.median(), "ratio": my.median() / base.median(),
            "steps": cfg.steps, "params": n_params(vanilla)}


def run(cfg: FamiliesConfig, resume: str | None = None) -> dict[str, Any]:
    device = pick_device(cfg.run.device, "--run.device")
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    out = Run.create(cfg.run.out_dir, cfg.run.name, cfg).start()
    g = torch.Generator().manual_seed(mix_seed("families-ids", cfg.run.seed))
    ids = torch.randint(0, cfg.exact_vocab, (2, cfg.exact_tokens), generator=g).to(device)  # (2, T)
    families: dict[str, Any] = {}
    for name in cfg.families:
        small = builder(name, cfg.exact_hidden, cfg.exact_layers, cfg.exact_vocab)
        row = {"what": WHAT.get(name, ""),
               **exactness(lambda small=small: seeded(small, cfg.run.seed).to(device), ids)}
        row["step_cost"] = step_cost(cfg, lambda name=name: seeded(builder(name, cfg.hidden, cfg.layers, cfg.vocab),
                                                                   cfg.run.seed), device)
        families[name] = row
        print(f"{name}: forward {row['forward_max_abs_diff']:.1e}  leak {row['earlier_state_grad_max_abs']:.1e}  "
              f"grads vs per-position {row['param_grad_max_rel_diff']:.1e}  step ratio "
              f"{row['step_cost']['ratio']:.3f}", flush=True)
    keys = ("forward_max_abs_diff", "earlier_state_grad_max_abs", "param_grad_max_rel_diff")
    ratios = [f["step_cost"]["ratio"] for f in families.values()]
    results = {
        "exactness_setup": {"dtype": "float64", "hidden": cfg.exact_hidden, "layers": cfg.exact_layers,
                            "heads": HEADS, "vocab": cfg.exact_vocab, "batch": 2, "tokens": cfg.exact_tokens,
                            "mode": "detach_hidden", "implementation": "fast (the explicit form where a mask, window "
                                                                       "or cap applies)"},
        "step_cost_setup": {"hidden": cfg.hidden, "layers": cfg.layers, "batch": cfg.batch, "seq_len": cfg.seq_len,
                            "vocab": cfg.vocab, "dtype": "float32", "precision": cfg.run.precision,
                            "optimizer": "AdamW", "interleaved": True, "device": str(device)},
        "note": NOTE,
        "worst": {k: max(f[k] for f in families.values()) for k in keys},
        "step_ratio": {"min": min(ratios), "max": max(ratios)},
        "families": families}
    out.write_results(results)
    return results
