"""The settings of ``forethought predgen train`` (task, head, evaluation and the whole run), in one place so the
training command, the saved-model loader and the data split read the same classes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from forethought.core.config import at_least, field, positive
from forethought.core.errors import ForethoughtError
from forethought.core.run import RunConfig
from forethought.core.trainer import TrainConfig
from forethought.predgen.methods import PredGenSettings, PromptConfig
from forethought.predgen.model import AdapterConfig
from forethought.predgen.tasks.builtin import MULTIPLE_CHOICE, WASSA_EMOTIONS, known_tasks

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

    def validate(self) -> None:
        if not str(self.name).strip():
            raise ForethoughtError("name must be a built-in task or a data file")
        at_least(self, 0, "max_train_examples", "max_eval_examples", "val_examples")
        if self.answer == "name" and self.labels:
            raise ForethoughtError("answer name writes answer1, answer2, ...; it excludes task.labels")

    def options(self, builtin: bool) -> dict[str, Any]:
        opts: dict[str, Any] = {"template": self.template or None, "labels": self.labels or None}
        if not builtin:
            if self.answer != "letter":
                raise ForethoughtError(f"task.answer {self.answer} applies to the built-in multiple-choice tasks "
                                       f"({_MC_TASKS})")
            opts.update(target_field=self.target_field or None, text_fields=self.text_fields or None,
                        task_type=self.task_type, eval_path=self.eval_path or None,
                        id_field=self.id_field or None, long_field=self.long_field or None)
        elif any((self.target_field, self.text_fields, self.eval_path, self.id_field, self.long_field)):
            raise ForethoughtError(f"task '{self.name}' is built in: target_field, text_fields, eval_path, "
                                   "id_field and long_field apply only to data files")
        else:
            opts["answer"] = self.answer if self.answer != "letter" else None
        return {k: v for k, v in opts.items() if v is not None}


HEAD_READS = ("states", "logits", "choices")


@dataclass
class HeadConfig:
    pooling: Literal["", "last", "mean", "attention"] = field(
        "", "predictor: last | mean; predgen adapter: attention | mean ('' = last / attention)")
    hidden: int = field(256, "predgen adapter MLP width (reads logits: the width of its first linear layer)")
    lr_scale: float = field(1.0, "the head's / adapter's learning rate is train.lr times this (1 = one rate for "
                            "all, as in the paper)")
    reads: Literal["states", "logits", "choices"] = field(
        "states", "what PredGen's adapter reads: states = T(Z), the generated answer's hidden states -> a class "
        "(or number); logits = the reference code's adapter, two bias-free linear layers over the answer "
        "positions' vocabulary logits (classification); choices = a score per choice from Z and that choice's "
        "own states under the same model, softmax over the example's own choices (classification)")

    def validate(self) -> None:
        at_least(self, 1, "hidden")
        positive(self, "lr_scale")


@dataclass
class EvalSettings:
    batch_size: int = field(32, "examples per inference batch")
    decoder: Literal["greedy", "expected", "rank"] = field(
        "greedy", "besides the greedy answer: expected = regression generator/predgen: the expected value over "
        "every well-formed number; rank = classification generator/predgen/base: the choice of highest "
        "log-likelihood (sum, and per character as lm-eval-harness's acc_norm)")
    latency_examples: int = field(16, "examples timed one at a time for the per-example latency (0 = skip)")

    def validate(self) -> None:
        at_least(self, 1, "batch_size")
        at_least(self, 0, "latency_examples")


@dataclass
class PredGenConfig:
    run: RunConfig = field(RunConfig(name="predgen"), "run folder, seed, device")
    method: Literal["predictor", "generator", "predgen", "base"] = field(
        "predgen", "predictor | generator | predgen | base (the untrained base model, evaluated zero-shot as a "
        "generator: nothing is trained)")
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
        pooling = {"predictor": ("", "last", "mean"), "predgen": ("", "attention", "mean")}.get(self.method)
        if pooling is not None and self.head.pooling not in pooling:
            raise ForethoughtError(f"head.pooling {self.head.pooling} does not apply to the {self.method}'s head; "
                                   f"use {' or '.join(p for p in pooling if p)}")
        if self.head.reads != "states" and self.method != "predgen":
            raise ForethoughtError(f"head.reads {self.head.reads} is PredGen's adapter's input; the {self.method} "
                                   "has none (use --method predgen)")
        if self.eval.decoder == "rank" and self.method == "predictor":
            raise ForethoughtError("eval.decoder rank ranks the generated choices; the predictor generates none")
