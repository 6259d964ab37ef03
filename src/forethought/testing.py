"""Tiny random-init Hugging Face models and small data files for tests and ``--quick`` benchmark runs (not used by
the library).

Built locally from a config, so they need no download; the global torch RNG is left untouched (weights come
from ``seed`` alone).
"""

from __future__ import annotations

import csv
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast


def tiny_llama(
    vocab_size: int = 256,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    seed: int = 0,
    max_positions: int = 512,
    eos_token_id: int | None = None,
) -> LlamaForCausalLM:
    """A small random-init Llama (grouped-query attention, RoPE, SwiGLU) built locally, for fast tests.

    Same architecture family as SmolLM2, so code paths tested on it carry over. The global torch RNG is left
    untouched: weights come from ``seed`` alone.
    """
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 8 // 3,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        bos_token_id=eos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=eos_token_id,
        tie_word_embeddings=False,
    )
    return _seeded(LlamaForCausalLM, config, seed)


def tiny_gpt2(
    vocab_size: int = 256,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    seed: int = 0,
    max_positions: int = 512,
    eos_token_id: int | None = None,
) -> GPT2LMHeadModel:
    """A small random-init GPT-2 (learned positions, tied embeddings) built locally, for fast tests."""
    config = GPT2Config(
        vocab_size=vocab_size,
        n_embd=hidden_size,
        n_layer=layers,
        n_head=heads,
        n_positions=max_positions,
        bos_token_id=eos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=eos_token_id,
    )
    return _seeded(GPT2LMHeadModel, config, seed)


def tiny_gpt_neox(vocab_size: int = 256, hidden_size: int = 64, layers: int = 2, heads: int = 4, seed: int = 0,
                  max_positions: int = 512, rotary_pct: float = 0.25, dropout: float = 0.0):
    """A small random-init GPT-NeoX shaped as Pythia: parallel residual, rotary on a quarter of each head."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    config = GPTNeoXConfig(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=layers,
                           num_attention_heads=heads, intermediate_size=4 * hidden_size,
                           max_position_embeddings=max_positions, use_parallel_residual=True,
                           rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                            "partial_rotary_factor": rotary_pct},
                           attention_dropout=dropout, hidden_dropout=dropout, tie_word_embeddings=False)
    return _seeded(GPTNeoXForCausalLM, config, seed)


def tiny_phi(vocab_size: int = 256, hidden_size: int = 64, layers: int = 2, heads: int = 4, seed: int = 0,
             max_positions: int = 512, qk_layernorm: bool = True, dropout: float = 0.0):
    """A small random-init Phi (parallel attention + MLP, partial rotary, optional per-head q/k LayerNorms)."""
    from transformers import PhiConfig, PhiForCausalLM

    config = PhiConfig(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=layers,
                       num_attention_heads=heads, intermediate_size=4 * hidden_size,
                       max_position_embeddings=max_positions, qk_layernorm=qk_layernorm,
                       attention_dropout=dropout, resid_pdrop=dropout, embd_pdrop=dropout)
    return _seeded(PhiForCausalLM, config, seed)


def tiny_opt(vocab_size: int = 256, hidden_size: int = 64, layers: int = 2, heads: int = 4, seed: int = 0,
             max_positions: int = 512, dropout: float = 0.0):
    """A small random-init OPT (learned positions, pre-scaled queries, no rotary)."""
    from transformers import OPTConfig, OPTForCausalLM

    config = OPTConfig(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=layers,
                       num_attention_heads=heads, ffn_dim=4 * hidden_size, word_embed_proj_dim=hidden_size,
                       max_position_embeddings=max_positions, dropout=dropout, attention_dropout=dropout)
    return _seeded(OPTForCausalLM, config, seed)


def _seeded(model_cls, config, seed: int):
    """``model_cls(config)`` initialised from ``seed`` alone, in eval mode (the global RNG is left as it was)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config)
    return model.eval()


def write_csv(path: Path, rows: list[dict]) -> Path:
    """Rows (dicts with the same keys) as a CSV file with a header row."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def tiny_llama_folder(folder: Path, text: str, vocab_size: int, **llama: int) -> PreTrainedTokenizerFast:
    """A model folder any ``--base`` accepts: a byte-level BPE of ``vocab_size`` trained on ``text`` and a tiny
    random Llama sized to it (``llama``: tiny_llama's keyword arguments). Returns the tokenizer."""
    from forethought.data.tokenizers import train_byte_level_bpe

    tok = PreTrainedTokenizerFast(tokenizer_object=train_byte_level_bpe(text, vocab_size), eos_token="<|endoftext|>",
                                  pad_token="<|endoftext|>")
    tok.save_pretrained(folder)
    tiny_llama(vocab_size=len(tok), eos_token_id=tok.eos_token_id, **llama).save_pretrained(folder)
    return tok


def finite_numbers(obj: object, where: str = "") -> int:
    """Assert every number in a JSON tree is finite (None, strings and booleans are skipped); returns how many
    numbers there are, so a test can also check that a results file is not empty."""
    import math

    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return 0
    if isinstance(obj, (int, float)):
        assert math.isfinite(obj), where
        return 1
    items = obj.items() if isinstance(obj, dict) else enumerate(obj)  # type: ignore[union-attr]
    return sum(finite_numbers(v, f"{where}.{k}") for k, v in items)
