"""The answer text a generator writes (a label word, or a number with fixed decimals) and reading it back."""

from __future__ import annotations

import math
import re

from forethought.core.errors import ForethoughtError
from forethought.predgen.tasks.spec import TaskSpec

_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_OPENERS = "([{\"'`*"


def format_target(spec: TaskSpec, value: str | float, decimals: int = 2) -> str:
    """The answer text the generator writes: the label word, or the number with ``decimals`` fixed decimals,
    clipped to ``spec.value_range`` (``3.14159 -> "3.14"``; ``-0.00`` is written ``0.00``)."""
    if spec.task_type == "classification":
        if isinstance(value, str) and value in spec.labels:
            return value
        raise ForethoughtError(f"task '{spec.name}': target {value!r} is not one of the labels {spec.labels}")
    if isinstance(decimals, bool) or not isinstance(decimals, int) or decimals < 0:
        raise ForethoughtError(f"decimals must be a non-negative integer, got {decimals!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ForethoughtError(f"task '{spec.name}': regression target {value!r} is not a number") from None
    if not math.isfinite(number):
        raise ForethoughtError(f"task '{spec.name}': regression target {value!r} is not finite")
    number = _clip(spec, number)
    text = f"{number:.{decimals}f}"
    if text.startswith("-") and float(text) == 0.0:
        text = text[1:]
    return text


def parse_target(spec: TaskSpec, text: str) -> str | float | None:
    """Read a generated answer back: a label word, a float, or None when it cannot be parsed.

    Classification: the text (leading space, brackets and quotes ignored) must start with a label word,
    matched case-insensitively and followed by a non-alphanumeric character or the end (``"Yes."`` -> ``yes``,
    ``"(B)"`` -> ``B``, ``"Answer"`` -> None for labels A-D); longer labels are tried first. Regression: a
    number at the start of the text, clipped to ``spec.value_range``; None if there is none or it is not finite.
    """
    stripped = text.lstrip().lstrip(_OPENERS).lstrip()
    if spec.task_type == "classification":
        folded = stripped.casefold()
        for label in sorted(spec.labels, key=len, reverse=True):
            word = label.casefold()
            if folded.startswith(word) and (len(folded) == len(word) or not folded[len(word)].isalnum()):
                return label
        return None
    match = _NUMBER.match(stripped)
    if match is None:
        return None
    number = float(match.group())
    if not math.isfinite(number):
        return None
    return _clip(spec, number)


def _clip(spec: TaskSpec, number: float) -> float:
    if spec.value_range is None:
        return number
    low, high = spec.value_range
    return min(max(number, low), high)
