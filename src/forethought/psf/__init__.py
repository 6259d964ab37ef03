"""Predictive State Flow (SPEC §2): block-causal encoder -> per-block predictive states -> rectified-flow prior
over the K states -> block-causal decoder writing all blocks in parallel; plus the autoregressive baseline.

For benchmarks: :func:`load_recipe` rebuilds a finished ``psf recipe`` run; :func:`sample_psf` and
:func:`sample_ar` return (n, L) token ids.
"""

from forethought.psf.ar import sample_ar
from forethought.psf.model import PSFModel, PSFModelConfig, generate_blocks
from forethought.psf.prior import FlowPrior, PriorConfig, sample_prior
from forethought.psf.recipe import RecipeArtifacts, load_recipe, sample_psf
from forethought.psf.sampling import sample_tokens, top_p_probs

__all__ = ["FlowPrior", "PSFModel", "PSFModelConfig", "PriorConfig", "RecipeArtifacts", "generate_blocks",
           "load_recipe", "sample_ar", "sample_prior", "sample_psf", "sample_tokens", "top_p_probs"]
