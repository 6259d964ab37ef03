"""Range checks for the PredGen settings' ``validate()`` methods (called when a config loads, before any data or
model): one readable line per bad value, naming the key and what it must be."""

from __future__ import annotations

import math
from typing import Any

from forethought.core.errors import ForethoughtError


def at_least(obj: Any, low: float, *names: str) -> None:
    """Each named setting of ``obj`` is a finite number >= ``low``."""
    for name in names:
        value = getattr(obj, name)
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= low):
            raise ForethoughtError(f"{name} must be at least {low:g}, got {value!r}")


def positive(obj: Any, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ForethoughtError(f"{name} must be a positive number, got {value!r}")


def within(obj: Any, low: float, high: float, *names: str, high_open: bool = False) -> None:
    """Each named setting is in [low, high] (or [low, high) with ``high_open``)."""
    for name in names:
        value = getattr(obj, name)
        ok = isinstance(value, (int, float)) and low <= value and (value < high if high_open else value <= high)
        if not ok:
            raise ForethoughtError(f"{name} must be in [{low:g}, {high:g}{')' if high_open else ']'}, got {value!r}")
