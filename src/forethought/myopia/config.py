"""The settings of the ``forethought myopia`` commands (synthetic, lm, gradients, probe, init-model, step-cost,
families, sin-block, synthetic-why) and the myopia modes, in a module that imports no torch: the CLI loads and
checks a config (and prints ``--help``) before the heavy libraries load. Each command's module re-exports its classes
(``forethought.myopia.lm.LMConfig`` is this LMConfig)."""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Literal

from forethought.core.config import at_least, field, finite, positive
from forethought.core.errors import ForethoughtError
from forethought.core.precision import base_dtype_name
from forethought.core.run import RunConfig
from forethought.core.train_config import TrainConfig
from forethought.models.gpt_config import GPTConfig

# every model a myopia command can train (the configs' lists are checked against it when they load)
Mode = Literal["vanilla", "detach_hidden", "detach_kv", "zero_past", "local"]
MODES: tuple[str, ...] = typing.get_args(Mode)


@dataclass
class MyopiaSettings:
    """The ``--myopia.*`` settings of the commands that train myopic models."""

    horizon: int = field(
        0, "myopia horizon k: in every attention layer, query t reads the live keys/values of positions t-k..t and "
        "detached ones before (0 = myopic, >= seq_len - 1 = vanilla; through L layers the gradient of position "
        "t's loss reaches back at most L*k positions). Applies to the detach_hidden / detach_kv models")
    beta: float = field(
        0.0, "a dial between myopic (0) and vanilla (1): that fraction of the gradient into other positions' keys "
        "and values flows as in vanilla (the reference code's beta). Applies to the detach_hidden / detach_kv models")
    local_form: Literal["ours", "reference"] = field(
        "ours", "the local-myopic model's past states: ours = the frozen vanilla model's attention input (after its "
        "LayerNorm), the frozen model in eval mode; reference = the reference code's form: the frozen model's block "
        "input (the residual before the LayerNorm), projected with no LayerNorm, the frozen model in train mode "
        "(its dropout on). Our GPT only")

    def validate(self) -> None:
        if self.horizon < 0:
            raise ForethoughtError(f"myopia.horizon must be >= 0, got {self.horizon}")
        if not 0.0 <= self.beta <= 1.0:  # also rejects NaN
            raise ForethoughtError(f"myopia.beta must be in [0, 1], got {self.beta}")


# the models the synthetic task trains (not 'local': it needs a trained vanilla LM's states)
SyntheticMode = Literal["vanilla", "detach_hidden", "detach_kv", "zero_past"]


@dataclass
class TaskConfig:
    seq_len: int = field(64, "positions per sequence")
    window: int = field(10, "number of past inputs summed in the target")
    shift: int = field(1, "first lag in the sum (1 = the previous input)")
    frequency: float = field(10.0, "the 10 in sin(10·x)")
    function: Literal["sin", "cos", "tanh", "square"] = field("sin", "f in the target")
    history: Literal["zero", "f0"] = field(
        "zero", "the sum's terms before the first position: zero = each missing term is 0 (the reference code pads "
        "the f-values with zeros); f0 = each missing input is x = 0, so each term is f(0). The same for sin")

    def validate(self) -> None:
        at_least(self, 1, "seq_len", "window")
        at_least(self, 0, "shift")
        finite(self, "frequency")


@dataclass
class ProbeSettings:
    max_lag: int = field(20, "probe lags 0..max_lag")
    train_sequences: int = field(2048, "sequences to fit the ridge probes on")
    test_sequences: int = field(1024, "held-out sequences to score R² on")
    ridge: float = field(1e-2, "ridge penalty (relative to the mean feature variance)")

    def validate(self) -> None:
        at_least(self, 0, "max_lag", "ridge")
        at_least(self, 1, "train_sequences", "test_sequences")


@dataclass
class SyntheticConfig:
    run: RunConfig = field(RunConfig(name="myopia-synthetic"), "run folder, seed, device")
    task: TaskConfig = field(TaskConfig(), "the synthetic task")
    p_values: list[float] = field([1.0, 0.1], "Bernoulli probabilities p to train and report")
    modes: list[SyntheticMode] = field(["vanilla", "detach_hidden"], "models to train: vanilla and/or a myopia mode "
                                       "([] = none: only the predict-zero and copy levels on the eval sequences)")
    myopic_p_values: list[float] | None = field(None, "the p values the modes other than vanilla train at (default: "
                                                "all of p_values; the paper trains vanilla alone at p = 0.001)")
    myopia: MyopiaSettings = field(MyopiaSettings(), "myopic attention (the horizon applies to detach_hidden / "
                                   "detach_kv)")
    model: GPTConfig = field(GPTConfig(n_positions=64, n_embd=128, n_layer=2, n_head=2, input_dim=2, output_dim=1),
                             "GPT-2 architecture (inputs through a linear embedding)")
    train: TrainConfig = field(TrainConfig(steps=6000, batch_size=64, lr=1e-3, warmup_steps=200, log_every=50),
                               "optimisation")
    eval_sequences: int = field(16384, "fresh sequences for the normalised loss and the reference levels")
    eval_seed: int | None = field(None, "the seed of those sequences (default: derived from run.seed); give an "
                                  "earlier run's to measure on the sequences it was evaluated on")
    curve_sequences: int = field(512, "fresh sequences (seeded: the same ones at every evaluation) for the "
                                 "normalised loss every --train.eval_every steps")
    probe: ProbeSettings = field(ProbeSettings(), "ridge probes")

    def validate(self) -> None:
        if not self.p_values or any(not 0 < p <= 1 for p in self.p_values):
            raise ForethoughtError(f"p_values must be in (0, 1], got {self.p_values}")
        if self.myopic_p_values is not None and not set(self.myopic_p_values) <= set(self.p_values):
            raise ForethoughtError(f"myopic_p_values {self.myopic_p_values} must be among p_values {self.p_values}")
        for m in self.modes:
            if m not in MODES or m == "local":
                raise ForethoughtError(f"modes: unknown or unsupported mode '{m}' "
                                       "(vanilla, detach_hidden, detach_kv, zero_past)")
        first = max(self.probe.max_lag, self.task.shift + self.task.window - 1)  # the probes' first position
        if first >= self.task.seq_len:
            raise ForethoughtError(f"task.seq_len ({self.task.seq_len}) must exceed probe.max_lag and task.shift + "
                                   f"task.window - 1 (= {first}): the probes read positions from there on")
        if self.task.seq_len > self.model.n_positions:
            raise ForethoughtError("task.seq_len must be <= model.n_positions")
        if self.model.input_dim != 2 or self.model.output_dim != 1:
            raise ForethoughtError("the synthetic task needs model.input_dim = 2 and model.output_dim = 1")
        if self.train.steps < 1:
            raise ForethoughtError(f"train.steps must be at least 1, got {self.train.steps}")
        for name in ("eval_sequences", "curve_sequences"):  # zero sequences would report a NaN loss
            if getattr(self, name) < 1:
                raise ForethoughtError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.eval_seed is not None and self.eval_seed < 0:
            raise ForethoughtError(f"eval_seed must not be negative, got {self.eval_seed}")


# ---------------------------------------------------------------- myopia sin-block

@dataclass
class SinBlockConfig:
    """``myopia sin-block``: can one GPT block learn sin(frequency·x) from a linear embedding of x? The first step of
    the synthetic task in isolation: length-1 sequences (attention sees only the position itself), inputs (x, 1),
    target sin(frequency·x) at the same position, MSE; predicting zero scores about 0.5."""

    run: RunConfig = field(RunConfig(name="myopia-sin-block"), "run folder, seed, device")
    frequency: float = field(10.0, "the 10 in sin(10·x)")
    model: GPTConfig = field(GPTConfig(n_positions=1, n_embd=128, n_layer=1, n_head=2, input_dim=2, output_dim=1),
                             "the block: GPT-2's init and final LayerNorm unless changed (--model.activation relu "
                             "| gelu_new is the comparison)")
    train: TrainConfig = field(TrainConfig(steps=1000, batch_size=4096, lr=1e-3, warmup_steps=100,
                                           schedule="constant", beta2=0.95, grad_clip=0.0, log_every=100,
                                           eval_every=100), "optimisation: fresh samples every step; eval_every = how "
                               "often the held-out MSE is measured")
    eval_samples: int = field(16384, "held-out samples (the same ones at every evaluation) for the MSE")

    def validate(self) -> None:
        finite(self, "frequency")
        if self.model.input_dim != 2 or self.model.output_dim != 1:
            raise ForethoughtError("sin-block needs model.input_dim = 2 (x, 1) and model.output_dim = 1")
        if self.train.steps < 1 or self.train.eval_every < 1:
            raise ForethoughtError("train.steps and train.eval_every must be at least 1 (the MSE is measured every "
                                   "eval_every steps and at the end)")
        if self.eval_samples < 1:
            raise ForethoughtError(f"eval_samples must be at least 1, got {self.eval_samples}")


# ---------------------------------------------------------------- myopia synthetic-why

@dataclass
class SyntheticWhyConfig:
    """``myopia synthetic-why``: the synthetic task's vanilla model at p = 1 (the ``small`` preset's model, data and
    optimiser), diagnosed every ``train.eval_every`` steps on fixed held-out data: why a setting (``model.init``,
    ``model.final_norm``) does or does not leave the predict-zero level."""

    run: RunConfig = field(RunConfig(name="myopia-synthetic-why"), "run folder, seed, device")
    task: TaskConfig = field(TaskConfig(), "the synthetic task (trained and measured at p = 1)")
    model: GPTConfig = field(
        GPTConfig(n_positions=64, n_embd=128, n_layer=2, n_head=2, input_dim=2, output_dim=1, activation="relu",
                  init="torch", final_norm=False),
        "the vanilla model (the small preset's); --model.init and --model.final_norm are the settings compared")
    train: TrainConfig = field(TrainConfig(steps=1000, batch_size=64, lr=1e-3, warmup_steps=300, min_lr_ratio=0.1,
                                           log_every=100, eval_every=125, checkpoint_every=1000),
                               "optimisation; eval_every = how often the diagnostics run")
    grad_batches: int = field(8, "fixed batches (train.batch_size each) whose gradients of the first MLP's input "
                              "weights give the signal (norm of their mean) and the noise (their spread)")
    eval_sequences: int = field(1024, "fresh sequences (the same ones every time) for the normalised loss")
    probe_sequences: int = field(256, "sequences for the lag-0 ridge probe at layer 1 (half to fit, half to score) "
                                 "and for the blocks' share of the head's input")
    ridge: float = field(1e-2, "the probe's ridge penalty (relative to the mean feature variance)")

    def validate(self) -> None:
        if self.model.input_dim != 2 or self.model.output_dim != 1:
            raise ForethoughtError("the synthetic task needs model.input_dim = 2 and model.output_dim = 1")
        if self.task.seq_len > self.model.n_positions:
            raise ForethoughtError("task.seq_len must be <= model.n_positions")
        if self.task.shift + self.task.window - 1 >= self.task.seq_len:
            raise ForethoughtError(f"task.seq_len ({self.task.seq_len}) must exceed task.shift + task.window - 1: the "
                                   "probe reads positions from there on")
        if self.train.steps < 1 or self.train.eval_every < 1:
            raise ForethoughtError("train.steps and train.eval_every must be at least 1 (the diagnostics run every "
                                   "eval_every steps)")
        at_least(self, 2, "grad_batches")  # the noise is the spread between batches
        at_least(self, 1, "eval_sequences")
        at_least(self, 0, "ridge")
        if self.probe_sequences < 2:
            raise ForethoughtError(f"probe_sequences must be at least 2 (half to fit, half to score), got "
                                   f"{self.probe_sequences}")


# ---------------------------------------------------------------- myopia lm

VARIANTS = ("vanilla", "detach_hidden", "detach_kv", "local", "zero_past")


@dataclass
class LMDataConfig:
    corpus: str = field("wikitext-2", "corpus name (wikitext-2, tinyshakespeare, tinystories, generated), a .txt "
                        "path, or hf:<dataset>")
    tokenizer: str = field("gpt2", "gpt2 | bpe:<N> | an HF tokenizer id; 'auto' = the HF base model's own")
    seq_len: int = field(64, "tokens per training sequence (the paper uses 64)")
    eval_sequences: int = field(512, "validation sequences (non-overlapping windows of the valid split)")
    curve_sequences: int = field(64, "validation windows scored every --train.eval_every steps (the first of the "
                                 "eval_sequences windows, the same ones at every evaluation)")
    cache_dir: str = field("", "token/tokenizer cache ('' = FORETHOUGHT_CACHE or ~/.cache/forethought)")
    sequences: Literal["windows", "passages"] = field(
        "windows", "windows = seq_len + 1 tokens at random offsets of the concatenated corpus; passages = the "
        "myopia paper's MS MARCO reading: each passage's first seq_len tokens (shorter ones dropped, seq_len − 1 "
        "predictions each), in one fixed shuffled order, read once in order (corpus: msmarco, hf:<id>, or a file "
        "with one passage per line)")

    def validate(self) -> None:
        # curve_sequences is checked by the commands that score a curve (myopia lm), not here: gradients ignores it
        at_least(self, 1, "seq_len", "eval_sequences")
        if self.sequences == "passages" and self.seq_len < 2:
            raise ForethoughtError(f"data.seq_len must be at least 2 with sequences passages, got {self.seq_len}")
        if not self.corpus.strip():
            raise ForethoughtError("corpus must name a corpus, a .txt file or hf:<dataset>")


@dataclass
class LMConfig:
    run: RunConfig = field(RunConfig(name="myopia-lm"), "run folder, seed, device")
    base: str = field("gpt", "'gpt' = our GPT from scratch; else an HF causal LM to fine-tune (hub id, folder, "
                      "smollm2-135m)")
    base_dtype: Literal["auto", "fp32", "bf16", "fp16"] = field(
        "auto", "HF base: dtype it is loaded in (auto = fp32 when its weights train, run.precision under LoRA)")
    gpt: GPTConfig = field(GPTConfig(n_positions=64, n_embd=256, n_layer=4, n_head=4), "our GPT (base: gpt)")
    lora_r: int = field(0, "HF base: LoRA rank through peft (0 = full fine-tuning)")
    lora_alpha: int = field(32, "HF base: LoRA alpha")
    variants: list[Mode] = field(["vanilla", "detach_hidden", "local", "zero_past"], "what to train")
    myopia: MyopiaSettings = field(MyopiaSettings(), "myopic attention (the horizon applies to detach_hidden / "
                                   "detach_kv)")
    data: LMDataConfig = field(LMDataConfig(), "corpus and tokenisation")
    train: TrainConfig = field(TrainConfig(steps=2000, batch_size=32, lr=1e-3, warmup_steps=100, log_every=50,
                                           weight_decay=0.1, checkpoint_every=500), "optimisation")

    def validate(self) -> None:
        at_least(self, 0, "lora_r")
        positive(self, "lora_alpha")
        for v in self.variants:
            if v not in VARIANTS:
                raise ForethoughtError(f"variants: unknown variant '{v}' (choose from {', '.join(VARIANTS)})")
        if "local" in self.variants and "vanilla" not in self.variants[:self.variants.index("local")]:
            raise ForethoughtError("variants: 'local' needs 'vanilla' trained before it (its frozen past states "
                                   "come from the trained vanilla model), e.g. [vanilla, local]")
        if self.train.steps < 1:  # every variant must leave a checkpoint for 'myopia probe'
            raise ForethoughtError(f"train.steps must be at least 1, got {self.train.steps}")
        if self.data.curve_sequences < 1:
            raise ForethoughtError(f"data.curve_sequences must be at least 1, got {self.data.curve_sequences}")
        if self.base == "gpt" and self.data.seq_len > self.gpt.n_positions:
            raise ForethoughtError("data.seq_len must be <= gpt.n_positions")
        if self.base != "gpt":
            base_dtype_name(self.base_dtype, self.run.precision, trains_base=self.lora_r == 0)
            if "local" in self.variants and self.myopia.local_form == "reference":
                raise ForethoughtError("myopia.local_form reference is implemented for our GPT (base: gpt) only")


@dataclass
class InitModelConfig:
    """``myopia init-model``: a seeded random-init HF model of a published architecture, with the run's tokenizer as
    its vocabulary, written as a run folder that ``myopia lm --base <folder>`` trains from scratch."""

    run: RunConfig = field(RunConfig(name="pythia-14m-init"), "the run folder that holds the model; run.seed seeds it")
    shape: Literal["pythia-14m", "pythia-31m", "pythia-w32", "pythia-w64"] = field(
        "pythia-14m", "the architecture: Pythia-14M's GPT-NeoX shapes (6 layers, width 128, 4 heads, MLP 512, rotary "
        "on a quarter of each head, parallel residual), Pythia-31M's (width 256, 8 heads, MLP 1024), or the same "
        "design at width 32 or 64 (heads of 32 dimensions)")
    data: LMDataConfig = field(LMDataConfig(tokenizer="bpe:4096"), "the corpus and tokenizer whose vocabulary the "
                               "model gets (use the same ones as the myopia lm runs)")


# ---------------------------------------------------------------- myopia gradients

@dataclass
class GradientsConfig:
    run: RunConfig = field(RunConfig(name="myopia-gradients"), "run folder, seed, device")
    experiment: Literal["synthetic", "lm"] = field("synthetic", "the synthetic pre-caching task, or language "
                                                   "modelling (myopia lm's data and models)")
    mode: Literal["detach_hidden", "detach_kv"] = field("detach_hidden", "the myopic gradient g_m's mode")
    measure_batches: int = field(4, "fixed batches (train.batch_size each) g and g_m are averaged over")
    p: float = field(1.0, "synthetic: Bernoulli probability p")
    task: TaskConfig = field(TaskConfig(), "synthetic: the task")
    base: str = field("gpt", "lm: 'gpt' = our GPT from scratch (the model section); else an HF causal LM")
    base_dtype: Literal["auto", "fp32", "bf16", "fp16"] = field(
        "auto", "lm with an HF base: dtype it is loaded in (auto = fp32 when its weights train, run.precision "
        "under LoRA)")
    lora_r: int = field(0, "lm with an HF base: LoRA rank (0 = full fine-tuning)")
    lora_alpha: int = field(32, "lm with an HF base: LoRA alpha")
    model: GPTConfig = field(
        GPTConfig(n_positions=64, n_embd=128, n_layer=2, n_head=2, activation="relu", init="torch",
                  final_norm=False),
        "our GPT (synthetic, or lm with base gpt); input/output sizes are set by the experiment")
    data: LMDataConfig = field(LMDataConfig(), "lm: corpus and tokenisation (its eval and curve sequence counts are "
                               "not used here: see eval_sequences)")
    eval_sequences: int = field(512, "held-out sequences for the loss reported beside each measurement")
    train: TrainConfig = field(TrainConfig(steps=5000, batch_size=64, lr=1e-3, warmup_steps=300, min_lr_ratio=0.1,
                                           log_every=100, eval_every=100, checkpoint_every=1000),
                               "optimisation of the vanilla model; eval_every = how often to measure")

    def validate(self) -> None:
        at_least(self, 0, "lora_r")
        positive(self, "lora_alpha")
        if self.measure_batches < 1:
            raise ForethoughtError(f"measure_batches must be at least 1, got {self.measure_batches}")
        if self.eval_sequences < 1:
            raise ForethoughtError(f"eval_sequences must be at least 1, got {self.eval_sequences}")
        if self.train.steps < 1 or self.train.eval_every < 1:
            raise ForethoughtError("train.steps and train.eval_every must be at least 1 (the measurements run "
                                   "every eval_every steps)")
        if not 0 < self.p <= 1:
            raise ForethoughtError(f"p must be in (0, 1], got {self.p}")
        seq = self.task.seq_len if self.experiment == "synthetic" else self.data.seq_len
        if (self.experiment == "synthetic" or self.base == "gpt") and seq > self.model.n_positions:
            raise ForethoughtError(f"the sequence length ({seq}) must be <= model.n_positions "
                                   f"({self.model.n_positions})")


# ---------------------------------------------------------------- myopia probe

@dataclass
class ProbeConfig:
    run: RunConfig = field(RunConfig(name="myopia-probe"), "run folder, seed, device")
    lm_run: str = field("", "a 'forethought myopia lm' run folder whose models to probe")
    variants: list[Mode] = field(["vanilla", "detach_hidden"], "which of its trained variants")
    layers: list[int] = field([], "layers to probe (0 = embedding; empty = all)")
    k_max: int = field(4, "predict tokens t+1 .. t+k_max")
    fit_sequences: int = field(512, "training-split windows to fit the probes on")
    eval_sequences: int = field(256, "validation-split windows to score them on")
    ridge: float = field(1e-3, "ridge penalty relative to the mean feature variance")

    def validate(self) -> None:
        if not self.lm_run:
            raise ForethoughtError("probe: give the run to probe with --lm_run runs/<myopia lm run>")
        if self.k_max < 1:
            raise ForethoughtError("probe: k_max must be >= 1")
        at_least(self, 1, "fit_sequences", "eval_sequences")
        at_least(self, 0, "ridge")
        if any(layer < 0 for layer in self.layers):
            raise ForethoughtError(f"layers must be >= 0 (0 = the embedding), got {self.layers}")
        for v in self.variants:
            if v not in VARIANTS:
                raise ForethoughtError(f"variants: unknown variant '{v}' (choose from {', '.join(VARIANTS)})")


# ---------------------------------------------------------------- myopia step-cost / families

StepCostModel = Literal["gpt", "smollm2", "pythia"]
STEP_COST_MODELS: tuple[str, ...] = typing.get_args(StepCostModel)
# hf_model values that build a random-init Llama instead of loading weights
HF_SHAPES = ("smollm2-shape", "tiny-llama")


def _timing_checks(cfg: StepCostConfig | FamiliesConfig) -> None:
    """What both timing commands need: at least one timed step, and a precision they time (fp16 would need a
    gradient scaler, which neither runs)."""
    if cfg.steps < 1:
        raise ForethoughtError(f"steps must be at least 1, got {cfg.steps}")
    at_least(cfg, 0, "warmup", "threads")
    positive(cfg, "lr")
    if cfg.run.precision == "fp16":
        raise ForethoughtError("run.precision fp16 is not timed here (it needs a gradient scaler): use fp32, or "
                               "bf16 (autocast of fp32 weights)")


@dataclass
class StepCostConfig:
    """``myopia step-cost``: the wall time of one training step (forward, backward, AdamW), myopic against vanilla,
    interleaved on the same batch."""

    run: RunConfig = field(RunConfig(name="myopia-step-cost"), "run folder, seed (weights and batch), device, "
                           "precision (fp32, or bf16 autocast of fp32 weights and AdamW)")
    models: list[StepCostModel] = field(["gpt", "smollm2", "pythia"], "what to time: our GPT (the gpt section), "
                                        "an HF Llama (hf_model), a Pythia-shaped GPT-NeoX (pythia_shape)")
    steps: int = field(20, "timed training steps per variant")
    warmup: int = field(3, "untimed steps per variant before them")
    lr: float = field(1e-5, "AdamW learning rate")
    threads: int = field(0, "torch threads (0 = torch's own choice; the experiment runner sets its threads)")
    gpt: GPTConfig = field(GPTConfig(n_positions=1024, n_embd=384, n_layer=6, n_head=6), "our GPT (random init)")
    gpt_batch: int = field(8, "our GPT: sequences per batch")
    gpt_seq_len: int = field(256, "our GPT: tokens per sequence")
    reference: bool = field(True, "our GPT: also time the explicit O(T^2) myopic form (implementation reference)")
    hf_model: str = field("smollm2-135m", "the HF Llama: an alias, hub id or folder (full fine-tuning, fp32 "
                          "weights); 'smollm2-shape' = random init with SmolLM2-135M's shapes (no model files); "
                          "'tiny-llama' = a random 2-layer width-64 Llama (smoke tests)")
    hf_batch: int = field(4, "the HF Llama: sequences per batch")
    hf_seq_len: int = field(256, "the HF Llama: tokens per sequence")
    pythia_shape: Literal["pythia-14m", "tiny"] = field(
        "pythia-14m", "the GPT-NeoX (random init): Pythia-14M's shapes, or 2 layers of width 64 (smoke tests)")
    pythia_batch: int = field(8, "the GPT-NeoX: sequences per batch")
    pythia_seq_len: int = field(256, "the GPT-NeoX: tokens per sequence")

    def validate(self) -> None:
        _timing_checks(self)
        if not self.models or len(set(self.models)) != len(self.models):
            raise ForethoughtError(f"models: name each of {', '.join(STEP_COST_MODELS)} at most once, got "
                                   f"{self.models}")
        at_least(self, 1, "gpt_batch", "hf_batch", "pythia_batch")
        at_least(self, 2, "gpt_seq_len", "hf_seq_len", "pythia_seq_len")  # a next-token loss needs two tokens
        if self.gpt.input_dim or self.gpt.output_dim:
            raise ForethoughtError("gpt: the step cost times a token model (gpt.input_dim and gpt.output_dim 0)")
        if self.gpt_seq_len > self.gpt.n_positions:
            raise ForethoughtError(f"gpt_seq_len ({self.gpt_seq_len}) must be <= gpt.n_positions "
                                   f"({self.gpt.n_positions})")
        if not self.hf_model.strip():
            raise ForethoughtError("hf_model must name a model (or smollm2-shape / tiny-llama)")


Family = Literal["gpt", "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gpt2", "gpt_neox", "phi", "opt"]
FAMILY_NAMES: tuple[str, ...] = typing.get_args(Family)


@dataclass
class AttentionCheckConfig:
    """``myopia attention-check``: the one-pass myopic attention on a device against the explicit reference form,
    forward and gradients, in fp32 and bf16 (the CUDA kernel it calls is checked on a GPU only)."""

    run: RunConfig = field(RunConfig(name="myopia-attention-check", device="auto"), "run folder, seed, device")
    dtypes: list[Literal["fp32", "bf16"]] = field(["fp32", "bf16"], "the dtypes compared")
    horizons: list[int] = field([0, 3], "myopia horizons (0 = myopic; k >= 1 takes the 2T-key path)")
    batch: int = field(2, "sequences")
    heads: int = field(4, "attention heads")
    seq_len: int = field(64, "positions")
    head_dim: int = field(32, "width of a head")

    def validate(self) -> None:
        if not self.dtypes or not self.horizons:
            raise ForethoughtError("dtypes and horizons: give at least one each")
        if any(h < 0 for h in self.horizons):
            raise ForethoughtError(f"horizons must be >= 0, got {self.horizons}")
        at_least(self, 1, "batch", "heads", "seq_len", "head_dim")


@dataclass
class FamiliesConfig:
    """``myopia families``: make_myopic on every supported model family: exactness against the per-position form
    on a tiny float64 model, and the myopic / vanilla training-step time on a small float32 one."""

    run: RunConfig = field(RunConfig(name="myopia-families"), "run folder, seed (weights and batches), device, "
                           "precision of the timed steps (fp32, or bf16 autocast)")
    families: list[Family] = field(list(FAMILY_NAMES), "the families (4 heads, 2 KV heads where a family has "
                                   "them; qwen2 with a sliding window of 3, gemma2 with soft-capping and a window "
                                   "of 4)")
    exact_hidden: int = field(32, "exactness: model width (float64)")
    exact_layers: int = field(2, "exactness: layers")
    exact_tokens: int = field(9, "exactness: tokens per sequence (batch 2)")
    exact_vocab: int = field(37, "exactness: vocabulary")
    hidden: int = field(128, "step cost: model width (float32)")
    layers: int = field(4, "step cost: layers")
    seq_len: int = field(128, "step cost: tokens per sequence")
    batch: int = field(8, "step cost: sequences per batch")
    vocab: int = field(4096, "step cost: vocabulary")
    steps: int = field(10, "step cost: timed training steps per variant")
    warmup: int = field(2, "step cost: untimed steps per variant before them")
    lr: float = field(1e-5, "step cost: AdamW learning rate")
    threads: int = field(0, "torch threads (0 = torch's own choice; the experiment runner sets its threads)")

    def validate(self) -> None:
        _timing_checks(self)
        if not self.families or len(set(self.families)) != len(self.families):
            raise ForethoughtError(f"families: name each family at most once, got {self.families}")
        for name in ("exact_hidden", "hidden"):  # 4 heads, each of an even width (rotary halves)
            if getattr(self, name) < 8 or getattr(self, name) % 8:
                raise ForethoughtError(f"{name} must be a positive multiple of 8 (4 heads of even width), got "
                                       f"{getattr(self, name)}")
        at_least(self, 1, "exact_layers", "layers", "batch")
        at_least(self, 3, "exact_tokens")  # a position with an earlier one and a later target
        at_least(self, 2, "seq_len", "exact_vocab", "vocab")
        if max(self.exact_tokens, self.seq_len) > 512:
            raise ForethoughtError("exact_tokens and seq_len must be <= 512 (the models' positions)")


# ---------------------------------------------------------------- myopia arithmetic

# the models the multiplication task trains (local and zero_past are language-model baselines, not offered here)
ArithmeticMode = Literal["vanilla", "detach_hidden", "detach_kv"]


@dataclass
class ArithmeticTaskConfig:
    """The reference's multiplication data (``src/data/arithmetic.py``): x * y = x·y with each operand's digit count
    drawn uniformly from min_digits..max_digits and the operand uniformly below 10^digits, written in reverse digit
    order, each operand zero-padded to ``pad`` digits (the zeros past max_digits are the filler positions), the
    product reversed and padded to 2·max_digits digits; one token per digit, '*' and '='."""

    min_digits: int = field(1, "fewest digits an operand is drawn with")
    max_digits: int = field(5, "most digits an operand is drawn with (the product takes 2·max_digits tokens)")
    pad: int = field(10, "digits each operand is zero-padded to (= max_digits: no filler; the paper's 10 for 5-digit "
                     "operands gives 5 filler positions per operand)")

    def validate(self) -> None:
        at_least(self, 1, "min_digits")
        if self.max_digits < self.min_digits:
            raise ForethoughtError(f"max_digits ({self.max_digits}) must be >= min_digits ({self.min_digits})")
        if self.pad < self.max_digits:
            raise ForethoughtError(f"pad ({self.pad}) must be >= max_digits ({self.max_digits}): an operand is "
                                   "padded, never cut")
        if self.max_digits > 9:  # the product of two 10-digit numbers passes int64 in the tensor path
            raise ForethoughtError(f"max_digits must be at most 9, got {self.max_digits}")


@dataclass
class ArithmeticConfig:
    """``myopia arithmetic``: GPT-2 from scratch on the reference's multiplication task, vanilla vs myopic; the loss
    on the product's tokens only, the accuracy of the whole product per digit count."""

    run: RunConfig = field(RunConfig(name="myopia-arithmetic"), "run folder, seed, device")
    task: ArithmeticTaskConfig = field(ArithmeticTaskConfig(), "the multiplication data")
    variants: list[ArithmeticMode] = field(["vanilla", "detach_hidden"], "what to train (each from the same "
                                           "initial weights and data)")
    myopia: MyopiaSettings = field(MyopiaSettings(), "myopic attention (the horizon applies to detach_hidden / "
                                   "detach_kv)")
    model: GPTConfig = field(GPTConfig(n_positions=64, n_embd=128, n_layer=4, n_head=4),
                             "our GPT from scratch (its vocabulary is set to the task's 12 symbols)")
    train: TrainConfig = field(TrainConfig(steps=2000, batch_size=128, lr=1e-3, warmup_steps=20, min_lr_ratio=0.0,
                                           weight_decay=0.01, grad_clip=0.0, log_every=50),
                               "optimisation (fresh examples every step)")
    eval_examples: int = field(1024, "held-out examples per (x digits, y digits) pair for the final accuracy table "
                               "(the reference's 1,024)")
    curve_examples: int = field(1024, "held-out examples of max_digits × max_digits scored every "
                                "--train.eval_every steps (the same ones every time)")

    def validate(self) -> None:
        if not self.variants or len(set(self.variants)) != len(self.variants):
            raise ForethoughtError(f"variants: name each model at most once, got {self.variants}")
        for v in self.variants:
            if v not in typing.get_args(ArithmeticMode):
                raise ForethoughtError(f"variants: unknown variant '{v}' (vanilla, detach_hidden, detach_kv)")
        if self.model.input_dim or self.model.output_dim:
            raise ForethoughtError("the arithmetic task needs a token model: model.input_dim = model.output_dim = 0")
        seq = 2 * self.task.pad + 2 + 2 * self.task.max_digits
        if seq > self.model.n_positions:
            raise ForethoughtError(f"a sequence takes {seq} tokens (2·pad + 2 + 2·max_digits); model.n_positions "
                                   f"is {self.model.n_positions}")
        if self.train.steps < 1:
            raise ForethoughtError(f"train.steps must be at least 1, got {self.train.steps}")
        at_least(self, 1, "eval_examples", "curve_examples")
