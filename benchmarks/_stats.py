"""Helpers the benchmark scripts share: a run folder's start time (intervals: forethought.eval.stats)."""

from __future__ import annotations

import json
import time
from pathlib import Path


def run_started(run_dir: Path) -> float | None:
    """When a run folder's run started (epoch seconds, from its env.json), or None when it has none."""
    env = run_dir / "env.json"
    if not env.is_file():
        return None
    return time.mktime(time.strptime(json.loads(env.read_text())["started"][:19], "%Y-%m-%dT%H:%M:%S"))
