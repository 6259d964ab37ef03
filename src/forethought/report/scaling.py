"""Results that concern running at scale (``benchmarks/preset_memory.py``) as markdown."""

from __future__ import annotations


def preset_memory(r: dict) -> list[str]:
    """Expected memory of the paper presets: the benchmark states its method and writes its own table rows."""
    return [r.get("method", "").strip(), "", *r["table"]]
