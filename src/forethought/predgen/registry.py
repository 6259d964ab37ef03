"""PredGen's methods, each one object registered once in :data:`METHODS`: what the commands, the configs and the
saved-model loader ask of a method instead of comparing its name.

A method says whether it trains, whether it writes (decodes) an answer, which head it has (and its poolings,
the default first) and whether that head reads ``head.reads``. Its prediction follows from the first two: a method
that decodes and has a head predicts with the head reading the answer it wrote (PredGen: both are scored); one
that decodes without a head predicts its decoded answer (Generator, base); one with a head that does not decode
predicts from the prompt (Predictor).

The CLI / YAML spelling stays the name (``--method predgen``; ``predgen.json``'s ``"method"``): configs validate
it against :func:`method_names` (a ``Literal`` built from them). Adding a method = one class below, one entry in
:data:`METHODS`, and, when it trains or has a head, its loss registered for its class in ``methods.py``
(:func:`~forethought.predgen.methods.training_loss`) and its head in ``model.py``
(:func:`~forethought.predgen.model.build_head`).

This module imports no torch and no other predgen module (the configs import it to validate a method before
anything heavy loads): the torch code that belongs to a method lives with the rest of it and is chosen there by
the method object's class, so the imports among predgen's modules go one way (tests/test_layout.py).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from forethought.core.errors import ForethoughtError

CHOICE_ALPHA0 = 5.0  # the choice-scoring adapter's starting α: it starts as the answer the model wrote
# the likelihood variant's starting β (--head.reads choices_loglik), the weight of each choice's log-likelihood: 1
# adds the rank decoder's score. PredGen's T(Z) reads no likelihoods (β 0, the default).
CHOICE_LOGLIK0 = 1.0

LossFn = Callable[[Any, dict[str, Any]], Any]  # (model, batch) -> loss: the trainer's loss_fn (methods.training_loss)


@dataclass(frozen=True)
class Method:
    """One method's facts. Its class says which training loss (``methods.training_loss``) and which head
    (``model.build_head``) it has; a subclass inherits its parent's."""

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


class Predictor(Method):
    """A head over the prompt's pooled states; cross-entropy or MSE. Writes nothing."""


class Generator(Method):
    """Teacher-forced cross-entropy on the answer tokens; predicts the answer it decodes."""


class PredGen(Method):
    """Writes its answer (scheduled sampling, WDAL) and predicts with a task adapter reading it."""


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
