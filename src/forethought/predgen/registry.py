"""PredGen's methods, each one object registered once in :data:`METHODS`: what the commands, the configs and the
saved-model loader ask of a method instead of comparing its name.

A method says whether it trains, whether it writes (decodes) an answer, which head it has (and its poolings,
the default first), whether that head reads ``head.reads``, how its training loss is called and how its head is
built. Its prediction follows from the first two: a method that decodes and has a head predicts with the head
reading the answer it wrote (PredGen: both are scored); one that decodes without a head predicts its decoded
answer (Generator, base); one with a head that does not decode predicts from the prompt (Predictor).

The CLI / YAML spelling stays the name (``--method predgen``; ``predgen.json``'s ``"method"``): configs validate
it against :func:`method_names` (a ``Literal`` built from them). Adding a method = one class below and one
entry in :data:`METHODS`.

This module imports no torch, so the configs can validate against it before anything heavy loads; a method's
loss and head import their (torch) modules when first asked.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from forethought.core.errors import ForethoughtError

if TYPE_CHECKING:
    from forethought.predgen.config import PredGenConfig
    from forethought.predgen.methods import Encoder

CHOICE_ALPHA0 = 5.0  # the choice-scoring adapter's starting α: it starts as the answer the model wrote
# its starting β, the weight of each choice's log-likelihood: 1 adds the rank decoder's score (chosen on ARC-Easy's
# validation split over the adapters and prompts, 3 seeds; docs/predgen.md)
CHOICE_LOGLIK0 = 1.0

LossFn = Callable[[Any, dict[str, Any]], Any]  # (model, batch) -> loss (the trainer's loss_fn)


@dataclass(frozen=True)
class Method:
    """One method's facts and behaviour (subclasses override :meth:`loss_fn` and :meth:`build_head`)."""

    name: str
    decodes: bool  # writes its answer (constrained greedy): the encoder builds the well-formed answers' trie
    poolings: tuple[str, ...] = ()  # its head's poolings, the default first; () = no head
    head_reads: bool = False  # its head takes head.reads (which view of the written answer it reads)
    trains: bool = True  # False: evaluated as it is (zero-shot), nothing trained or saved
    note: str = ""  # shown in --method's help

    def __post_init__(self) -> None:
        if not (self.decodes or self.poolings):  # it would have nothing to predict with
            raise ValueError(f"method {self.name} neither decodes nor has a head")

    @property
    def has_head(self) -> bool:
        return bool(self.poolings)

    @property
    def answers_twice(self) -> bool:
        """Its head reads the answer it decoded: the head's prediction and the decoded answer are both scored."""
        return self.has_head and self.decodes

    def pooling(self, configured: str) -> str:
        """The head's pooling: ``configured`` (``head.pooling``), or the method's default when it is ''."""
        return configured or (self.poolings[0] if self.poolings else "")

    def check(self, cfg: PredGenConfig) -> None:
        """The settings of ``predgen train`` that apply only to some methods (checked when the config loads)."""
        if self.has_head and cfg.head.pooling not in ("", *self.poolings):
            raise ForethoughtError(f"head.pooling {cfg.head.pooling} does not apply to the {self.name}'s head; "
                                   f"use {' or '.join(self.poolings)}")
        if cfg.head.reads not in ("states", "auto") and not self.head_reads:
            readers = " or ".join(f"--method {m.name}" for m in METHODS.values() if m.head_reads)
            raise ForethoughtError(f"head.reads {cfg.head.reads} is PredGen's adapter's input; the {self.name} "
                                   f"has none (use {readers})")
        if cfg.eval.decoder == "rank" and not self.decodes:
            raise ForethoughtError(f"eval.decoder rank ranks the generated choices; the {self.name} generates none")

    def loss_fn(self, cfg: PredGenConfig, enc: Encoder) -> LossFn:
        """The trainer's ``loss_fn(model, batch)`` for a run with ``cfg`` on ``enc``'s task."""
        raise ForethoughtError(f"the {self.name} method trains nothing")

    def build_head(self, d: int, n_out: int, pooling: str, hidden: int, bias_init: float | None,
                   reads: str = "states", vocab: int = 0, choice_alpha: float = CHOICE_ALPHA0,
                   choice_loglik: float = 0.0) -> Any:
        """Its head (an ``nn.Module``) over ``d``-wide states with ``n_out`` outputs, or None. Regression heads
        start at the mean training target (``bias_init``) so the first MSE steps are not spent on the offset;
        ``choice_alpha`` / ``choice_loglik`` are the choice-scoring adapter's starting α and β."""
        return None


class Predictor(Method):
    """A head over the prompt's pooled states; cross-entropy or MSE. Writes nothing."""

    def loss_fn(self, cfg: PredGenConfig, enc: Encoder) -> LossFn:
        from forethought.predgen.methods import predictor_loss

        task_type, layer = enc.spec.task_type, cfg.layer
        return lambda m, b: m(predictor_loss, b, task_type, layer)

    def build_head(self, d: int, n_out: int, pooling: str, hidden: int, bias_init: float | None,
                   reads: str = "states", vocab: int = 0, choice_alpha: float = CHOICE_ALPHA0,
                   choice_loglik: float = 0.0) -> Any:
        from forethought.predgen.model import PoolingHead, fill_bias

        head = PoolingHead(d, n_out, pooling)
        fill_bias(head.out, bias_init)
        return head


class Generator(Method):
    """Teacher-forced cross-entropy on the answer tokens; predicts the answer it decodes."""

    def loss_fn(self, cfg: PredGenConfig, enc: Encoder) -> LossFn:
        from forethought.predgen.methods import generator_loss

        mask_prompt = cfg.mask_prompt
        return lambda m, b: m(generator_loss, b, mask_prompt)


class PredGen(Method):
    """Writes its answer (scheduled sampling, WDAL) and predicts with a task adapter reading it."""

    def loss_fn(self, cfg: PredGenConfig, enc: Encoder) -> LossFn:
        from forethought.predgen.methods import predgen_loss

        s, task_type, layer, mask_prompt = cfg.predgen, enc.spec.task_type, cfg.layer, cfg.mask_prompt
        return lambda m, b: m(predgen_loss, b, s, enc, task_type, layer, mask_prompt)

    def build_head(self, d: int, n_out: int, pooling: str, hidden: int, bias_init: float | None,
                   reads: str = "states", vocab: int = 0, choice_alpha: float = CHOICE_ALPHA0,
                   choice_loglik: float = 0.0) -> Any:
        """``reads``: states -> TaskAdapter, logits -> LogitAdapter over ``vocab`` logits, choices ->
        ChoiceAdapter (the last two score classes: no regression bias)."""
        from forethought.predgen.model import ChoiceAdapter, LogitAdapter, TaskAdapter, fill_bias

        if reads == "logits":
            return LogitAdapter(vocab, n_out, hidden)
        if reads == "choices":
            return ChoiceAdapter(d, n_out, pooling, hidden, alpha0=choice_alpha, beta0=choice_loglik)
        head = TaskAdapter(d, n_out, pooling, hidden)
        fill_bias(head.mlp[-1], bias_init)
        return head


class Base(Method):
    """The untrained base model, evaluated zero-shot as a generator (its loss: none, it trains nothing)."""


METHODS: dict[str, Method] = {m.name: m for m in (
    Predictor("predictor", decodes=False, poolings=("last", "mean")),
    Generator("generator", decodes=True),
    PredGen("predgen", decodes=True, poolings=("attention", "mean"), head_reads=True),
    Base("base", decodes=True, trains=False,
         note="the untrained base model, evaluated zero-shot as a generator: nothing is trained"),
)}


def method_names() -> tuple[str, ...]:
    return tuple(METHODS)


def trained_method_names() -> tuple[str, ...]:
    """The methods a saved model can hold (the others save nothing)."""
    return tuple(n for n, m in METHODS.items() if m.trains)


def method_named(method: str | Method) -> Method:
    """The registered method of that name (a :class:`Method` passes through): the one place a name is read."""
    if isinstance(method, Method):
        return method
    if method not in METHODS:
        close = difflib.get_close_matches(str(method), list(METHODS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ForethoughtError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}{hint}")
    return METHODS[method]
