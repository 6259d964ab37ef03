"""Predictive State Flow (the paper's idea: generate a text as K blocks in parallel, each from a predictive state
that summarises the blocks before it): block-causal encoder -> per-block predictive states -> rectified-flow prior
over the K states -> block-causal decoder writing all blocks in parallel; plus the autoregressive baseline.

For benchmarks: :func:`load_recipe` rebuilds a finished ``psf recipe`` run; :func:`sample_psf` and
:func:`sample_ar` return (n, L) token ids. Importing this package (and sampling) does not import the training
loop; training lives in :mod:`forethought.psf.recipe` and :func:`forethought.psf.token_flow.train_token_flow`, the
evaluation (``psf eval``: sweeps, judge, MAUVE, intervals, cost) in :mod:`forethought.psf.evaluate`.
"""

from forethought.psf.ar import sample_ar
from forethought.psf.generate import RecipeArtifacts, load_recipe, sample_psf
from forethought.psf.model import PSFModel, PSFModelConfig, generate_blocks
from forethought.psf.prior import FlowPrior, PriorConfig, sample_prior
from forethought.psf.sampling import sample_tokens, top_p_probs

__all__ = ["FlowPrior", "PSFModel", "PSFModelConfig", "PriorConfig", "RecipeArtifacts", "generate_blocks",
           "load_recipe", "sample_ar", "sample_prior", "sample_psf", "sample_tokens", "top_p_probs"]
