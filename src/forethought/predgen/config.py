"""The settings of every ``forethought predgen`` command — train (task, prompt, head, PredGen's, adapter,
evaluation, the whole run), eval, predict and mine — in one module that imports no torch, so loading a config,
``--help`` and a bad flag are fast and fail before any model loads. The modules that use them (``commands``,
``methods``, ``model``, ``mine``) import them from here; their old names there still resolve."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from forethought.core.config import at_least, field, positive, within
from forethought.core.errors import ForethoughtError
from forethought.core.run import RunConfig
from forethought.core.train_config import TrainConfig
from forethought.predgen.registry import CHOICE_ALPHA0, CHOICE_LOGLIK0, METHODS, method_named, method_names
from forethought.predgen.tasks.builtin import MULTIPLE_CHOICE, WASSA_EMOTIONS, builtin_name, known_tasks, text_template

PEFT_METHODS = ("lora", "adalora", "dora", "rocoft", "full")
# --method and --head.pooling accept what the registry's methods define (the CLI / YAML spelling is the name)
MethodName = Literal[method_names()]  # type: ignore[valid-type]
_HEADED = [m for m in METHODS.values() if m.has_head]
Pooling = Literal[("", *dict.fromkeys(p for m in _HEADED for p in m.poolings))]  # type: ignore[valid-type]


@dataclass
class AdapterConfig:
    """One PEFT setting, shared by the three methods so comparisons are fair."""

    method: Literal["lora", "adalora", "dora", "rocoft", "full"] = field(
        "lora", "lora | adalora | dora | rocoft (row/column fine-tuning, the reference runs') | full fine-tuning")
    r: int = field(16, "LoRA rank (AdaLoRA: the target average rank; its initial rank is 1.5x; RoCoFT: the rows or "
                   "columns trained per layer)")
    rocoft_side: Literal["row", "column"] = field("column", "RoCoFT: train the first r rows or columns of each "
                                                  "targeted weight (the reference runs: column, r 3)")
    alpha: int = field(32, "LoRA alpha")
    dropout: float = field(0.0, "LoRA dropout")
    target_modules: str = field("all-linear", "peft target modules: 'all-linear' or comma-separated names")

    def validate(self) -> None:
        at_least(self, 1, "r")
        positive(self, "alpha")
        within(self, 0, 1, "dropout", high_open=True)
        if not [t for t in str(self.target_modules).split(",") if t.strip()]:
            raise ForethoughtError("target_modules must name at least one module (or be 'all-linear')")


@dataclass
class PromptConfig:
    max_prompt_tokens: int = field(256, "prompt token budget; the task's long field (e.g. BoolQ's passage) is cut "
                                   "to fit, never dropped")
    truncate_side: Literal["", "left", "right"] = field(
        "", "which end of the long field is cut: right (keep the start) | left | '' = task default")
    chat: bool = field(False, "wrap the prompt in the model's chat template (instruct models)")
    decimals: int = field(2, "regression answers are written with this many fixed decimals (3.14)")

    def validate(self) -> None:
        at_least(self, 1, "max_prompt_tokens")
        within(self, 0, 6, "decimals")


@dataclass
class PredGenSettings:
    schedule: Literal["linear", "exponential", "inverse_sigmoid", "constant"] = field(
        "linear", "scheduled-sampling schedule of p (probability of feeding the model's own token)")
    p_start: float = field(0.0, "p at step 0")
    p_end: float = field(1.0, "p at the end of the ramp")
    ramp_steps: int = field(0, "steps over which p ramps, then stays at p_end (0 = all training steps; the "
                            "reference code: linear 0 -> 1 over 500)")
    per: Literal["token", "sequence", "batch"] = field(
        "token", "one scheduled-sampling coin per answer token (the paper's), per sequence, or one per batch (the "
        "reference code's: the whole batch is fed its own tokens or none)")
    tokens: Literal["greedy", "sampled"] = field("greedy", "the model's token: argmax, or sampled from its softmax")
    own_tokens: Literal["rollout", "one_pass"] = field(
        "rollout", "where the model's own tokens come from: rollout = generated from its own previous inputs (a "
        "sequential KV-cached roll-out, as the paper and the reference code); one_pass = the argmax (or sample) "
        "of one teacher-forced pass over the gold prefix, faster but an approximation (a token after a replaced "
        "one is what the model writes after the gold token, not after its own)")
    adapter_states: Literal["rollout", "mixed", "teacher_forced"] = field(
        "rollout", "where the adapter reads Z: a model-fed roll-out (default, no gold answer tokens), the mixed "
        "scheduled-sampling pass, or the teacher-forced pass (leaks the label; for the ablation only)")
    wdal: Literal["paper", "reference", "sum"] = field(
        "paper", "paper = L_W·L_D (the printed formula's identity), reference = the reference code's form, "
        "sum = L_W + L_D")

    def validate(self) -> None:
        within(self, 0, 1, "p_start", "p_end")
        at_least(self, 0, "ramp_steps")


# for the help and errors: every built-in task (the per-emotion WASSA ones as one pattern), the multiple-choice ones
_BUILTIN_TASKS = ", ".join("wassa, wassa-<emotion>" if n == "wassa" else n for n in known_tasks()
                           if n not in {f"wassa-{e}" for e in WASSA_EMOTIONS})
_MC_TASKS = ", ".join(MULTIPLE_CHOICE)


@dataclass
class TaskConfig:
    name: str = field("sst2", f"built-in task ({_BUILTIN_TASKS}) or a .csv/.tsv/.jsonl file")
    template: str = field("", "prompt template over the example fields ('' = the task's default)")
    target_field: str = field("", "data files: the target column")
    text_fields: list[str] = field([], "data files: the columns shown to the model (default: all but target/id)")
    task_type: Literal["classification", "regression"] = field("classification", "data files: classification | "
                                                               "regression")
    eval_path: str = field("", "data files: a separate eval file (default: a seeded 20 percent split)")
    labels: list[str] = field([], "label words in class order: data files (default: sorted train targets); "
                              "built-in classification tasks: new words, one per class (several tokens each, say)")
    answer: Literal["letter", "text", "name"] = field(
        "letter", f"multiple-choice tasks ({_MC_TASKS}): write the choice's letter, its text, or a word naming its "
        "position (answer1, answer2, ...: the same words for every example, listed so in the prompt); always "
        "decoded under the example's own choices; other tasks: letter (= their label word)")
    id_field: str = field("", "data files: a column of example ids")
    long_field: str = field("", "data files: the field cut when a prompt is over its token budget")
    max_train_examples: int = field(0, "use at most this many training examples (a seeded subset; 0 = all)")
    max_eval_examples: int = field(0, "evaluate on at most this many examples (a seeded subset; 0 = all); also "
                                   "the examples of the learning curve (train.eval_every) without val_examples")
    val_examples: int = field(0, "carve this many training examples (seeded, never trained on) as a validation "
                              "split: the learning curve and results['validation'] score it; select learning "
                              "rates, adapters and steps there and only report the eval split (0 = none)")
    splits: Literal["default", "paper"] = field(
        "default", "built-in tasks: default = the splits offline data allows (docs: Tasks); paper = the official "
        "training set the paper trained on and a fixed test set (the hub, or those files under the data root)")
    split_seed: int = field(0, "seed of the fixed splits: a single file's train/test split and the "
                            "max_eval_examples subset (mixed by purpose; the run seed never moves the test set)")
    choices_field: str = field("", "data files: a column holding each row's choices (multiple choice): a JSON "
                               "list (lettered A, B, ...) or an object from label to text; the target is a label, "
                               "a letter or a 0-based index")

    def validate(self) -> None:
        if not str(self.name).strip():
            raise ForethoughtError("name must be a built-in task or a data file")
        at_least(self, 0, "max_train_examples", "max_eval_examples", "val_examples")
        if self.answer == "name" and self.labels:
            raise ForethoughtError("answer name writes answer1, answer2, ...; it excludes task.labels")

    def options(self, builtin: bool) -> dict[str, Any]:
        opts: dict[str, Any] = {"template": self.template or None, "labels": self.labels or None,
                                "answer": self.answer if self.answer != "letter" else None}
        if not builtin:
            if self.answer != "letter" and not self.choices_field:
                raise ForethoughtError(f"task.answer {self.answer} applies to multiple choice: the built-in tasks "
                                       f"({_MC_TASKS}) or a data file with task.choices_field")
            if self.splits != "default":
                raise ForethoughtError(f"task.splits {self.splits} applies to the built-in tasks; a data file's "
                                       "splits are its own (task.eval_path, or a split seeded by task.split_seed)")
            opts.update(target_field=self.target_field or None, text_fields=self.text_fields or None,
                        task_type=self.task_type, eval_path=self.eval_path or None,
                        id_field=self.id_field or None, long_field=self.long_field or None,
                        choices_field=self.choices_field or None)
        elif any((self.target_field, self.text_fields, self.eval_path, self.id_field, self.long_field,
                  self.choices_field)):
            raise ForethoughtError(f"task '{self.name}' is built in: target_field, text_fields, eval_path, "
                                   "id_field, long_field and choices_field apply only to data files")
        else:
            opts["splits"] = self.splits if self.splits != "default" else None
        return {k: v for k, v in opts.items() if v is not None}


# the choice-scoring adapter's settings and the values that leave it off (a choice_loglik of 0 reads no β)
_CHOICE_OFF = (("choice_alpha", (CHOICE_ALPHA0,)), ("choice_loglik", (None, 0.0)))


@dataclass
class HeadConfig:
    pooling: Pooling = field(
        "", "; ".join(f"{m.name}: {' | '.join(m.poolings)}" for m in _HEADED) +
        f" ('' = {' / '.join(m.poolings[0] for m in _HEADED)})")
    hidden: int = field(256, "predgen adapter MLP width (reads logits: the width of its first linear layer)")
    lr_scale: float = field(1.0, "the head's / adapter's learning rate is train.lr times this (1 = one rate for "
                            "all, as in the paper)")
    reads: Literal["auto", "states", "logits", "choices", "choices_loglik"] = field(
        "auto", "what PredGen's adapter T(Z) reads: states = the generated answer's hidden states -> a class (or "
        "number); logits = the reference code's adapter, two bias-free linear layers over the answer positions' "
        "vocabulary logits (classification); choices = a score per choice comparing Z with that choice's own "
        "states under the same model, softmax over the example's own choices (classification); choices_loglik = "
        "not PredGen: choices plus each choice's log-likelihood, what the rank decoder reads (= choices with "
        f"head.choice_loglik {CHOICE_LOGLIK0:g}); auto = choices on multiple-choice tasks answered with the choice's "
        "text (task.answer text), states otherwise (letters, names, label words, numbers)")
    choice_alpha: float = field(CHOICE_ALPHA0, "reads choices: the starting weight α of cos(z, c_k) in each choice's "
                                "score (learned); 5 starts the adapter at the answer it wrote, 0 leaves the choice to "
                                "its MLP from the first step")
    choice_loglik: float | None = field(
        None, "reads choices: the starting weight β of each choice's log-likelihood under the model (its summed "
        "token log-probability after the prompt, as --eval.decoder rank scores it) in the choice's score "
        "(learned); 0 = the score does not read it (PredGen's T(Z)); > 0 = the likelihood variant, which reads "
        f"what the rank decoder reads; default 0, {CHOICE_LOGLIK0:g} with head.reads choices_loglik")

    def validate(self) -> None:
        at_least(self, 1, "hidden")
        positive(self, "lr_scale")
        for key, _ in _CHOICE_OFF:  # whether they apply is checked once the adapter is known (with_task_defaults)
            if getattr(self, key) is not None:
                at_least(self, 0.0, key)


@dataclass
class EvalSettings:
    batch_size: int = field(32, "examples per inference batch")
    decoder: Literal["greedy", "expected", "rank"] = field(
        "greedy", "besides the greedy answer: expected = regression generator/predgen: the expected value over "
        "every well-formed number; rank = classification generator/predgen/base: the choice of highest "
        "log-likelihood (sum, and per character as lm-eval-harness's acc_norm), which every classification "
        "task reports anyway (the bar a prediction must clear)")
    latency_examples: int = field(16, "examples timed one at a time for the per-example latency (0 = skip)")

    def validate(self) -> None:
        at_least(self, 1, "batch_size")
        at_least(self, 0, "latency_examples")


@dataclass
class PredGenConfig:
    run: RunConfig = field(RunConfig(name="predgen"), "run folder, seed, device")
    method: MethodName = field(
        "predgen", " | ".join(m.name + (f" ({m.note})" if m.note else "") for m in METHODS.values()))
    base: str = field("smollm2-135m", "HF causal LM: hub id, local folder, or smollm2-135m (offline)")
    base_dtype: Literal["auto", "fp32", "bf16", "fp16"] = field(
        "auto", "dtype the base is loaded in: auto = run.precision for a frozen base (LoRA / AdaLoRA / DoRA), "
        "fp32 when its own weights train (adapter.method full; mixed precision autocasts them)")
    trust_remote_code: bool = field(False, "allow model code from the hub")
    adapter: AdapterConfig = field(AdapterConfig(), "PEFT setting (the same for every method)")
    task: TaskConfig = field(TaskConfig(), "task and data")
    prompt: PromptConfig = field(PromptConfig(), "prompt rendering and answer format")
    layer: int = field(-1, "hidden-state layer read by the predictor head / task adapter (-1 = last)")
    mask_prompt: bool = field(True, "generator/predgen: no LM loss on prompt tokens (False = loss on them too)")
    head: HeadConfig = field(HeadConfig(), "predictor head / predgen task adapter")
    predgen: PredGenSettings = field(PredGenSettings(), "scheduled sampling, adapter input, WDAL")
    train: TrainConfig = field(TrainConfig(steps=150, batch_size=16, lr=2e-4, warmup_steps=10, log_every=10),
                               "optimisation; eval_every N: a learning curve on the evaluation examples")
    eval: EvalSettings = field(EvalSettings(), "evaluation")

    def validate(self) -> None:
        check_method_settings(self)
        with_task_defaults(self)  # the task-dependent defaults resolve (or say why not) before anything loads


def check_method_settings(cfg: PredGenConfig) -> None:
    """The settings of ``predgen train`` that apply only to some methods, checked against the facts of the
    registered method (here, not in the registry: the registry imports no predgen module)."""
    method = method_named(cfg.method)
    if method.has_head and cfg.head.pooling not in ("", *method.poolings):
        raise ForethoughtError(f"head.pooling {cfg.head.pooling} does not apply to the {method.name}'s head; "
                               f"use {' or '.join(method.poolings)}")
    if cfg.head.reads not in ("states", "auto") and not method.head_reads:
        readers = " or ".join(f"--method {m.name}" for m in METHODS.values() if m.head_reads)
        raise ForethoughtError(f"head.reads {cfg.head.reads} is PredGen's adapter's input; the {method.name} "
                               f"has none (use {readers})")
    if cfg.eval.decoder == "rank" and not method.decodes:
        raise ForethoughtError(f"eval.decoder rank ranks the generated choices; the {method.name} generates none")


def with_task_defaults(cfg: PredGenConfig) -> PredGenConfig:
    """``cfg`` with the defaults that depend on its task and method filled in (the run's config records them).

    On a built-in multiple-choice task answered with the choice's text (``task.answer text``): the methods that
    write their answer get lm-eval-harness's prompt for the task unless ``task.template`` is given (the choices
    are not listed; the Predictor, which writes nothing, keeps the prompt that lists them), and PredGen's adapter
    (``head.reads auto``) is T(Z) comparing the answer's states with each choice's own states, without the
    choices' likelihoods (``head.choice_loglik`` 0). Elsewhere ``auto`` reads the answer's states (the paper's
    T(Z); with ``task.answer name`` a head over the states of the written answer1..answerN). ``choices_loglik``
    is ``choices`` with β starting at :data:`CHOICE_LOGLIK0` (the likelihood variant). Raises when a
    choice-scoring setting is given for an adapter that does not read choices."""
    method, key = method_named(cfg.method), builtin_name(cfg.task.name)
    text_mc = (key in MULTIPLE_CHOICE or bool(cfg.task.choices_field)) and cfg.task.answer == "text"
    task = cfg.task
    if text_mc and key is not None and method.decodes and not task.template and text_template(key):
        task = dataclasses.replace(task, template=text_template(key))
    head = cfg.head
    reads = head.reads if head.reads != "auto" else ("choices" if text_mc and method.head_reads else "states")
    loglik0 = CHOICE_LOGLIK0 if reads == "choices_loglik" else 0.0
    reads = "choices" if reads == "choices_loglik" else reads
    if reads != "choices":
        for k, off in _CHOICE_OFF:
            if getattr(head, k) not in off:
                raise ForethoughtError(
                    f"head.{k} {getattr(head, k):g} is the choice-scoring adapter's; it applies with --head.reads "
                    f"choices, and this run's adapter reads {reads} (head.reads auto reads choices only with "
                    "--method predgen on a multiple-choice task with --task.answer text)")
    loglik = loglik0 if head.choice_loglik is None else head.choice_loglik
    return dataclasses.replace(cfg, task=task, head=dataclasses.replace(head, reads=reads, choice_loglik=loglik))


def adapter_name(reads: str, choice_loglik: float | None = 0.0) -> str:
    """What a PredGen run's prediction is, for its results and reports: T(Z) in one of its forms, or the likelihood
    variant (choice states plus the choices' log-likelihoods), which reads what the rank decoder reads and is not
    reported as PredGen's T(Z)."""
    if reads == "choices" and choice_loglik:
        return "likelihood variant: choice states + the choices' log-likelihoods (reads what the rank decoder " \
               "reads; not PredGen's T(Z))"
    return {"states": "T(Z): the written answer's states", "logits": "T(Z) over the written answer's logits (the "
            "reference code's adapter)", "choices": "T(Z): the written answer's states against each choice's "
            "states"}[reads]


@dataclass
class EvalConfig:
    model: str = field("", "a trained run folder (or its model/ folder)")
    split: Literal["train", "validation", "eval"] = field(
        "eval", "which split of the model's task (exactly as its run drew it; validation: carved by "
        "task.val_examples)")
    max_examples: int = field(0, "at most this many examples (a seeded subset; 0 = all)")
    seed: int | None = field(None, "seed of the max_examples subset (default: the run's seed; the split itself "
                             "is the run's own, its max_eval_examples subset included)")
    device: str = field("auto", "auto | cpu | cuda")
    eval: EvalSettings = field(EvalSettings(), "batch size, decoder, latency")
    out: str = field("", "where to write the results JSON ('' = <run>/eval-<split>.json)")

    def validate(self) -> None:
        at_least(self, 0, "max_examples")


@dataclass
class PredictConfig:
    model: str = field("", "a trained run folder (or its model/ folder)")
    input: str = field("", "a .csv/.tsv/.jsonl file with the fields the task's template reads")
    output: str = field("", "predictions JSONL to write ('' = <input stem>.predictions.jsonl beside the input)")
    id_field: str = field("", "a column of ids to copy into the output")
    device: str = field("auto", "auto | cpu | cuda")
    eval: EvalSettings = field(EvalSettings(latency_examples=0), "batch size and decoder")


REPRESENTATIONS = ("pooled_last", "pooled_mean", "tokens")


@dataclass
class MineConfig:
    model: str = field("", "a trained run folder (or its model/ folder)")
    split: str = field("eval", "examples to estimate on: eval | train, exactly as the model's run drew them (split "
                       "into fit / evaluation halves)")
    layer: int | None = field(None, "hidden-state layer whose states are Z (default: the layer the model reads; "
                              "0 = the embeddings, -1 = the last layer)")
    max_examples: int = field(1000, "at most this many examples (a seeded subset; 0 = all)")
    representations: list[str] = field(list(REPRESENTATIONS), "pooled_last, pooled_mean, tokens ([] = no MINE, "
                                       "with --words)")
    words: int = field(0, "NPMI of input words against the written answer: the K input words of highest NPMI "
                       "with each answer the model writes (classification; 0 = off)")
    word_min_count: int = field(5, "NPMI words: only words in at least this many of the examples")
    word_list: list[str] = field([], "NPMI words: also report these words' scores (any count)")
    seeds: list[int] = field([0, 1, 2], "one half/half split and statistics-network init per seed")
    steps: int = field(600, "statistics-network training steps")
    batch_size: int = field(128, "examples per MINE step")
    lr: float = field(1e-4, "Adam learning rate")
    hidden: int = field(256, "statistics-network width")
    ema: float = field(0.01, "moving-average rate of E[e^T] (bias-corrected gradient)")
    feature_batch_size: int = field(16, "examples per forward pass when extracting states")
    device: str = field("auto", "auto | cpu | cuda")
    out: str = field("", "results JSON ('' = <run>/mine.json; the plot goes beside it)")


@dataclass
class AnswerTokensConfig:
    """``predgen answer-tokens``: how many tokens a task's answers take under a base model's tokenizer."""

    run: RunConfig = field(RunConfig(name="answer-tokens"), "run folder (results.json); run.seed draws the split "
                           "as a training run with that seed would")
    base: str = field("smollm2-135m", "whose tokenizer: an HF causal LM's hub id or folder, or smollm2-135m")
    task: TaskConfig = field(TaskConfig(), "the task and how its answers are written (task.answer)")
    prompt: PromptConfig = field(PromptConfig(), "the prompt's token budget and the numbers' decimals, as in "
                                 "predgen train")
    prompt_examples: int = field(500, "prompt lengths are averaged over this many eval examples (the first ones)")

    def validate(self) -> None:
        at_least(self, 1, "prompt_examples")
        if not self.base.strip():
            raise ForethoughtError("base must name an HF causal LM (hub id, folder or smollm2-135m)")


@dataclass
class SpeedConfig:
    """``predgen speed``: PredGen's training step against the Generator's, its parts, and three speed-ups against
    the code they replaced (prompt logits, KV-cached decoding, the expected-value level walk)."""

    run: RunConfig = field(RunConfig(name="predgen-speed"), "run folder (results.json); run.seed: the LoRA's init, "
                           "the examples drawn, the decoders' random answers")
    base: str = field("smollm2-135m", "HF causal LM: hub id, local folder, or smollm2-135m (offline)")
    steps: int = field(12, "timed training steps per method (after 2 warm-up steps)")
    batch_size: int = field(16, "examples per training step and per decoding batch")
    parts_steps: int = field(4, "PredGen steps timed part by part (profiled; after one warm-up), prompt passes "
                             "timed each way, and STS-B steps timed with each form of scheduled sampling's own tokens")
    text_task: str = field("arc-easy", "also time a step's parts on this multiple-choice task answered with the "
                           "choice's text ('' = skip)")
    decode_examples: int = field(64, "SST-2 dev prompts each decoder decodes")
    ev_examples: int = field(32, "STS-B dev prompts each expected-value decoder scores")

    def validate(self) -> None:
        at_least(self, 1, "steps", "batch_size", "parts_steps", "decode_examples", "ev_examples")
        if self.text_task and builtin_name(self.text_task) not in MULTIPLE_CHOICE:
            raise ForethoughtError(f"text_task must be a built-in multiple-choice task ({_MC_TASKS}) or '', got "
                                   f"'{self.text_task}'")
        if not self.base.strip():
            raise ForethoughtError("base must name an HF causal LM (hub id, folder or smollm2-135m)")


AnswerKey = Literal["prediction", "decoded", "expected_value", "rank", "rank_norm"]


@dataclass
class CompareConfig:
    a: str = field("", "side A: a run folder or a predictions JSONL")
    b: str = field("", "side B: a run folder or a predictions JSONL (may be A itself, with another key or step)")
    key_a: AnswerKey = field("prediction", "A's answer: 'prediction' (PredGen: its adapter's), the 'decoded' answer "
                             "(Generator, PredGen), the 'expected_value' (regression, eval.decoder expected) or "
                             "the 'rank' / 'rank_norm' choice (classification, eval.decoder rank)")
    key_b: AnswerKey = field("prediction", "B's answer, as key_a")
    step_a: int = field(0, "A's learning-curve point at this training step (0 = the final predictions)")
    step_b: int = field(0, "B's learning-curve point, as step_a")
    n_boot: int = field(10_000, "bootstrap resamples")
    seed: int = field(0, "seed of the bootstrap resamples")
    out: str = field("", "also write the comparison as JSON here ('' = print only)")

    def validate(self) -> None:
        if self.n_boot < 1:
            raise ForethoughtError(f"n_boot must be positive, got {self.n_boot}")
        if self.step_a < 0 or self.step_b < 0:
            raise ForethoughtError("step_a and step_b are training steps (0 = the final predictions)")
