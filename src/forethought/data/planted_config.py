"""The settings of the planted corpus (:mod:`forethought.data.planted`), in a module that imports neither torch nor
numpy, so the configs that hold them (``psf recipe``'s ``data.planted``) load and are checked before the heavy
libraries."""

from __future__ import annotations

import math
from dataclasses import dataclass

from forethought.core.config import field
from forethought.core.errors import ForethoughtError

PLANTED = "planted"  # the corpus name


@dataclass
class PlantedConfig:
    topics: int = field(8, "M: topics, the hidden states of the block chain")
    vocab_size: int = field(64, "V: shared vocabulary (token ids 0 .. V-1)")
    topic_vocab: int = field(32, "tokens in each topic's random subset of the vocabulary (subsets overlap: with "
                                  "the defaults a token belongs to 4 topics on average)")
    blocks: int = field(8, "K: blocks per document (must equal the PSF model's blocks)")
    block_tokens: int = field(8, "tokens per block (blocks x block_tokens must equal the model's seq_len)")
    stay_prob: float = field(0.8, "probability that a block keeps the previous block's topic")
    concentration: float = field(0.3, "Dirichlet concentration of start and bigram rows over a topic's subset "
                                      "(small = sparse rows)")
    smoothing: float = field(0.01, "weight of the uniform distribution over the vocabulary in every row (> 0: "
                                   "every sequence has a finite likelihood)")
    train_documents: int = field(50_000, "training documents")
    valid_documents: int = field(2_000, "validation documents")
    test_documents: int = field(2_000, "test documents")
    seed: int = field(0, "generator seed (parameters and documents)")

    def validate(self) -> None:
        for key, least in (("topics", 2), ("vocab_size", 2), ("topic_vocab", 1), ("blocks", 2),
                           ("block_tokens", 1), ("train_documents", 1), ("valid_documents", 1),
                           ("test_documents", 1), ("seed", 0)):
            if getattr(self, key) < least:
                raise ForethoughtError(f"{key} must be at least {least}, got {getattr(self, key)}")
        if self.vocab_size > 65536:
            raise ForethoughtError(f"vocab_size must be at most 65536 (ids are stored as uint16), got "
                                   f"{self.vocab_size}")
        if self.topic_vocab > self.vocab_size:
            raise ForethoughtError(f"topic_vocab ({self.topic_vocab}) must not exceed vocab_size ({self.vocab_size})")
        if not 0 <= self.stay_prob <= 1:
            raise ForethoughtError(f"stay_prob must be in [0, 1], got {self.stay_prob}")
        if not (math.isfinite(self.concentration) and self.concentration > 0):
            raise ForethoughtError(f"concentration must be a number > 0, got {self.concentration}")
        if not 0 < self.smoothing <= 1:
            raise ForethoughtError(f"smoothing must be in (0, 1] (> 0 gives every sequence a finite likelihood), "
                                   f"got {self.smoothing}")

    @property
    def document_tokens(self) -> int:
        return self.blocks * self.block_tokens

    def documents(self, split: str) -> int:
        return getattr(self, f"{split}_documents")
