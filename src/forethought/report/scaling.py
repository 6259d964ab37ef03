"""Results that concern running at scale (``benchmarks/preset_memory.py``) as markdown."""

from __future__ import annotations


def preset_memory(r: dict) -> list[str]:
    """Expected memory of the paper presets: the benchmark writes its own markdown table rows."""
    gib = 2 ** 30
    return [f"\"Fits\" means a total of at most {r['fits_if_total_at_most_bytes'] / gib:.0f} GiB on a "
            f"{r['card_bytes'] / 1e9:.0f} GB card ({r['card_bytes'] / gib:.0f} GiB). {r.get('method', '')}", "",
            *r["table"]]
