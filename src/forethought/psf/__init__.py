"""Predictive State Flow (the paper's idea: generate a text as K blocks in parallel, each from a predictive state
that summarises the blocks before it): block-causal encoder -> per-block predictive states -> rectified-flow prior
over the K states -> block-causal decoder writing all blocks in parallel; plus the autoregressive baseline.

For benchmarks: :func:`load_recipe` rebuilds a finished ``psf recipe`` run; :func:`sample_psf` and
:func:`sample_ar` return (n, L) token ids. Importing this package (and sampling) does not import the training
loop; training lives in :mod:`forethought.psf.recipe` and :func:`forethought.psf.token_flow.train_token_flow`, the
evaluation (``psf eval``: sweeps, judge, MAUVE, intervals, cost) in :mod:`forethought.psf.evaluate`. Every
command's config lives in :mod:`forethought.psf.config`, which imports no torch; so that it stays so, the names
below are imported from their modules when first used (PEP 562), not when the package is.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {"sample_ar": "ar", "RecipeArtifacts": "generate", "load_recipe": "generate", "sample_psf": "generate",
          "PSFModel": "model", "generate_blocks": "model", "FlowPrior": "prior", "sample_prior": "prior",
          "PSFModelConfig": "config", "PriorConfig": "config", "sample_tokens": "sampling",
          "top_p_probs": "sampling"}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
