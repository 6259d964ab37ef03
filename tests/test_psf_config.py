"""PSF's configs live in forethought.psf.config, which imports no torch; the modules that use them re-export them
under their old names (the CLI names those)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from forethought.core.errors import ForethoughtError
from forethought.psf import config

CLASSES = {"recipe": "RecipeConfig", "generate": "SampleConfig", "diagnose": "DiagnoseConfig",
           "evaluate": "EvalConfig", "token_flow_run": "TokenFlowRunConfig", "model": "PSFModelConfig",
           "prior": "PriorConfig", "ar": "ARModelConfig", "token_flow": "TokenFlowConfig"}


def test_psf_config_imports_no_torch():
    """A fresh interpreter (this one already holds torch): the package and its config module load without torch
    (nor numpy), and every command's config can be built and validated there."""
    code = ("import sys, forethought.psf.config as c\n"
            "c.RecipeConfig().validate(); c.SampleConfig(recipe_run='r').validate(); "
            "c.DiagnoseConfig(recipe_run='r').validate(); c.EvalConfig(recipe_run='r').validate(); "
            "c.TokenFlowRunConfig(recipe_run='r').validate()\n"
            "print(sorted(m for m in ('torch', 'numpy', 'transformers', 'accelerate') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout


def test_old_names_are_the_config_classes():
    import importlib

    for module, name in CLASSES.items():
        assert getattr(importlib.import_module(f"forethought.psf.{module}"), name) is getattr(config, name)
    import forethought.psf as psf

    assert psf.PSFModelConfig is config.PSFModelConfig and psf.load_recipe.__module__ == "forethought.psf.generate"
    with pytest.raises(AttributeError):
        psf.no_such_name  # noqa: B018


def test_stage_features_are_checked_against_the_model():
    mcfg = config.PSFModelConfig(vocab_size=8, seq_len=12, blocks=4, max_blocks=6)
    config.StageFeatures(landing=True, codes=True, blocks=6).validate(mcfg)
    config.StageFeatures().validate(mcfg)  # blocks 0 = the config's
    with pytest.raises(ForethoughtError, match="positive multiple"):
        config.StageFeatures(blocks=5).validate(mcfg)
    with pytest.raises(ForethoughtError, match="exceeds model.max_blocks"):
        config.StageFeatures(blocks=12).validate(mcfg)
    entry = {"features": {"landing": True, "self_realized": True, "codes": False}, "blocks": 2}
    assert config.StageFeatures.from_results(entry) == config.StageFeatures(landing=True, codes=False, blocks=2)


def test_model_switches_are_given_not_set():
    """The PSF model's stage switches come in as one checked StageFeatures (constructor or configure), and the
    attributes that read them cannot be set from outside."""
    from forethought.psf.model import PSFModel

    mcfg = config.PSFModelConfig(vocab_size=8, seq_len=12, blocks=4, max_blocks=6, n_embd=8, enc_layers=1,
                                 dec_layers=1, n_head=2, code_dim=2)
    m = PSFModel(mcfg)
    assert (m.landing, m.use_codes, m.blocks) == (False, False, 4)
    assert m.configure(config.StageFeatures(landing=True, codes=True, blocks=6)) is m
    assert (m.landing, m.use_codes, m.blocks, m.block_len) == (True, True, 6, 2)
    with pytest.raises(AttributeError):
        m.landing = False
    with pytest.raises(ForethoughtError, match="exceeds model.max_blocks"):
        m.configure(config.StageFeatures(blocks=12))
    assert m.blocks == 6  # a refused configuration changes nothing
