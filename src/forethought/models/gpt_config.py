"""The configuration of our GPT (:mod:`forethought.models.gpt`), in a module that imports no torch, so a command's
config can be loaded and checked (and ``--help`` printed) before the heavy libraries load."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from forethought.core.config import at_least, field, positive, within
from forethought.core.errors import ForethoughtError


@dataclass
class GPTConfig:
    vocab_size: int = field(50257, "token vocabulary size (ignored when input_dim > 0)")
    n_positions: int = field(1024, "maximum sequence length (learned position embeddings)")
    n_embd: int = field(768, "model width d")
    n_layer: int = field(12, "number of transformer blocks")
    n_head: int = field(12, "attention heads")
    input_dim: int = field(0, "> 0: real-valued inputs of this size through a linear embedding")
    output_dim: int = field(0, "> 0: a linear regression head of this size instead of the LM head")
    attention: Literal["causal", "block_causal", "full"] = field("causal", "attention mask")
    block_size: int = field(0, "tokens per block for block_causal attention")
    dropout: float = field(0.0, "dropout on attention output, MLP output and embeddings")
    attn_dropout: float = field(0.0, "dropout on the attention probabilities (GPT-2's attn_pdrop)")
    bias: bool = field(True, "biases in linear layers and layer norms")
    layer_norm_eps: float = field(1e-5, "layer norm epsilon")
    tie_word_embeddings: bool = field(True, "share the LM head with the token embedding")
    activation: Literal["gelu_new", "relu"] = field(
        "gelu_new", "MLP nonlinearity: GPT-2's tanh-approximated GELU, or ReLU (the synthetic task's reference model)")
    final_norm: bool = field(True, "a LayerNorm before the head (GPT-2's ln_f); false = the head reads the raw "
                             "residual stream")
    init: Literal["gpt2", "torch", "reference"] = field(
        "gpt2", "linear layers' init: GPT-2's N(0, 0.02) with zero biases and 1/sqrt(2L)-scaled residual "
        "projections, or PyTorch's default (Kaiming-uniform); embedding tables are N(0, 0.02) either way. "
        "'reference' = the myopia paper's synthetic model: GPT-2's init for the blocks, PyTorch's default for a "
        "real-valued input layer and a regression head (same as gpt2 for token models)")

    def validate(self) -> None:
        at_least(self, 1, "n_positions", "n_embd", "n_layer", "n_head")
        at_least(self, 0, "input_dim", "output_dim", "block_size")
        if self.input_dim == 0:  # token inputs: the embedding table needs a vocabulary
            at_least(self, 1, "vocab_size")
        within(self, 0, 1, "dropout", "attn_dropout", high_open=True)
        positive(self, "layer_norm_eps")
        if self.n_embd % self.n_head:
            raise ForethoughtError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        if self.attention == "block_causal" and self.block_size <= 0:
            raise ForethoughtError("block_size must be > 0 for block_causal attention")
