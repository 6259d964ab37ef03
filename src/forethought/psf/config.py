"""Every configuration of ``forethought psf``, in a module that imports neither torch nor numpy: a command's config is
loaded and checked (and ``--help`` printed) before the heavy libraries load. The modules that use these classes
re-export them under their old names (``forethought.psf.recipe:RecipeConfig`` and so on).

- the models: :class:`PSFModelConfig`, :class:`PriorConfig`, :class:`ARModelConfig`, :class:`TokenFlowConfig`,
  and :class:`StageFeatures` (the switches a recipe stage turns on in the PSF model);
- the data: :class:`PSFDataConfig`;
- the commands: :class:`RecipeConfig` (``psf recipe``, with its stage sections), :class:`SampleConfig`
  (``psf sample``), :class:`DiagnoseConfig` (``psf diagnose``), :class:`EvalConfig` (``psf eval``),
  :class:`TokenFlowRunConfig` (``psf token-flow``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from forethought.core.config import at_least, field, finite, positive, within
from forethought.core.errors import ForethoughtError
from forethought.core.run import RunConfig
from forethought.core.train_config import TrainConfig
from forethought.data.planted_config import PLANTED, PlantedConfig

MODEL_STAGES = ("base", "landing", "self_realized", "codes")
STATE_ONLY_PRIOR = "prior_state_only"  # the state-only variant's prior (recipe prior.state_only_variant)
BASELINES = ("ar",)
OWN_MODELS = ("psf", "psf_mean_trajectory", "psf_state_only", "ar")  # psf eval: a recipe run's own models


# ---- models -------------------------------------------------------------------------------------------------

@dataclass
class PSFModelConfig:
    vocab_size: int = field(0, "token vocabulary (0 = from the tokenizer at run time)")
    seq_len: int = field(1024, "L: tokens per sequence")
    blocks: int = field(8, "K: blocks per sequence (block length L/K)")
    max_blocks: int = field(0, "largest K the model will be used with (sizes the decoder's position table); "
                            "0 = blocks")
    n_embd: int = field(768, "width of encoder and decoder")
    enc_layers: int = field(6, "encoder transformer blocks")
    dec_layers: int = field(6, "decoder transformer blocks")
    n_head: int = field(12, "attention heads")
    dropout: float = field(0.0, "dropout in encoder and decoder")
    input_dropout: float = field(0.0, "in training, this fraction of the decoder's own input tokens (x_k,1..n-1 "
                                 "of every branch) is replaced (input_dropout_with), so that the decoder must "
                                 "lean on its states; never at evaluation or sampling")
    input_dropout_with: Literal["mask", "random"] = field(
        "mask", "what replaces a dropped input token: mask = a learned vector (starts at zero), random = a token "
        "drawn uniformly from the vocabulary")
    state_dim: int = field(0, "state size (0 = n_embd)")
    pool: Literal["mean", "last"] = field("mean", "how a block's token features become its state")
    states: Literal["predictive", "content"] = field("predictive", "predictive: s_k sums up blocks < k "
                                                     "(s_1 learned); content (ablation): s_k encodes block k")
    state_norm: Literal["batch", "none"] = field(
        "batch", "batch: standardise each block index's summaries over the batch (running estimates at evaluation); "
        "without it the decoder learns to read the states as a constant")
    state_norm_momentum: float = field(0.05, "update rate of the running estimates of state_norm")
    code_dim: int = field(64, "realization code size")
    free_bits: float = field(1.0, "KL budget in nats per token (free bits, per block)")
    code_in_init: Literal["zero", "normal"] = field(
        "zero", "the decoder's code input when the codes stage starts: zero (the previous stage's function "
        "unchanged; with the code head also at zero neither gets an expected gradient, a saddle) or normal "
        "(std 0.02: the code head gets a gradient from the first step)")
    kl_weight: float = field(1.0, "weight of the (free-bits) KL term")
    # The code channel's ablation options (issue 31); each default keeps the model as it was.
    code_init_sigma: float = field(
        1.0, "the code posterior's sigma when the codes stage starts (the code head's log-variance bias set to "
        "2 log sigma); 1 = N(0, I), the prior itself. Small sigma: the code carries its mean from the first step")
    code_warmup_steps: int = field(
        0, "codes stage: for its first N steps the decoder gets the posterior mean (no noise), a deterministic "
        "warm-up; the KL is charged as usual")
    code_enters: Literal["query", "inputs"] = field(
        "query", "where branch k's code enters the decoder: query = its query slot only; inputs = the query slot "
        "and every input position x_k,1..n-1 of the branch (added to the token embedding)")
    code_lr_factor: float = field(1.0, "learning-rate factor of the code layers (code head, code input, and the "
                                  "BN-VAE shift) in every stage that trains codes")
    free_bits_block: float = field(0.0, "> 0: the KL budget per block in nats (e.g. log of the number of a "
                                   "block's plans), instead of free_bits x block length")
    code_mean_norm: Literal["none", "batch"] = field(
        "none", "batch (BN-VAE, Zhu et al. 2020): standardise each block index's posterior means over the batch, "
        "then scale by the fixed code_mean_gamma and shift by a learned vector, so that the expected KL per "
        "dimension stays >= gamma^2/2 and the posterior cannot collapse onto the prior")
    code_mean_gamma: float = field(0.5, "code_mean_norm batch: the fixed scale of the standardised means")
    code_dropout: float = field(
        0.0, "in training, the decoder's code input is replaced by zeros with this probability "
        "(per code_dropout_unit), so that zero codes - the state-only configuration's input - are an input the "
        "decoder has trained on; the KL is charged either way; never at evaluation or sampling")
    code_dropout_unit: Literal["block", "sequence"] = field(
        "block", "code_dropout draws per (sequence, block), or once per sequence (all its blocks' codes at once)")

    def validate(self) -> None:
        """Messages name keys within this section; the recipe prefixes the section (``model: ...``)."""
        check_blocks(self.seq_len, self.blocks)
        if self.max_blocks and self.max_blocks < self.blocks:
            raise ForethoughtError(f"max_blocks ({self.max_blocks}) must be >= blocks ({self.blocks})")
        if self.n_head < 1 or self.n_embd % self.n_head:
            raise ForethoughtError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        at_least(self, 1, "n_embd")  # 0 passes the divisibility check
        at_least(self, 0, "vocab_size")
        finite(self, "free_bits", "kl_weight", "free_bits_block")  # NaN passes '< 0' below
        for key in ("enc_layers", "dec_layers", "code_dim"):
            if getattr(self, key) < 1:
                raise ForethoughtError(f"{key} must be at least 1, got {getattr(self, key)}")
        for key in ("state_dim", "free_bits", "kl_weight", "code_warmup_steps", "free_bits_block"):
            if getattr(self, key) < 0:
                raise ForethoughtError(f"{key} must not be negative, got {getattr(self, key)}")
        for key in ("dropout", "input_dropout", "code_dropout"):
            if not 0 <= getattr(self, key) < 1:
                raise ForethoughtError(f"{key} must be in [0, 1), got {getattr(self, key)}")
        for key in ("code_init_sigma", "code_lr_factor", "code_mean_gamma"):
            value = getattr(self, key)
            if not (math.isfinite(value) and value > 0):
                raise ForethoughtError(f"{key} must be a number > 0, got {value}")
        if not 0 < self.state_norm_momentum <= 1:
            raise ForethoughtError(f"state_norm_momentum must be in (0, 1], got {self.state_norm_momentum}")


def prior_stage(model_stage: str, state_only: bool = False) -> str:
    """The name of the prior stage trained on model stage ``model_stage`` (the main one, or with ``state_only`` the
    state-only variant's): ``prior`` / ``prior_state_only`` after the main stages, ``prior_blocks<K'>`` /
    ``prior_state_only_blocks<K'>`` after a longer-blocks stage ``blocks<K'>``."""
    base = STATE_ONLY_PRIOR if state_only else "prior"
    return f"{base}_{model_stage}" if model_stage.startswith("blocks") else base


def check_blocks(L: int, K: int) -> None:
    if K <= 0 or L <= 0 or L % K:
        raise ForethoughtError(f"sequence length L={L} must be a positive multiple of the block count K={K}")


@dataclass(frozen=True)
class StageFeatures:
    """The switches of a PSF model that the recipe turns on stage by stage (cumulative: a stage has its own
    feature and every earlier stage's): landing inputs, realization codes, and the block count K it decodes
    now (``blocks`` 0 = the config's). The model's parameters exist whatever they say, so that every stage loads
    the previous stage's checkpoint unchanged; they are given to the model (:meth:`PSFModel.configure`, or its
    constructor), never set on it attribute by attribute. Self-realized prefixes are a training choice and live
    in the recipe."""

    landing: bool = False
    codes: bool = False
    blocks: int = 0

    def validate(self, cfg: PSFModelConfig) -> None:
        """Against the model they switch: K must cut its sequence into equal blocks and fit its decoder."""
        K = self.blocks or cfg.blocks
        check_blocks(cfg.seq_len, K)
        if K > max(cfg.max_blocks, cfg.blocks):
            raise ForethoughtError(f"K={K} exceeds model.max_blocks; raise model.max_blocks")

    @classmethod
    def from_results(cls, entry: dict[str, Any]) -> StageFeatures:
        """A model stage's entry of a recipe run's results.json (``features`` and ``blocks``)."""
        f = entry["features"]
        return cls(landing=bool(f["landing"]), codes=bool(f["codes"]), blocks=int(entry["blocks"]))


@dataclass
class PriorConfig:
    n_embd: int = field(256, "prior transformer width")
    n_layer: int = field(4, "prior transformer blocks")
    n_head: int = field(4, "prior attention heads")
    time_mu: float = field(0.0, "logit-normal time: mean of the logit (t = 1 is data)")
    time_sigma: float = field(1.0, "logit-normal time: std of the logit")
    min_gap: float = field(0.05, "clamp 1 - t below at this value in the velocity loss")
    steps: int = field(50, "Euler steps at sampling")
    state_only: bool = field(False, "model states only; the decoder then gets zero codes")
    code_data: Literal["draw", "mean"] = field(
        "draw", "the codes the prior learns: draw = one posterior draw per block (the paper; the decoder was trained "
        "on draws), mean = the posterior mean (the noise-free part of each block's code)")
    stats_sequences: int = field(256, "training sequences for the standardisation statistics and mean trajectory")
    conditioning: Literal["none", "known_mask"] = field(
        "none", "none: unconditional, prompts fixed by replacement only; known_mask: trained with a random number "
        "of known leading blocks (uniform 0..most) given as input channels [x_t, known·mask, mask], loss on the "
        "unknown entries only")

    def validate(self) -> None:
        if self.n_head < 1 or self.n_embd % self.n_head:
            raise ForethoughtError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        at_least(self, 1, "n_embd")  # 0 passes the divisibility check
        finite(self, "time_mu")
        for key in ("n_layer", "steps", "stats_sequences"):
            if getattr(self, key) < 1:
                raise ForethoughtError(f"{key} must be at least 1, got {getattr(self, key)}")
        if not 0 < self.min_gap <= 1:
            raise ForethoughtError(f"min_gap must be in (0, 1], got {self.min_gap}")
        if not self.time_sigma > 0:
            raise ForethoughtError(f"time_sigma must be > 0, got {self.time_sigma}")


@dataclass
class ARModelConfig:
    n_embd: int = field(768, "width")
    n_layer: int = field(12, "transformer blocks")
    n_head: int = field(12, "attention heads")
    dropout: float = field(0.0, "dropout")

    def validate(self) -> None:
        if self.n_head < 1 or self.n_embd % self.n_head:
            raise ForethoughtError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        if self.n_layer < 1:
            raise ForethoughtError(f"n_layer must be at least 1, got {self.n_layer}")
        at_least(self, 1, "n_embd")  # 0 passes the divisibility check
        if not 0 <= self.dropout < 1:
            raise ForethoughtError(f"dropout must be in [0, 1), got {self.dropout}")


@dataclass
class TokenFlowConfig:
    """The token-level flow baseline (forethought.psf.token_flow). Defaults are ELF-B's recipe (github
    lillian039/ELF, train_owt_ELF-B.yml and uncond_sampling_configs.yml) where it carries over; the sizes are
    ours (``psf token-flow`` matches them to PSF). ``TABLE_FLOW`` in forethought.psf.token_flow is the earlier
    baseline (a frozen token table, logits head, plain Euler)."""

    seq_len: int = field(64, "tokens per sequence L")
    n_embd: int = field(256, "denoiser width")
    n_layer: int = field(4, "denoiser transformer blocks")
    n_head: int = field(4, "denoiser attention heads")
    latents: Literal["contextual", "table"] = field(
        "contextual", "what the flow models: contextual = a frozen encoder's hidden states of the whole window "
        "(ELF: T5's encoder; here the AR baseline's last layer), table = the frozen token table's rows")
    latent_layer: int = field(-1, "contextual latents: which of the frozen encoder's hidden states (-1: the last, "
                              "after its final norm, the LM head's input; k >= 0: the residual stream after block k, "
                              "0 = the token and position embeddings)")
    latent_encoder: str = field("", "contextual latents: '' = the recipe run's frozen AR baseline (causal); else a "
                                "Hugging Face encoder by id or folder (google-t5/t5-small: ELF-B's), frozen, whose "
                                "hidden states of the whole window are the latents (bidirectional); it must read "
                                "the recipe tokenizer's ids")
    latent_mean: float = field(0.0, "contextual latents: x0 = (latent - latent_mean) / latent_std (ELF-B: 0)")
    latent_std: float = field(0.0, "contextual latents: the scale (ELF-B: 0.2 for T5-small's outputs; 0 = measured "
                              "on training windows, so x0 has unit standard deviation)")
    head: Literal["logits", "embedding"] = field(
        "embedding", "embedding: the network predicts x̂ directly (ELF); logits: an LM head, x̂ = softmax·E (table "
        "latents only)")
    rounding: Literal["decoder", "lm_head", "nearest"] = field(
        "decoder", "final latent -> tokens: decoder = the cross-entropy branch's head at t = 1 (ELF), lm_head = "
        "argmax of the last step's logits, nearest = nearest table row")
    noise_scale: float = field(2.0, "x_t = t·x + (1 - t)·noise_scale·ε, and sampling starts from noise_scale·ε "
                               "(ELF-B: denoiser_noise_scale 2)")
    time_mu: float = field(-1.5, "logit-normal time: mean of the logit, t = 1 is data (ELF-B: denoiser_p_mean)")
    time_sigma: float = field(0.8, "logit-normal time: std of the logit (ELF-B: denoiser_p_std)")
    min_gap: float = field(0.05, "1 - t is clamped below at this value in the velocity (ELF-B: t_eps)")
    decoder_prob: float = field(0.2, "the fraction of training steps that train the cross-entropy decoder branch "
                                "instead of the flow (ELF-B: decoder_prob; 0 = no decoder branch)")
    decoder_noise_scale: float = field(5.0, "decoder branch input λ·x0 + (1 - λ)·scale·ε (ELF-B: 5)")
    decoder_time_mu: float = field(0.8, "decoder branch: λ = sigmoid(N(mu, sigma)) per token (ELF-B: 0.8)")
    decoder_time_sigma: float = field(0.8, "decoder branch: the std of λ's logit (ELF-B: 0.8)")
    self_cond: bool = field(True, "self-conditioning on the previous x̂ (ELF-B: on)")
    self_cond_prob: float = field(0.5, "training: fraction of examples that get a self-conditioning estimate")
    self_cond_guidance: bool = field(True, "self-conditioning guidance distilled into training (ELF-B: "
                                     "num_self_cond_cfg_tokens 4): the target is moved by (1 - 1/w)·(x̂_cond - "
                                     "x̂_uncond) for a scale w the network reads as an input")
    guidance_min: float = field(0.5, "training: w is log-uniform on (1 + min, 1 + max) minus 1 (ELF-B: 0.5)")
    guidance_max: float = field(5.0, "training: the upper end of w (ELF-B: 5)")
    guidance_scale: float = field(3.0, "sampling: the guidance scale w fed to the network (ELF-B: 3)")
    time_dim: int = field(32, "sinusoidal features of t (and of w) concatenated to every position's input")
    ce_weight: float = field(0.0, "weight of an extra cross-entropy loss on the logits (head=logits only)")
    sampler: Literal["sde", "euler"] = field("sde", "sde: ELF's stochastic sampler (each step first moves back to "
                                             "t·(1 - γ·h) with fresh noise, the last step plain); euler: the ODE")
    sde_gamma: float = field(1.5, "sde: the churn γ per unit time (ELF-B, 32 steps: 1.5)")
    sample_schedule: Literal["logit_normal", "uniform"] = field(
        "logit_normal", "sampling times: logit_normal = 0, the sorted draws of steps - 1 training times, 1 (ELF); "
        "uniform = evenly spaced")
    steps: int = field(32, "network passes per document at sampling (ELF-B: 32)")

    def validate(self) -> None:
        try:
            at_least(self, 0, "latent_std", "sde_gamma", "guidance_min", "ce_weight")
            at_least(self, -1, "latent_layer")
            if self.rounding == "lm_head" and self.head != "logits":
                raise ForethoughtError("rounding=lm_head needs head=logits; use rounding=decoder or nearest")
            if self.ce_weight and self.head != "logits":
                raise ForethoughtError("ce_weight > 0 needs head=logits")
            if self.latent_encoder and self.latents != "contextual":
                raise ForethoughtError("latent_encoder applies to contextual latents (latents: contextual)")
            if self.latents == "contextual" and (self.head == "logits" or self.rounding == "nearest"):
                raise ForethoughtError("contextual latents have no token table to take an expectation or a nearest "
                                       "row over: use head=embedding and rounding=decoder")
            if self.rounding == "decoder" and self.decoder_prob == 0:
                raise ForethoughtError("rounding=decoder needs the decoder branch (decoder_prob > 0)")
            if self.self_cond_guidance and not (self.self_cond and self.self_cond_prob > 0):
                raise ForethoughtError("self_cond_guidance needs self_cond with self_cond_prob > 0")
            if not 0.0 <= self.self_cond_prob <= 1.0:
                raise ForethoughtError(f"self_cond_prob must be in [0, 1], got {self.self_cond_prob}")
            within(self, 0, 1, "decoder_prob")
            if self.decoder_prob == 1:
                raise ForethoughtError("decoder_prob must be below 1 (the flow must train too)")
            at_least(self, 1, "seq_len", "n_embd", "n_layer", "n_head", "time_dim", "steps")
            if self.n_embd % self.n_head:
                raise ForethoughtError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
            finite(self, "time_mu", "decoder_time_mu", "latent_mean")
            positive(self, "time_sigma", "decoder_time_sigma", "noise_scale", "decoder_noise_scale",
                     "guidance_scale")
            finite(self, "guidance_max")
            if self.guidance_max < self.guidance_min:
                raise ForethoughtError(f"guidance_max ({self.guidance_max}) must be at least guidance_min "
                                       f"({self.guidance_min})")
            within(self, 0, 1, "min_gap")
            if self.min_gap == 0:
                raise ForethoughtError("min_gap must be in (0, 1], got 0")
        except ForethoughtError as e:  # this section's messages name it, as the checks above do
            raise ForethoughtError(f"token_flow.{e}") from None


# ---- data ---------------------------------------------------------------------------------------------------

@dataclass
class PSFDataConfig:
    corpus: str = field("wikitext-2", "corpus name (wikitext-2, tinyshakespeare, tinystories, generated, planted), "
                        "a .txt path, or hf:<dataset>")
    tokenizer: str = field("gpt2", "gpt2 | bpe:<N> | an HF tokenizer id (not used by the planted corpus)")
    eval_sequences: int = field(256, "validation windows (non-overlapping, from the start of the valid split)")
    cache_dir: str = field("", "token/tokenizer cache ('' = FORETHOUGHT_CACHE or ~/.cache/forethought)")
    planted: PlantedConfig = field(PlantedConfig(), "corpus 'planted': token ids from a topic HMM over blocks with "
                                   "an exact likelihood (documents of blocks x block_tokens = model.seq_len tokens)")

    def validate(self) -> None:
        if self.eval_sequences < 1:
            raise ForethoughtError(f"eval_sequences must be at least 1, got {self.eval_sequences}")
        if self.corpus == PLANTED:
            try:
                self.planted.validate()
            except ForethoughtError as e:
                raise ForethoughtError(f"planted: {e}") from None


def check_planted_shape(cfg: PSFDataConfig, seq_len: int, blocks: int) -> None:
    """With the planted corpus, PSF's windows must be whole documents and its blocks the planted blocks."""
    p = cfg.planted
    if cfg.corpus == PLANTED and (seq_len != p.document_tokens or blocks != p.blocks):
        raise ForethoughtError(f"data.planted: a document is {p.blocks} blocks of {p.block_tokens} tokens, and PSF's "
                               f"windows and blocks must be its documents and blocks: set model.seq_len "
                               f"{p.document_tokens} and model.blocks {p.blocks} (got {seq_len} and {blocks})")


# ---- psf recipe ---------------------------------------------------------------------------------------------

@dataclass
class StageConfig:
    enabled: bool = field(True, "train this stage (its feature stays on in later stages either way)")
    train: TrainConfig = field(TrainConfig(steps=100, batch_size=16, lr=1e-3, log_every=10), "optimisation")


@dataclass
class RolloutConfig:
    prob: float = field(0.5, "per block: probability of feeding the self-realized state instead of the clean one")
    temperature: float = field(0.65, "rollout sampling temperature (0 = greedy)")
    top_p: float = field(0.95, "rollout nucleus, in (0, 1]")

    def validate(self) -> None:
        if not 0 <= self.prob <= 1:
            raise ForethoughtError(f"prob must be in [0, 1], got {self.prob}")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ForethoughtError(f"temperature must be a number >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ForethoughtError(f"top_p must be in (0, 1], got {self.top_p}")


@dataclass
class PriorStageConfig:
    enabled: bool = field(True, "train the flow prior")
    model: PriorConfig = field(PriorConfig(), "prior network, time sampling, sampler")
    train: TrainConfig = field(TrainConfig(steps=200, batch_size=32, lr=1e-3, log_every=10), "optimisation")
    state_only_variant: bool = field(
        False, "also train a second prior, over the states only, on the same code-trained decoder (stage "
        "prior_state_only, and prior_state_only_blocks<K'> after each longer-blocks stage, each warm-started from "
        "the previous one; the decoder then gets zero codes): the paper's state-only configuration beside the main "
        "one (prior over states + codes). Needs the codes stage")


@dataclass
class LongerBlocksConfig:
    blocks: list[int] = field([], "the block-size schedule after the main stages: retrain the model at each of these "
                              "block counts K' in turn (fewer blocks: longer ones; the paper's 64/32/16/8 is "
                              "model.blocks 64 and [32, 16, 8]), each model and prior stage warm-started from the "
                              "previous one")
    train: TrainConfig = field(TrainConfig(steps=100, batch_size=16, lr=5e-4, log_every=10), "model stages")
    prior_train: TrainConfig = field(TrainConfig(steps=100, batch_size=32, lr=5e-4, log_every=10), "prior stages")


@dataclass
class ARStageConfig:
    model: ARModelConfig = field(ARModelConfig(), "autoregressive GPT")
    train: TrainConfig = field(TrainConfig(steps=0, batch_size=16, lr=1e-3, log_every=10),
                               "optimisation (steps 0 = as many training tokens as the PSF model stages)")


@dataclass
class RecipeConfig:
    run: RunConfig = field(RunConfig(name="psf-recipe"), "run folder, seed, device")
    data: PSFDataConfig = field(PSFDataConfig(), "corpus and tokenisation")
    model: PSFModelConfig = field(PSFModelConfig(), "PSF encoder/decoder (vocab_size from the tokenizer)")
    rollout: RolloutConfig = field(RolloutConfig(), "self-realized prefix rollouts")
    base: StageConfig = field(StageConfig(), "stage 1: base model")
    landing: StageConfig = field(StageConfig(), "stage 2: + landing targets")
    self_realized: StageConfig = field(StageConfig(), "stage 3: + self-realized prefix")
    codes: StageConfig = field(StageConfig(), "stage 4: + realization codes")
    prior: PriorStageConfig = field(PriorStageConfig(), "stage 5: rectified-flow prior")
    longer_blocks: LongerBlocksConfig = field(LongerBlocksConfig(), "optional: longer blocks")
    baselines: list[Literal["ar"]] = field([], "baselines to train beside PSF: ar")
    ar: ARStageConfig = field(ARStageConfig(), "autoregressive baseline")
    stages_from: str = field("", "a finished 'psf recipe' run folder whose stages this run starts from: each "
                             "model stage trained with this run's settings (seed, precision, data, model, rollout, "
                             "its own and every earlier model stage's), then each prior (prior, then "
                             "prior_state_only) trained with the same settings, is copied instead of trained, in "
                             "order, up to the first that differs (e.g. the same run with a longer codes stage)")

    def validate(self) -> None:
        """Every stage's settings (models, optimisation, sampling), so that a bad one fails before anything
        trains or is written — not when its stage comes. Messages name the section (``prior.model: ...``)."""
        sections: dict[str, Any] = {"data": self.data, "model": self.model, "rollout": self.rollout,
                                    "prior.model": self.prior.model, "ar.model": self.ar.model}
        sections.update({f"{s}.train": getattr(self, s).train for s in MODEL_STAGES})
        sections.update({"prior.train": self.prior.train, "longer_blocks.train": self.longer_blocks.train,
                         "longer_blocks.prior_train": self.longer_blocks.prior_train, "ar.train": self.ar.train})
        longer = bool(self.longer_blocks.blocks)
        trained = {**{f"{s}.train": getattr(self, s).enabled for s in MODEL_STAGES}, "prior.train": self.prior.enabled,
                   "longer_blocks.train": longer, "longer_blocks.prior_train": longer and self.prior.enabled,
                   "ar.train": "ar" in self.baselines}
        for key, section in sections.items():
            check = getattr(section, "validate", None)
            try:
                if check is not None:
                    check()
                least = 0 if key == "ar.train" else 1  # ar: 0 = as many tokens as the model stages
                if trained.get(key) and section.steps < least:
                    raise ForethoughtError(f"steps must be at least {least}, got {section.steps}")
            except ForethoughtError as e:
                raise ForethoughtError(f"{key}: {e}") from None
        check_planted_shape(self.data, self.model.seq_len, self.model.blocks)
        planted = self.data.planted.blocks if self.data.corpus == PLANTED else 0
        schedule = [self.model.blocks, *self.longer_blocks.blocks]
        if len(set(schedule)) != len(schedule):
            raise ForethoughtError(f"longer_blocks.blocks: each block count of the schedule {schedule} (model.blocks "
                                   "first) must appear once")
        for k in self.longer_blocks.blocks:
            if planted and k > 0 and planted % k:
                raise ForethoughtError(f"longer_blocks.blocks: K'={k} must divide data.planted.blocks ({planted}), "
                                       "so that each longer block is whole planted blocks")
            try:
                check_blocks(self.model.seq_len, k)
            except ForethoughtError as e:
                raise ForethoughtError(f"longer_blocks.blocks: {e}") from None
            if k > max(self.model.max_blocks, self.model.blocks):
                raise ForethoughtError(f"longer_blocks.blocks: K'={k} exceeds model.blocks; set model.max_blocks "
                                       f">= {k} to size the decoder for it")
        for b in self.baselines:
            if b not in BASELINES:
                raise ForethoughtError(f"baselines: unknown baseline '{b}' (choose from {', '.join(BASELINES)})")
        if not any(getattr(self, s).enabled for s in MODEL_STAGES):
            raise ForethoughtError("every PSF model stage is disabled; enable at least one")
        if self.prior.state_only_variant:
            if not (self.prior.enabled and self.codes.enabled) or self.prior.model.state_only:
                raise ForethoughtError("prior.state_only_variant needs the codes stage and the prior enabled, "
                                       "and prior.model.state_only false (the main prior models states + codes)")


# ---- psf sample, diagnose, eval, token-flow -----------------------------------------------------------------

@dataclass
class SampleConfig:
    recipe_run: str = field("", "the 'psf recipe' run folder to sample from (required)")
    name: str = field("samples", "output folder name inside the recipe run")
    model: Literal["psf", "ar"] = field("psf", "which model writes the samples")
    stage: str = field("", "PSF model stage ('' = the final one)")
    n: int = field(16, "number of samples")
    batch_size: int = field(16, "samples per batch")
    temperature: float = field(1.0, "decoder temperature (0 = greedy)")
    top_p: float = field(1.0, "decoder nucleus, in (0, 1]")
    prior_steps: int = field(0, "Euler steps (0 = the prior's configured steps)")
    trajectory: Literal["prior", "mean"] = field("prior", "sampled state trajectories, or the mean one (ablation)")
    prior: Literal["main", "state_only"] = field(
        "main", "which prior writes the trajectories: main (states + codes when the run trained codes), or "
        "state_only (the run's prior_state_only, recipe prior.state_only_variant: states only, zero codes)")
    prompt_blocks: int = field(0, "prompted generation: the first m blocks of validation windows are given")
    prompt_file: str = field("", "prompted generation from your own text instead of the corpus's validation "
                             "windows: a UTF-8 file of prompts, one per line, tokenised with the run's own "
                             "tokenizer; the first n lines are used, each cut to prompt_blocks blocks (it needs "
                             "that many tokens)")
    prompt_replace: bool = field(True, "prompted: also set the known entries of x_t to their interpolant at every "
                                 "Euler step (replacement); false needs a prior trained with conditioning "
                                 "known_mask, whose input then alone carries the prompt")
    seed: int = field(0, "sampling seed")
    device: str = field("auto", "auto | cpu | cuda | mps")

    def validate(self) -> None:
        if not self.recipe_run:
            raise ForethoughtError("psf sample needs --recipe_run <folder of a 'psf recipe' run>")
        for key in ("n", "batch_size"):
            if getattr(self, key) < 1:
                raise ForethoughtError(f"{key} must be at least 1, got {getattr(self, key)}")
        for key in ("prior_steps", "prompt_blocks"):
            if getattr(self, key) < 0:
                raise ForethoughtError(f"{key} must not be negative, got {getattr(self, key)}")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ForethoughtError(f"temperature must be a number >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ForethoughtError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.name in ("", ".", "..") or Path(self.name).name != self.name:
            raise ForethoughtError(f"name must be a plain folder name (it is created inside the recipe run), "
                                   f"got {self.name!r}")
        if self.prompt_file and not self.prompt_blocks:
            raise ForethoughtError("prompt_file gives the prompts of prompted generation: set --prompt_blocks m "
                                   "(how many blocks of each prompt are given)")
        if self.prompt_file and not Path(self.prompt_file).is_file():
            raise ForethoughtError(f"prompt_file {self.prompt_file}: no such file")


@dataclass
class DiagnoseConfig:
    recipe_run: str = field("", "the finished 'psf recipe' run folder to diagnose (required)")
    stage: str = field("", "PSF model stage ('' = the final one): shuffle cost, ceiling blocks, decoding")
    all_stages: bool = field(False, "also measure the state-shuffle cost of every other model stage of the run")
    eval_sequences: int = field(256, "the first N validation windows are measured")
    permutations: int = field(4, "derangements of the documents averaged in the state-shuffle cost")
    ceiling_cut: Literal["restart", "mask"] = field(
        "restart", "how the AR model's context is cut at block boundaries: restart = every block its own "
        "sequence [bos, ...] at positions 0..n-1; mask = true positions, bos at each block start, block-diagonal "
        "attention")
    samples: int = field(64, "documents decoded from each source (at most the validation windows measured)")
    temperature: float = field(1.0, "decoder temperature of the decoding comparison (0 = greedy)")
    top_p: float = field(1.0, "decoder nucleus, in (0, 1]")
    prior_steps: int = field(0, "Euler steps (0 = the prior's configured steps)")
    n_boot: int = field(2000, "bootstrap resamples (documents) of the 95% intervals")
    batch_size: int = field(32, "documents per forward pass")
    seed: int = field(0, "seed of the permutations, the bootstrap and the samples")
    device: str = field("auto", "auto | cpu | cuda | mps")

    def validate(self) -> None:
        if not self.recipe_run:
            raise ForethoughtError("psf diagnose needs --recipe_run <folder of a finished 'psf recipe' run>")
        if self.eval_sequences < 2:
            raise ForethoughtError(f"eval_sequences must be at least 2 (states are swapped across documents), got "
                                   f"{self.eval_sequences}")
        for key in ("permutations", "samples", "n_boot", "batch_size"):
            if getattr(self, key) < 1:
                raise ForethoughtError(f"{key} must be at least 1, got {getattr(self, key)}")
        if self.prior_steps < 0:
            raise ForethoughtError(f"prior_steps must not be negative, got {self.prior_steps}")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ForethoughtError(f"temperature must be a number >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ForethoughtError(f"top_p must be in (0, 1], got {self.top_p}")


@dataclass
class EvalConfig:
    recipe_run: str = field("", "the finished 'psf recipe' run to evaluate (required)")
    models: list[Literal["psf", "psf_mean_trajectory", "psf_state_only", "ar"]] = field(
        [], "the run's own models: psf, psf_mean_trajectory (the PSF decoder on the prior's mean trajectory), "
        "psf_state_only (the same decoder, the state-only prior, zero codes: recipe prior.state_only_variant), ar "
        "([] = all it has: ar only when it trained the AR baseline, psf_state_only only when it trained that prior)")
    compare: list[str] = field([], "further run folders evaluated beside it, each named by its folder name: "
                               "'psf recipe' runs (their final PSF model and prior, e.g. the content-state "
                               "ablation) and token-flow runs (checkpoints of forethought.psf.token_flow); the "
                               "same corpus, tokenizer and L")
    samples: int = field(256, "samples per model and sweep point")
    references: int = field(256, "reference windows of L tokens from the test split")
    reference_spread: Literal["even", "random", "first"] = field(
        "even", "where the references lie in the test split: evenly spaced over all of it, a seeded random subset, "
        "or its first windows")
    sweep: list[list[float]] = field([[1.2, 1.0], [1.0, 1.0], [0.8, 0.9], [0.7, 0.9]],
                                     "[temperature, top_p] sweep points of the PSF and AR decoders")
    token_flow_knob: Literal["guidance", "step_temperature", "noise"] = field(
        "guidance", "the token flow's entropy knob: its self-conditioning guidance scale (ELF's; flows trained "
        "with token_flow.self_cond_guidance), the softmax temperature at every step (head=logits flows; > 1 lowers "
        "the entropy, < 1 raises it) or the Euler sampler's SDE noise (> 0 lowers it)")
    token_flow_sweep: list[float] = field([1.0, 2.0, 3.0, 4.0], "the knob's values, one sweep point each")
    token_flow_temperature: float = field(1.0, "the token flow's rounding temperature on its final logits "
                                          "(0 = argmax)")
    densify: bool = field(True, "after the sweep, bisect each model's temperature (top-p fixed at densify_top_p; "
                          "a token flow: its knob) until one of its points lies within entropy_tolerance of the "
                          "references' entropy and its points bracket it, so matched entropy interpolates over a "
                          "short distance")
    target_entropy: float = field(0.0, "the unigram entropy (nats) at which models are compared: 0 = the references' "
                                  "own (with its bootstrap interval); > 0 = this fixed value (the paper reports at "
                                  "5.16 over GPT-2 tokens)")
    entropy_tolerance: float = field(0.05, "densify: nats of unigram entropy between the target and the nearest point")
    densify_top_p: float = field(1.0, "densify: the top-p held fixed while the temperature is bisected")
    densify_points: int = field(8, "densify: points added per model at most (a model that has not reached the "
                                "tolerance by then is flagged in its row)")
    judge: str = field("smollm2-135m", "text corpora: the judge causal LM (alias, HF id or folder); the planted "
                       "corpus is judged by its true generator")
    judge_batch: int = field(16, "texts per judge forward pass")
    judge_first_token: bool = field(True, "score each text's first token too, after the judge's start token "
                                    "(<|endoftext|>); false: nothing prepended, the first token unscored (ELF's "
                                    "gen-PPL script)")
    length_quantile: float = field(0.05, "judge-token cap of every text = this quantile of all their judge lengths "
                                   "(matched lengths for MAUVE; 1 = the longest: every text whole, up to the "
                                   "judge's window, as ELF's gen-PPL script)")
    mauve: bool = field(True, "text corpora: MAUVE of every sweep point against the references (mauve-text)")
    mauve_boot: int = field(100, "bootstrap resamples of MAUVE (one k-means fit each; 0 = no MAUVE interval)")
    mauve_tokens: int = field(0, "MAUVE@N: MAUVE's features from each text cut to N judge tokens (at most the common "
                              "cap; 0 = at the common cap, like every other score); the paper's MAUVE@512 is 512")
    n_boot: int = field(1000, "bootstrap resamples of every other interval")
    cost: bool = field(True, "measure FLOPs per sample, serial depth and samples/s at batch 1 and 32")
    batch_size: int = field(32, "samples per sampling batch")
    seed: int = field(0, "sweep point i samples with mix_seed('psf-eval-point', seed, i) (every model alike); also "
                      "seeds the bootstrap, MAUVE and a random reference spread")
    device: str = field("auto", "auto | cpu | cuda | mps")
    out: str = field("", "output folder for results.json and curves.png ('' = <recipe_run>/eval)")
    cache_dir: str = field("", "sample sets and judge passes are kept here so an interrupted evaluation resumes "
                           "('' = <out>/cache)")
    prepare_only: bool = field(False, "only sample and judge into the cache; write no results")
    prompted_blocks: list[int] = field([], "planted corpus: also prompted continuations (forethought.psf.prompted): "
                                       "for each m here, the first m blocks of `prompts` test documents are the "
                                       "prompt of every PSF model (and of a conditioned prior without "
                                       "replacement, <name>_no_replace); exact scores, intervals over prompts")
    prompts: int = field(256, "prompted_blocks: test documents used as prompts")

    def validate(self) -> None:
        if not self.recipe_run:
            raise ForethoughtError("psf eval needs --recipe_run <folder of a finished 'psf recipe' run>")
        if self.prompted_blocks and self.prompts < 2:
            raise ForethoughtError(f"prompts must be at least 2 (bootstrap intervals over prompts), got {self.prompts}")
        if len(set(self.prompted_blocks)) != len(self.prompted_blocks):
            raise ForethoughtError(f"prompted_blocks lists a prompt length twice: {self.prompted_blocks}")
        for key in ("samples", "references"):
            if getattr(self, key) < 2:
                raise ForethoughtError(f"{key} must be at least 2 (bootstrap intervals, MAUVE), got "
                                       f"{getattr(self, key)}")
        for key in ("n_boot", "judge_batch", "batch_size"):
            if getattr(self, key) < 1:
                raise ForethoughtError(f"{key} must be at least 1, got {getattr(self, key)}")
        if not 0 <= self.mauve_boot <= self.n_boot:
            raise ForethoughtError(f"mauve_boot must be in 0..n_boot ({self.n_boot}), got {self.mauve_boot}")
        if self.mauve_tokens < 0:
            raise ForethoughtError(f"mauve_tokens must be >= 0 (0 = the common cap), got {self.mauve_tokens}")
        within(self, 0, 1, "length_quantile")
        if not self.sweep:
            raise ForethoughtError("sweep needs at least one [temperature, top_p] point")
        for point in self.sweep:
            if len(point) != 2:
                raise ForethoughtError(f"every sweep point is [temperature, top_p], got {point}")
            temp, top_p = point
            if not (math.isfinite(temp) and temp >= 0):
                raise ForethoughtError(f"sweep: temperature must be a number >= 0 (0 = greedy), got {temp}")
            if not 0 < top_p <= 1:
                raise ForethoughtError(f"sweep: top_p must be in (0, 1], got {top_p}")
        if not self.token_flow_sweep:
            raise ForethoughtError("token_flow_sweep needs at least one value of the token flow's knob")
        for v in self.token_flow_sweep:
            bad = not math.isfinite(v) or (v < 0 if self.token_flow_knob == "noise" else v <= 0)
            if bad:
                need = ">= 0" if self.token_flow_knob == "noise" else "> 0"
                raise ForethoughtError(f"token_flow_sweep: {self.token_flow_knob} must be a number {need}, got {v}")
        if not (math.isfinite(self.target_entropy) and self.target_entropy >= 0):
            raise ForethoughtError(f"target_entropy must be a number >= 0 (nats; 0 = the references'), got "
                                   f"{self.target_entropy}")
        if not (math.isfinite(self.entropy_tolerance) and self.entropy_tolerance > 0):
            raise ForethoughtError(f"entropy_tolerance must be a number > 0 (nats), got {self.entropy_tolerance}")
        if not 0 < self.densify_top_p <= 1:
            raise ForethoughtError(f"densify_top_p must be in (0, 1], got {self.densify_top_p}")
        if self.densify_points < 1:
            raise ForethoughtError(f"densify_points must be at least 1, got {self.densify_points}")
        if not (math.isfinite(self.token_flow_temperature) and self.token_flow_temperature >= 0):
            raise ForethoughtError(f"token_flow_temperature must be a number >= 0, got {self.token_flow_temperature}")
        unknown = [m for m in self.models if m not in OWN_MODELS]
        if unknown:
            raise ForethoughtError(f"models: unknown {', '.join(unknown)}; the run's own models are "
                                   f"{', '.join(OWN_MODELS)} (other runs go in compare)")
        if len(set(self.models)) != len(self.models):
            raise ForethoughtError(f"models lists a model twice: {self.models}")


@dataclass
class PromptedConfig:
    """``psf prompted``: prompted continuations on the planted corpus, a prompt-conditioned flow prior against
    replacement on the unconditional one, scored exactly by the true generator (forethought.psf.prompted)."""

    run: RunConfig = field(RunConfig(name="psf-prompted"), "the run folder of the results (results.json); run.seed "
                           "seeds the continuations, the unprompted samples and the bootstrap; run.device samples")
    recipe_run: str = field("", "a finished 'psf recipe' run on the planted corpus with the unconditional prior "
                            "(prior.model.conditioning none): method replace, the prompt's states fixed by "
                            "replacement (required)")
    conditioned_run: str = field("", "the same recipe with the prompt-conditioned prior (prior.model.conditioning "
                                 "known_mask; e.g. 'psf recipe --stages_from <recipe_run>', which copies the model "
                                 "stages and trains only the prior): methods conditioned (the prompt's states as "
                                 "the prior's input and replaced) and conditioned_no_replace (its input only) "
                                 "(required)")
    prompted_blocks: list[int] = field([1, 2, 4, 6], "prompt lengths m in blocks: the first m blocks of each test "
                                     "document are the prompt (each m in 1 .. blocks − 1; [] with unprompted only)")
    prompts: int = field(512, "the first N documents of the planted test split (never trained on) are the prompts")
    unprompted: bool = field(True, "also each prior's unconditional samples (N documents; the conditioned prior "
                             "with nothing known) and the test documents: exact NLL per token and persistence")
    n_boot: int = field(2000, "bootstrap resamples of the prompts (95 % intervals; differences: paired)")
    batch_size: int = field(128, "documents per sampling batch")

    def validate(self) -> None:
        if not self.recipe_run or not self.conditioned_run:
            raise ForethoughtError("psf prompted needs --recipe_run <the recipe run with the unconditional prior> "
                                   "and --conditioned_run <the same recipe with prior.model.conditioning known_mask>")
        if not self.prompted_blocks and not self.unprompted:
            raise ForethoughtError("nothing to measure: give prompted_blocks, or unprompted true")
        if any(m < 1 for m in self.prompted_blocks) or len(set(self.prompted_blocks)) != len(self.prompted_blocks):
            raise ForethoughtError(f"prompted_blocks must be distinct numbers of blocks >= 1, "
                                   f"got {self.prompted_blocks}")
        at_least(self, 2, "prompts")  # intervals over prompts
        at_least(self, 1, "n_boot", "batch_size")


@dataclass
class CeilingConfig:
    """``psf ceiling``: the Bayes-optimal parallel decoders of the planted corpus (forethought.psf.ceiling)."""

    run: RunConfig = field(RunConfig(name="psf-ceiling"), "the run folder of the results (results.json); run.seed "
                           "seeds the source documents and the decoders' draws")
    planted: PlantedConfig = field(PlantedConfig(), "the planted corpus (the defaults are every preset's)")
    documents: int = field(20_000, "source documents drawn from the true generator, each decoded once per decoder")

    def validate(self) -> None:
        at_least(self, 2, "documents")  # a standard error over documents
        try:
            self.planted.validate()
        except ForethoughtError as e:
            raise ForethoughtError(f"planted: {e}") from None


@dataclass
class TokenFlowRunConfig:
    recipe_run: str = field("", "the finished 'psf recipe' run with the AR baseline (baselines: [ar]) whose token "
                            "table, batches and AR optimiser settings the flow takes (required)")
    out_dir: str = field("", "where the run folder is written ('' = beside recipe_run)")
    name: str = field("token_flow", "run folder name under out_dir")
    device: str = field("auto", "auto | cpu | cuda | mps")
    size: Literal["matched", "config"] = field(
        "matched", "matched: PSF's width and the depth whose trained parameters are closest to PSF encoder + "
        "decoder; config: token_flow.n_embd / n_layer / n_head as given")
    param_tolerance: float = field(0.2, "size matched: the parameter ratio to PSF encoder + decoder must be within "
                                   "1 ± this")
    steps: int = field(0, "training steps (0 = the AR baseline's: the same windows and tokens)")
    optimizer: Literal["elf", "ar"] = field(
        "elf", "elf: ELF-B's settings in the shared AdamW trainer (lr = blr·batch/256, constant after a linear "
        "warmup of warmup_fraction of the steps, weight decay 0, beta2 0.95, gradient clip 1); ar: the AR "
        "stage's optimiser settings")
    blr: float = field(1e-3, "optimizer elf: the base learning rate per 256 sequences (ELF-B: 1e-3)")
    warmup_fraction: float = field(0.1, "optimizer elf: warmup steps as a fraction of the steps (ELF-B: 0.5 of 5 "
                                   "epochs)")
    latent_batches: int = field(4, "contextual latents with token_flow.latent_std 0: training batches on which "
                                "the latents' mean and standard deviation are measured")
    token_flow: TokenFlowConfig = field(TokenFlowConfig(), "the flow (seq_len is the recipe's L; n_embd, n_layer "
                                        "and n_head are used with size: config only)")

    def validate(self) -> None:
        if not self.recipe_run:
            raise ForethoughtError("psf token-flow needs --recipe_run <folder of a finished 'psf recipe' run with "
                                   "baselines: [ar]>")
        if not self.name or "/" in self.name:
            raise ForethoughtError(f"name must be a folder name, got {self.name!r}")
        if not 0 < self.param_tolerance < 1:
            raise ForethoughtError(f"param_tolerance must be in (0, 1), got {self.param_tolerance}")
        if self.steps < 0:
            raise ForethoughtError(f"steps must be >= 0 (0 = the AR baseline's), got {self.steps}")
        positive(self, "blr")
        within(self, 0, 1, "warmup_fraction", high_open=True)
        at_least(self, 1, "latent_batches")
        self.token_flow.validate()  # its messages name the section (also when built in Python, not loaded)
