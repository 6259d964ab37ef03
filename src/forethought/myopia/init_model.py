"""``forethought myopia init-model``: a seeded random-init Hugging Face model of a published architecture, with the
run's tokenizer as its vocabulary, saved as a run folder (model + tokenizer files + results.json) that
``myopia lm --base <folder>`` trains from scratch: the paper's scaling family without its pretrained weights."""

from __future__ import annotations

import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

from forethought.core.env import cache_dir
from forethought.core.run import Run
from forethought.data.corpora import load_corpus_text
from forethought.data.tokenizers import load_tokenizer
from forethought.myopia.config import InitModelConfig


def pythia_shape(width: int) -> dict:
    """GPT-NeoX shapes of Pythia's small models at a given width: 6 layers, heads of 32 dimensions, MLP 4 × width,
    rotary on a quarter of each head, parallel residual, untied embeddings (Pythia-14M is width 128, Pythia-31M
    width 256: their config.json files); the vocabulary is left to the tokenizer."""
    return {"hidden_size": width, "num_hidden_layers": 6, "num_attention_heads": width // 32,
            "intermediate_size": 4 * width, "use_parallel_residual": True, "max_position_embeddings": 2048,
            "tie_word_embeddings": False,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}}


# the published shapes, and narrower ones of the same design (from-scratch surrogates for a CPU size sweep)
SHAPES = {"pythia-14m": pythia_shape(128), "pythia-31m": pythia_shape(256), "pythia-w32": pythia_shape(32),
          "pythia-w64": pythia_shape(64)}


def run(cfg: InitModelConfig, resume: str | None = None) -> dict:
    text = load_corpus_text(cfg.data.corpus, "train") if cfg.data.tokenizer.startswith("bpe:") else None
    tok = load_tokenizer(cfg.data.tokenizer, corpus_text=text, cache_dir=cache_dir(cfg.data.cache_dir) / "tokenizers")
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(cfg.run.seed)  # the weights are a function of the seed; the caller's stream is restored
    try:
        model = GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=len(tok), bos_token_id=tok.eos_token_id,
                                                 eos_token_id=tok.eos_token_id, **SHAPES[cfg.shape]))
    finally:
        torch.random.set_rng_state(generator_state)
    out = Run.create(cfg.run.out_dir, cfg.run.name, cfg).start()
    tok.save_pretrained(out.dir)
    model.save_pretrained(out.dir)
    params = sum(p.numel() for p in model.parameters())
    results = {"shape": cfg.shape, "params": params, "vocab_size": len(tok), "tokenizer": cfg.data.tokenizer}
    out.write_results(results)
    print(f"{out.dir}: {cfg.shape}-shaped GPT-NeoX, {params / 1e6:.2f}M parameters, vocabulary {len(tok)}")
    return results
