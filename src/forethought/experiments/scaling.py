"""The paper presets' memory (``forethought presets memory``) as a table: a row per preset and model or stage, the
columns of the scaling guide (parameters, precision, micro-batch x accumulation, checkpointing, the project's
estimate, the activation formula, the total and whether it fits, and the total without accumulation or
checkpointing). Also the spec ``preset_memory``'s derive function."""

from __future__ import annotations

from typing import Any

GIB = 2**30


def millions(n: int) -> str:
    return f"{n / 1e6:,.0f}M" if n >= 1e7 else f"{n / 1e6:.2f}M"


def gib(n: float) -> str:
    x = n / GIB
    return f"{x:.1f}" if x >= 0.1 or x == 0 else f"{x:.3f}"


def memory_rows(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{preset: {model or stage: {column: cell}}}`` from the verb's rows (bytes), sizes in GiB as text."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        e, c, p = r["estimate"], r["as_configured"], r["plain"]
        out.setdefault(r["preset"], {})[r["part"]] = {
            "parameters (trainable)": f"{millions(e['parameters'])} ({millions(e['trainable_parameters'])})",
            "precision": r["precision"],
            "rows x accumulation": f"{c['micro_batch']} x {c['grad_accum']}",
            "checkpointing": "yes" if c["activation_checkpointing"] else "no",
            "weights + grads + AdamW + autocast copies (GiB)": gib(e["total_bytes"]),
            "activations + logits (GiB, rough)": gib(c["activations_bytes"] + c["logits_bytes"] + c["other_bytes"]),
            "total (GiB)": gib(c["total_bytes"]),
            "fits": "yes" if c["fits"] else "**no**",
            "without accumulation or checkpointing (GiB)": gib(p["total_bytes"])
            + ("" if p["fits"] else " (does not fit)")}
    return out


def memory(records: dict[str, dict[str, Any]], collected: dict[str, Any]) -> dict[str, Any]:
    """``preset_memory``'s derive: the table of the first finished run (every run computes the same one: no
    seed enters the estimate)."""
    first = next(iter(records.values()))["results"]
    return {"memory of each model or stage": memory_rows(first["rows"])}
