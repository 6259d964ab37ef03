"""PSF's models built and loaded, and its data: what ``psf recipe`` trains and what sampling, diagnosis and
evaluation rebuild, in one place beside the model (neither imports the training loop).

Each model kind has one save and one load: its record (:func:`forethought.core.checkpoint.model_record`, the
checkpoint's ``config.json``: type, format version, its config section and what else its constructor needs) and
its loader (:func:`forethought.core.checkpoint.load_pretrained`: manifest checked, record checked, the config
read through the config loader, the weights loaded), so a checkpoint rebuilds its model on its own:

- the PSF model (``forethought-psf``): :class:`PSFModelConfig` (the vocabulary set) and the stage's
  :class:`StageFeatures` (landing, codes, K);
- a flow prior (``forethought-psf-prior``): :class:`PriorConfig` and the trajectory layout (dim, K, state part,
  prompt lead);
- the AR baseline: our GPT's own record (:meth:`forethought.models.gpt.GPT.checkpoint_record`, with the bos
  id).

Data: :func:`load_data` (train / valid tokens and the tokenizer, from the corpus and the cache) for training;
a run folder's own tokenizer copy (:func:`recipe_tokenizer`) for everything that loads a finished run.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from forethought.core.checkpoint import config_from_record, load_pretrained, model_record
from forethought.core.env import cache_dir
from forethought.core.errors import ForethoughtError
from forethought.data.corpora import load_token_splits
from forethought.data.planted import PLANTED, PlantedTokenizer, planted_split
from forethought.psf.config import PSFDataConfig, StageFeatures, check_planted_shape
from forethought.psf.model import PSFModel, PSFModelConfig
from forethought.psf.prior import FlowPrior, PriorConfig

PSF_MODEL, PRIOR = "forethought-psf", "forethought-psf-prior"  # their records' model_type

# What later steps read from each kind of stage result (the recipe's report and resume, load_recipe).
STAGE_KEYS = {"model": ("blocks", "features", "steps", "train_wall_s"),
              "prior": ("params", "blocks", "dim", "steps", "train_wall_s"),
              "ar": ("steps", "training_tokens", "train_wall_s")}


def stage_kind(name: str) -> Literal["model", "prior", "ar"]:
    """``base`` .. ``codes`` and ``blocks<K'>`` are model stages, ``prior`` and ``prior_blocks<K'>`` priors."""
    if name == "ar":
        return "ar"
    return "prior" if name.startswith("prior") else "model"


# ---- data ------------------------------------------------------------------------------------------------------

def load_data(cfg: PSFDataConfig, seq_len: int) -> tuple[np.ndarray, np.ndarray, Any]:
    """Train/valid token arrays and the tokenizer (for the planted corpus: its documents, concatenated, and a
    stand-in tokenizer that writes ids as numbers)."""
    if cfg.corpus == PLANTED:
        check_planted_shape(cfg, seq_len, cfg.planted.blocks)  # the length; the recipe checks model.blocks at load
        return (planted_split(cfg.planted, "train"), planted_split(cfg.planted, "valid"),
                PlantedTokenizer(cfg.planted.vocab_size, cfg.planted.block_tokens))
    from forethought.data.corpora import load_corpus_text
    from forethought.data.tokenizers import load_tokenizer

    cache = cache_dir(cfg.cache_dir)
    tr, va = load_token_splits(cfg.corpus, cfg.tokenizer, cache, seq_len + 1, f"model.seq_len {seq_len}")
    text = load_corpus_text(cfg.corpus, "train") if cfg.tokenizer.startswith("bpe:") else None
    tok = load_tokenizer(cfg.tokenizer, corpus_text=text, cache_dir=cache / "tokenizers")
    return tr, va, tok


def valid_tokens(cfg: PSFDataConfig, seq_len: int) -> np.ndarray:
    """The valid split's tokens (prompts and evaluation windows): from the corpus, not the run folder."""
    if cfg.corpus == PLANTED:
        return planted_split(cfg.planted, "valid")
    return load_token_splits(cfg.corpus, cfg.tokenizer, cache_dir(cfg.cache_dir), seq_len + 1,
                             f"model.seq_len {seq_len}")[1]


def recipe_tokenizer(run_dir: Path, cfg: PSFDataConfig, seq_len: int) -> Any:
    """A recipe run's tokenizer: the copy in its folder first (written when it trained), so sampling needs
    neither the corpus nor the cache; the planted corpus's stand-in is defined by its settings."""
    if cfg.corpus == PLANTED:
        return PlantedTokenizer(cfg.planted.vocab_size, cfg.planted.block_tokens)
    from forethought.data.tokenizers import run_tokenizer

    saved = run_tokenizer(run_dir)
    return saved if saved is not None else load_data(cfg, seq_len)[2]


# ---- the PSF model -----------------------------------------------------------------------------------------------

def build_psf(mcfg: PSFModelConfig, vocab: int, seed: int) -> PSFModel:
    torch.manual_seed(seed)
    return PSFModel(replace(mcfg, vocab_size=vocab))


def configure(model: PSFModel, feats: dict[str, bool], blocks: int) -> PSFModel:
    """``model`` switched to a recipe stage given as its results.json entry's parts (``features``, ``blocks``)."""
    return model.configure(StageFeatures(landing=feats["landing"], codes=feats["codes"], blocks=blocks))


def psf_record(model: PSFModel, feats: dict[str, bool]) -> dict[str, Any]:
    """The PSF model's checkpoint record at a stage (``feats``: the stage's cumulative switches, kept for
    reading; the model is rebuilt from its config and :class:`StageFeatures`)."""
    return model_record(PSF_MODEL, asdict(model.config), features=asdict(model.features), stage_features=feats)


def load_psf(ckpt: Path) -> PSFModel:
    """A PSF model stage from its checkpoint alone (on the CPU, in training mode)."""
    def build(record: dict[str, Any]) -> PSFModel:
        where = f"{ckpt}/config.json"
        cfg = config_from_record(PSFModelConfig, record["config"], where)
        f = record.get("features")
        try:
            feats = StageFeatures(landing=bool(f["landing"]), codes=bool(f["codes"]), blocks=int(f["blocks"]))
        except (TypeError, KeyError, ValueError):
            raise ForethoughtError(f"{where} is corrupt: 'features' needs landing, codes and blocks") from None
        return PSFModel(cfg, feats)
    return load_pretrained(ckpt, PSF_MODEL, build)[0]


# ---- flow priors -------------------------------------------------------------------------------------------------

def prompt_lead(model: PSFModel) -> int:
    """States a prompt of m blocks fixes beyond the m-th: 1 for predictive states (s_{m+1} sums up the prompt)."""
    return 1 if model.config.states == "predictive" else 0


def prior_for(model: PSFModel, cfg: PriorConfig, dim: int, blocks: int) -> FlowPrior:
    """A flow prior over ``model``'s (blocks, dim) trajectories, knowing their layout (state part, prompt lead),
    so that a conditioned prior trains on the same known entries that prompted sampling fixes."""
    return FlowPrior(cfg, dim, blocks, model.state_dim, prompt_lead(model))


def prior_record(prior: FlowPrior, with_codes: bool) -> dict[str, Any]:
    return model_record(PRIOR, asdict(prior.config), dim=prior.dim, blocks=prior.blocks, state_dim=prior.state_dim,
                        prompt_lead=prior.prompt_lead, with_codes=with_codes)


def load_prior(ckpt: Path) -> FlowPrior:
    """A flow prior from its checkpoint alone (on the CPU, in training mode)."""
    def build(record: dict[str, Any]) -> FlowPrior:
        cfg = config_from_record(PriorConfig, record["config"], f"{ckpt}/config.json")
        return FlowPrior(cfg, *_ints(record, ckpt, "dim", "blocks", "state_dim", "prompt_lead"))
    return load_pretrained(ckpt, PRIOR, build)[0]


def _ints(record: dict[str, Any], ckpt: Path, *keys: str) -> list[int]:
    values = [record.get(k) for k in keys]
    bad = [k for k, v in zip(keys, values, strict=True) if not isinstance(v, int) or isinstance(v, bool)]
    if bad:
        raise ForethoughtError(f"{ckpt}/config.json is corrupt: {', '.join(bad)} must be integers")
    return values  # type: ignore[return-value]
