"""Number formatting shared by the results renderers: every cell is a string made from a JSON value."""

from __future__ import annotations

import re
from typing import Any


def num(x: Any, spec: str = ".3f") -> str:
    """A number in ``spec``, or an en dash when the JSON has none."""
    return "–" if x is None else format(x, spec)


def mean_std(m: Any, sd: Any, spec: str = ".3f") -> str:
    """'m ± sd' (just 'm' when there is no spread, e.g. one seed)."""
    if m is None:
        return "–"
    return format(m, spec) if sd is None else f"{m:{spec}} ± {sd:{spec}}"


def interval(iv: Any, spec: str = "+.3f") -> str:
    """'[lo, hi]' or an en dash."""
    return "–" if not iv else f"[{iv[0]:{spec}}, {iv[1]:{spec}}]"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown table (a list of lines)."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(r) + " |" for r in rows)]


def checks(results: dict | None) -> list[str]:
    """A benchmark's pass/fail checks as a bullet list."""
    out = []
    for k, v in (results or {}).items():
        state = "met" if v.get("pass") else "MISSED" if v.get("pass") is False else "n/a"
        out.append(f"- {k.replace('_', ' ')}: **{state}**")
    return out


def minutes(seconds: Any) -> str:
    return "–" if seconds is None else f"{seconds / 60:.0f}"


def public(text: str) -> str:
    """A results file's free text without remarks that point at the project's internal history (issue or session
    numbers), which mean nothing to a reader of the docs."""
    return re.sub(r"\s*\([^()]*\b(?:issue|session)s? #?\d+[^()]*\)", "", text)
